"""``reme start job=procedure_export dest=...`` in a real process: the answer on stdout, exit 0;
a refusal on stderr, exit 1; the start-up sends nothing to the embedding provider (the export reads only files)."""

from __future__ import annotations

import json

import pytest

from helpers import EmbeddingEndpoint, write_word_tokenizer
from helpers.agent_skills import skill_problems
from helpers.cli import CLEANUP, INSPECT, REBUILD, make_reme, write_experience, write_trajectory


@pytest.mark.slow
def test_one_shot_export_from_the_command_line(tmp_path):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    write_trajectory(ws)
    for name, record in (("rebuild-search.json", REBUILD), ("inspect-logs.json", INSPECT), ("cleanup.json", CLEANUP)):
        write_experience(ws, name, record)
    with EmbeddingEndpoint(64) as endpoint:
        endpoint.failing = True  # a start that indexed would call it
        reme = make_reme(tmp_path, endpoint, write_word_tokenizer(tmp_path / "tok" / "tokenizer.json"))
        first = reme.start_job("procedure_export", ws, f"dest={dest}")
        again = reme.start_job("procedure_export", ws, f"dest={dest}")
        refused = reme.start_job("procedure_export", ws, "dest=skills")
        requests = endpoint.requests
    assert first.returncode == 0, first.stderr[-3000:]
    answer = json.loads(first.stdout)
    assert answer["status"] == "ok" and answer["skills"] == 3 and len(answer["created"]) == 4, answer
    assert all(skill_problems(dest / name) == [] for name in ("rebuild-search", "inspect-logs", "cleanup"))
    assert again.returncode == 0 and json.loads(again.stdout)["unchanged"] == 4
    assert (
        refused.returncode == 1
        and json.loads(refused.stderr.strip().splitlines()[-1])["error"]["code"] == "invalid_argument"
    )
    assert requests == 0

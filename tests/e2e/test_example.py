"""The README's first command and the example workspace it searches.

The command is read from the README itself (the first line of its first ``bash`` block), so the README cannot drift
from what is tested: everything after the install runs as written, with the example copied into a temporary directory
instead of ``/tmp/procedure-example`` and an environment without any ``EMBEDDING_*``, ``LLM_*`` or ``REME_*`` value
(the embedded embedder, offline).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real `reme` processes, the embedded model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bfcl-workspace"
REME = Path(sys.executable).parent / "reme"
README_DEST = "/tmp/procedure-example"
STATE = Path("metadata") / "procedure" / "default"


def first_command() -> list[str]:
    """The README's first command, split at ``&&``."""
    block = re.search(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    assert block, "the README has no bash block"
    return [part.strip() for part in block.group(1).splitlines()[0].split("&&")]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_"))}
    env.pop("PYTHONPATH", None)
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONIOENCODING": "utf-8"})
    return env


def run_reme(args: list[str], cwd: Path) -> dict:
    cwd.mkdir(exist_ok=True)
    (cwd / ".env").write_text("")  # shadows any .env in a parent directory
    proc = subprocess.run([str(REME), *args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_readme_first_command_answers_a_search_with_vector_scores_offline(tmp_path):
    parts = first_command()
    assert parts[0].startswith("python3 -m venv .venv") and any(p.startswith("pip install -e") for p in parts)
    assert f"cp -R examples/bfcl-workspace/. {README_DEST}/" in parts
    search = shlex.split(parts[-1])
    assert search[:3] == ["reme", "start", "job=procedure_search"]
    ws = tmp_path / "procedure-example"
    shutil.copytree(EXAMPLE, ws)  # what `cp -R examples/bfcl-workspace/. <dest>/` makes of a new <dest>
    args = [arg.replace(README_DEST, str(ws)) for arg in search[2:]]
    assert f"workspace_dir={ws}" in args

    answer = run_reme(["start", *args], tmp_path / "cwd")

    assert answer["index_complete"] is True and answer["pending_indexes"] == []
    assert answer.get("vector_search", {}).get("available", True) is True, answer.get("vector_search")
    results = answer["results"]
    assert [r["path"] for r in results] == [  # limit=3: the third candidate is under the shipped relevance floor
        "procedures/post-file-content-as-tweet-with-tags-and-mentions.json",
        "procedures/message-new-contact-after-login.json",
    ]
    for result in results:  # both lists answered: a real vector score and a BM25 score for each
        assert 0 < result["scores"]["vector"] <= 1 and result["scores"]["vector_rank"] >= 1, result["scores"]
        assert result["experience"]["sources"], result
    assert results[0]["scores"]["vector_rank"] == 1


def test_the_example_workspace_is_valid_complete_and_matches_its_records(tmp_path):
    experiences = sorted((EXAMPLE / "procedures").glob("*.json"))
    trajectories = sorted((EXAMPLE / "session" / "trajectories").iterdir())
    imports = [json.loads(p.read_text()) for p in sorted((EXAMPLE / STATE / "imports").glob("*.json"))]
    checkpoints = [json.loads(p.read_text()) for p in sorted((EXAMPLE / STATE / "processing").glob("*.json"))]
    assert len(trajectories) == len(imports) == len(checkpoints) == 20
    assert len(experiences) == 11  # consolidated: imports revise the experiences earlier ones created
    # every copy is the byte-exact one its import recorded, and every import finished
    for record in imports:
        data = (EXAMPLE / record["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == record["sha256"] and len(data) == record["size"], record["path"]
    assert sorted(c["request_id"] for c in checkpoints) == sorted(r["request_id"] for r in imports)
    assert {c["status"] for c in checkpoints} == {"complete"}
    # no derived state is shipped: the views are built from the files
    assert sorted(p.name for p in (EXAMPLE / "metadata").iterdir()) == ["procedure"]
    assert not list(EXAMPLE.rglob("workspace.lock")) and not list(EXAMPLE.rglob("*.tmp"))

    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE, ws)
    answer = run_reme(
        ["start", "job=procedure_reindex", 'plugins=["procedure-memory"]', f"workspace_dir={ws}", "log_to_file=false"],
        tmp_path / "cwd",
    )

    assert answer["status"] == "complete" and answer["indexed"] == 11, answer
    assert answer["invalid_files"] == [] and answer["pending_indexes"] == [] and answer["damaged_metadata"] == []
    for path in experiences:  # the reindex rewrote nothing
        assert (ws / "procedures" / path.name).read_bytes() == path.read_bytes()

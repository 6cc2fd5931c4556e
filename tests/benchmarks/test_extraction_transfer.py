"""The benchmarks' placement of ReMe's released experience library (``benchmarks/_library.py``, used by
``retrieval.py`` and ``extraction.py``): every experience cites a trajectory copy that exists in the workspace, the
real ``procedure_reindex`` indexes them all, and ``procedure_search`` returns them (fake embeddings only).

Run: ``pytest -q tests/benchmarks``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from _library import index_placed, load_library, place_library, source_record  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"


# -- the reference library's placement ------------------------------------------------------------------------------


async def test_placed_library_experiences_cite_a_copied_file_and_come_back_from_search(make_app, tmp_path):
    library = FIXTURES / "experiences.jsonl"
    experiences = load_library(library)
    ws = tmp_path / "ws"
    source = place_library(ws, experiences, library)
    assert (ws / source).read_bytes() == source_record(library)
    assert all(json.loads((ws / "procedures" / e["filename"]).read_text())["sources"] == [source]
               for e in experiences)
    async with make_app(workspace=ws) as app:
        answer = await index_placed(app, experiences)
        assert answer["indexed"] == len(experiences) == 40
        response = await app.run_job("procedure_search", query=experiences[3]["query"], limit=50)
        found = json.loads(response.answer)
        assert found["pending_indexes"] == [] and len(found["results"]) == 40


async def test_index_placed_refuses_experiences_whose_source_is_missing(make_app, tmp_path):
    library = FIXTURES / "experiences.jsonl"
    experiences = load_library(library)[:3]
    ws = tmp_path / "ws"
    source = place_library(ws, experiences, library)
    (ws / source).unlink()  # the broken placement: sources naming a copy that does not exist
    async with make_app(workspace=ws) as app:
        with pytest.raises(RuntimeError, match="did not index the 3 placed experiences"):
            await index_placed(app, experiences)

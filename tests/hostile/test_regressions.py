"""Regression tests for defects found in review: crash windows, pending gates, offsets, JSONL separators, answers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import import_file, memory_of
from helpers import FakeEmbeddingModel
from helpers.corpus import JSONL, replies, write


def stops():
    async def script(tools, prompt, kwargs):
        raise RuntimeError("simulated agent failure")

    return script


# crash between publish_copy and the COPIED record: the published, checksum-valid copy is not reused.
async def test_published_copy_of_a_reserved_record_is_reused_when_the_original_is_gone(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[stops()]) as app:
        ok, ans = await import_file(app, original, request_id="r1")
        assert not ok and ans["status"] == "incomplete"
        records = memory_of(app).workspace.state_dir / "imports"
    # simulate a kill after publish_copy() but before registry.put(status=COPIED)
    record_path = records / f"{hashlib.sha256(b'r1').hexdigest()}.json"
    raw = json.loads(record_path.read_text())
    raw["status"] = "reserved"
    record_path.write_text(json.dumps(raw))
    original.unlink()  # spec: once the workspace copy is published, the original may be deleted
    async with make_app(scripts=[replies()]) as app:
        ok, ans = await import_file(app, original, request_id="r1")
        assert ok and ans["status"] == "complete", ans


# a segment's own write left PUBLISHED (crash before indexing) and still unindexable after restart does
# not block the segment from advancing.
async def test_segment_with_published_but_pending_write_cannot_advance_after_restart(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def leaves_pending_then_fails(tools, prompt, kwargs):
        ok, ans = await tools.call(
            "procedure_create",
            filename="a.json",
            operation_key="k1",
            description="d",
            when_to_use="w",
            content="REJECTED content",
        )
        assert ans["status"] == "index_pending"
        raise RuntimeError("process killed")

    model = FakeEmbeddingModel(64)
    model.reject = {"REJECTED"}
    async with make_app(scripts=[leaves_pending_then_fails], embedding=model) as app:
        ok, ans = await import_file(app, original, request_id="p1")
        assert not ok
        journal = memory_of(app).workspace.journal
        [op] = journal.records("p1")
        op_path = journal.open_file("p1", "k1")  # index_pending: an open record
    # simulate a kill after set_status(PUBLISHED) but before indexing finished
    raw = json.loads(op_path.read_text())
    raw["status"] = "published"
    op_path.write_text(json.dumps(raw))
    model2 = FakeEmbeddingModel(64)
    model2.reject = {"REJECTED"}  # the content is still rejected after the restart
    async with make_app(scripts=[replies()], embedding=model2) as app:
        assert "procedures/a.json" in memory_of(app).workspace.pending
        ok, ans = await import_file(app, original, request_id="p1")
        # spec: "A segment with its own pending writes cannot advance"
        assert not ok and ans["error"]["code"] == "pending_writes", ans


# the token cap of procedure_read returns "" (and next_offset == offset) for tokenizers without offsets.
def test_prefix_within_without_offsets_keeps_a_non_empty_prefix():
    from reme_procedure_memory.tokens import TokenCounter

    class SlowEncoder:  # like _Transformers for a slow tokenizer: ids but no offsets
        def count(self, text):
            return len(text.split())

        def encode(self, text):
            return list(range(len(text.split()))), []

    counter = TokenCounter("slow", encoder=SlowEncoder())
    assert counter.prefix_within("a b c d e f", 3).split() == ["a", "b", "c"]


# valid JSONL whose strings hold raw U+2028 / U+2029 / U+0085 is rejected as malformed (str.splitlines).
@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85"])
def test_jsonl_lines_split_only_on_newline(sep):
    from reme_procedure_memory.extraction.formats import decode_trajectory

    line = json.dumps({"role": "user", "content": f"first{sep}second"}, ensure_ascii=False)
    json.loads(line)  # a valid JSON value
    data = (line + "\n" + line + "\n").encode("utf-8")
    assert decode_trajectory(data, "run.jsonl")


# an unexpected failure during an import answers plain text without the (possibly generated) request_id.
async def test_unexpected_import_failure_still_answers_json_with_the_request_id(make_app, tmp_path, monkeypatch):
    from reme_procedure_memory.extraction import loop as extraction

    original = write(tmp_path, "run.jsonl", JSONL)

    async def boom(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(extraction.Extraction, "run", boom)
    async with make_app(scripts=[]) as app:
        response = await app.run_job("procedure_auto_memory", file=str(original), filename="run.jsonl")
        assert not response.success
        answer = json.loads(response.answer)  # Design §8: every answer is a JSON object
        assert answer.get("request_id"), answer


# a new journal scope directory is created without fsync of its parent: after power loss the intent
# record written "before the publish" can vanish with its directory.
def test_new_journal_directories_are_made_durable(tmp_path, monkeypatch):
    from reme_procedure_memory.storage import atomic
    from reme_procedure_memory.storage.journal import Operation, OperationJournal

    synced: list[Path] = []
    real = atomic.fsync_dir
    monkeypatch.setattr(atomic, "fsync_dir", lambda d: (synced.append(Path(d)), real(d)))  # every durable mkdir
    journal = OperationJournal(tmp_path / "operations")
    (tmp_path / "operations").mkdir()
    journal.put(
        Operation(
            scope="req",
            key="k",
            tool="create",
            request="r",
            path="procedures/a.json",
            target="{}",
            expected_version=None,
        )
    )
    assert tmp_path / "operations" in synced, synced

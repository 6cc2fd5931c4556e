"""Trust in the derived state: never a silent wrong answer, never a lost retried write, never a hang,
never a raw traceback. Each test failed on the main it was written against.

- after an embedding-model change, records replayed from a view's log kept the old model's vectors (silent)
- a failed write retried identically on resume was refused, and the import then ended ``complete`` without it
- a start whose reconciliation leaves a view with no live document hung forever (a lock of ours re-entered through
  ReMe's base class), holding the workspace lock
- a start that must save its views died with an ``OSError`` traceback instead of ``storage_error``/``disk_full``
- smaller: a zero-filled log tail discarded the whole view; a deleted MANIFEST was rebuilt without a log line; a
  damaged checkpoint was missing from reindex's ``damaged_metadata``; ReMe's stale temp files were never removed
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers import TESTS, FakeEmbeddingModel, place_unicorn_experiences, summary
from helpers.corpus import JSONL, corpus, write, write_corpus
from helpers.faults import Faults
from helpers.views import branch_scores, edit_by_hand, fresh_copy, indexed_corpus

# -- vectors of another embedding model -----------------------------------------------------------------------------


async def test_an_embedding_change_re_embeds_the_records_held_in_the_views_logs(make_app, tmp_path):
    ws = await indexed_corpus(make_app, tmp_path / "ws")
    edited = [name for name, _, _ in corpus()[:6]]
    edit_by_hand(ws, edited)
    async with make_app(workspace=ws):
        pass  # the start reconciles the hand edits into the views' logs
    logs = sorted((ws / "metadata" / "file_store").glob("*.view/*.log"))
    assert len(logs) == 2 and all(p.stat().st_size for p in logs)  # the edits live in the logs only
    queries = [q for _, _, q in corpus()[:8]] + ["after a schema migration re-run the migration check"]

    other = FakeEmbeddingModel(64, salt="b")  # another embedding model: every stored vector is of the wrong space
    async with make_app(workspace=ws, embedding=other) as app:
        restarted = await branch_scores(app, queries)
        embedded = {t for call in other.calls for t in call}
        assert {json.loads((ws / "procedures" / n).read_text())["when-to-use"] for n in edited} <= embedded
    async with make_app(
        workspace=fresh_copy(ws, tmp_path / "fresh"), embedding=FakeEmbeddingModel(64, salt="b")
    ) as app:
        rebuilt = await branch_scores(app, queries)
    assert restarted == rebuilt
    async with make_app(workspace=ws, embedding=FakeEmbeddingModel(64, salt="b")) as app:
        assert await branch_scores(app, queries) == rebuilt  # as persisted by the restart
        ok, ans = await run_job(app, "procedure_reindex")
        assert ok and ans["status"] == "complete", ans
        assert await branch_scores(app, queries) == rebuilt  # the reindex reused no vector of another space


async def test_every_upsert_log_entry_names_its_vector_space(make_app, tmp_path):
    ws = await indexed_corpus(make_app, tmp_path / "ws")
    edit_by_hand(ws, [corpus()[0][0]])
    async with make_app(workspace=ws) as app:
        space = memory_of(app).embedding_store.vector_space_id
    from reme_procedure_memory.search.view_store.state import ViewState

    for directory in sorted((ws / "metadata" / "file_store").glob("*.view")):
        *_, entries = ViewState(directory).read()
        upserts = [e for e in entries if e["op"] == "upsert"]
        assert upserts and all(e["vector_space"] == space for e in upserts)


# -- identical retries of failed writes -----------------------------------------------------------------------------


def one_create(name: str, key: str, answers: list):
    async def script(tools, prompt, kwargs):
        answers.append(
            await tools.call(
                "procedure_create",
                filename=name,
                operation_key=key,
                description=f"About {name}",
                when_to_use=f"When {name} matters",
                content=f"Do the {name} steps.",
            )
        )
        return summary(f"wrote {name}")

    return script


async def test_an_identical_retry_on_resume_publishes_the_write_that_failed(make_app, tmp_path, monkeypatch):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)
    answers: list = []
    async with make_app(workspace=ws, scripts=[one_create("a.json", "k-a", answers)]) as app:
        faults.denied = {ws / "procedures"}
        ok, ans = await import_file(app, original, request_id="r-1")
        assert not ok and ans["error"]["code"] == "write_failed", ans
        assert answers[-1][1]["error"]["code"] == "storage_error"
    faults.denied = set()  # the cause is fixed; the model retries the identical call, as the prompt tells it to
    async with make_app(workspace=ws, scripts=[one_create("a.json", "k-a", answers)]) as app:
        ok, ans = await import_file(app, original, request_id="r-1")
        assert answers[-1][0] and answers[-1][1]["status"] == "created", answers[-1]
        assert ok and ans["status"] == "complete" and ans["experiences"]["created"] == ["procedures/a.json"], ans
        assert (ws / "procedures" / "a.json").is_file()
        assert memory_of(app).workspace.journal.get("r-1", "k-a").status == "indexed"


async def test_a_failure_stays_on_the_checkpoint_until_a_later_write_corrects_it(make_app, tmp_path, monkeypatch):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)
    answers: list = []

    async def writes_nothing(tools, prompt, kwargs):
        assert "procedures/a.json" in prompt and "FAILED" in prompt, prompt  # the ledger still shows the failure
        return summary("nothing new")

    async with make_app(workspace=ws, scripts=[one_create("a.json", "k-a", answers)]) as app:
        faults.denied = {ws / "procedures"}
        ok, ans = await import_file(app, original, request_id="r-1")
        assert not ok and ans["error"]["code"] == "write_failed", ans
    faults.denied = set()
    async with make_app(workspace=ws, scripts=[writes_nothing]) as app:
        ok, ans = await import_file(app, original, request_id="r-1")
        # an attempt that does not correct the failure does not erase it: the segment still cannot advance
        assert not ok and ans["error"]["code"] == "write_failed", ans
        assert [f["path"] for f in ans["failed_writes"]] == ["procedures/a.json"]
    async with make_app(workspace=ws, scripts=[one_create("a.json", "k-a2", answers)]) as app:
        ok, ans = await import_file(app, original, request_id="r-1")  # a new key for the same write corrects it
        assert ok and ans["status"] == "complete" and ans["experiences"]["created"] == ["procedures/a.json"], ans


async def test_within_a_run_an_identical_retry_after_the_cause_is_fixed_publishes(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)
    fields = {"description": "d", "when_to_use": "w", "content": "c"}
    async with make_app(workspace=ws) as app:
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        faults.denied = {ws / "procedures"}
        ok, ans = await call_tool(app, run, "procedure_create", filename="a.json", operation_key="k", **fields)
        assert not ok and ans["error"]["code"] == "storage_error", ans
        assert "same operation_key" in ans["error"]["message"]  # the answer says how to retry
        faults.denied = set()
        ok, ans = await call_tool(app, run, "procedure_create", filename="a.json", operation_key="k", **fields)
        assert ok and ans["status"] == "created", ans
        assert run.failed_writes == {}
        # an update that failed to publish, retried identically, publishes too
        faults.denied = {ws / "procedures"}
        update = {"path": "procedures/a.json", "expected_version": ans["version"], "content": "c2"}
        ok, failed = await call_tool(app, run, "procedure_update", operation_key="u", **update)
        assert not ok and failed["error"]["code"] == "storage_error"
        faults.denied = set()
        ok, updated = await call_tool(app, run, "procedure_update", operation_key="u", **update)
        assert ok and updated["status"] == "updated" and run.failed_writes == {}
        assert json.loads((ws / "procedures/a.json").read_text())["content"] == "c2"


async def test_an_identical_retry_whose_precondition_no_longer_holds_is_refused_and_the_failure_stays(
    make_app, tmp_path, monkeypatch
):
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)
    fields = {"description": "d", "when_to_use": "w", "content": "c"}
    async with make_app(workspace=ws) as app:
        source = add_trajectory(app)
        run = memory_of(app).grants.begin_attempt("req", [source])
        faults.denied = {ws / "procedures"}
        ok, ans = await call_tool(app, run, "procedure_create", filename="a.json", operation_key="k", **fields)
        assert not ok
        faults.denied = set()
        other = memory_of(app).grants.begin_attempt("other", [source])  # meanwhile another write took the name
        ok, _ = await call_tool(
            app,
            other,
            "procedure_create",
            filename="a.json",
            operation_key="x",
            description="x",
            when_to_use="x",
            content="x",
        )
        assert ok
        ok, ans = await call_tool(app, run, "procedure_create", filename="a.json", operation_key="k", **fields)
        assert not ok and ans["error"]["code"] == "already_exists", ans
        assert json.loads((ws / "procedures/a.json").read_text())["content"] == "x"  # never overwritten
        assert "procedures/a.json" in run.failed_writes


# -- a view with no live document -----------------------------------------------------------------------------------

STARTER = """
import asyncio, json, sys
sys.path[:0] = [{tests!r}, {repo!r}]
from helpers import FakeEmbeddingModel
from reme.application import Application


async def main():
    app = Application(plugins=["procedure-memory"], workspace_dir={ws!r}, service={{"backend": "cli"}},
                      enable_logo=False, log_to_console=False, log_to_file=False,
                      components={{"procedure_memory": {{"default": {{"tokenizer_source": {tokenizer!r}}}}},
                                   "as_embedding": {{"procedure": {{"dimensions": 64}}}}}})
    model = FakeEmbeddingModel(64, salt={salt!r})
    if {down!r}:
        model.fail_with = RuntimeError("provider down")
    app.context.components["as_embedding"]["procedure"].model = model
    await app.start()
    try:
        response = await app.run_job("procedure_search", query="unicorn service degrades", index="when_to_use")
        print(json.dumps(json.loads(response.answer)))
    finally:
        await app.close()


asyncio.run(main())
"""


def start_and_search(tmp_path: Path, ws: Path, tokenizer: Path, salt: str = "", down: bool = False) -> dict:
    """A new process starts on ``ws`` and searches; it must answer within a minute (a hang fails the test)."""
    script = tmp_path / "start.py"
    tests = TESTS
    script.write_text(
        STARTER.format(
            tests=str(tests), repo=str(tests.parent), ws=str(ws), tokenizer=str(tokenizer), salt=salt, down=down
        )
    )
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the start hung")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize(
    "emptied_by", ["deleting every file", "invalidating every file", "provider down after a model change"]
)
def test_a_start_that_leaves_a_view_with_no_live_document_answers(tmp_path, word_tokenizer, emptied_by):
    ws = tmp_path / "ws"
    place_unicorn_experiences(ws, 6)
    start_and_search(tmp_path, ws, word_tokenizer)  # indexed and persisted
    salt = ""
    if emptied_by == "deleting every file":
        for path in (ws / "procedures").iterdir():
            path.unlink()
    elif emptied_by == "invalidating every file":
        for path in (ws / "procedures").iterdir():
            path.write_text("{not json")
    else:
        salt = "b"
    answer = start_and_search(tmp_path, ws, word_tokenizer, salt=salt, down=salt == "b")
    assert answer["results"] == []
    if emptied_by == "deleting every file":
        assert answer["index_complete"] is True
    else:
        assert len(answer["pending_indexes"]) == 6
    answer = start_and_search(tmp_path, ws, word_tokenizer, salt=salt, down=salt == "b")  # and again
    assert answer["results"] == []


def finishes_in_a_thread(work, timeout: float = 20) -> None:
    """Run ``work()`` in a daemon thread; fail (instead of hanging the suite) when it does not return in time."""
    failure: list[BaseException] = []

    def target():
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "deadlocked: a lock was taken again by the thread that holds it"
    if failure:
        raise failure[0]


async def test_every_reme_base_path_into_our_bm25_lock_finishes(make_app):
    """The paths where ReMe's ``BM25Index`` calls back into a mutation of ours while ours holds the write lock:
    ``optimize_index`` of an index whose every document is deleted calls ``clear``; ``reset_index`` calls ``clear``,
    ``add_docs`` and ``dump``; ``load`` of a damaged file calls ``clear``."""
    from reme.components.keyword_index.bm25_index import BM25Index

    # an index of its own (a view's index would block the test's close if a path deadlocked)
    own = {"keyword_index": {"probe": {"backend": "procedure_bm25", "tokenizer": "procedure"}}}
    async with make_app(components=own) as app:
        index = app.context.components["keyword_index"]["probe"]

        def all_deleted_then_optimize():
            async def run():
                await index.add_docs({"a": "restart the node", "b": "drain the node"})
                await index.delete_docs(["a", "b"])
                await index.optimize_index()

            asyncio.run(run())

        finishes_in_a_thread(all_deleted_then_optimize)
        assert index.n_docs == 0 and index.deleted_fraction == 0

        def reset():
            asyncio.run(index.reset_index({"c": "rotate the keys"}))

        finishes_in_a_thread(reset)
        assert index.search("rotate keys", 5).keys() == {"c"}

        def stock_load_of_a_damaged_file(tmp=Path(index.index_file)):
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(b"not a pickle")
            try:
                asyncio.run(BM25Index.load(index))  # ReMe's own load: a damaged file makes it clear the index
            finally:
                tmp.unlink(missing_ok=True)

        finishes_in_a_thread(stock_load_of_a_damaged_file)
        assert index.n_docs == 0


def test_the_readers_writer_lock_lets_its_writer_re_enter():
    from reme_procedure_memory.search.locks import ReadWriteLock

    lock = ReadWriteLock()

    def nested():
        with lock.write():
            with lock.write():
                with lock.read():
                    pass
            with lock.read():
                pass

    finishes_in_a_thread(nested, timeout=5)
    entered = threading.Event()

    def other_writer():  # another thread still waits for the writer
        with lock.write():
            entered.set()

    with lock.write():
        thread = threading.Thread(target=other_writer, daemon=True)
        thread.start()
        assert not entered.wait(0.2)
    assert entered.wait(5)


# -- a start that cannot save its views -----------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["not writable", "full disk"])
async def test_a_start_that_cannot_save_its_views_says_what_to_do(make_app, tmp_path, monkeypatch, fault):
    """Not writable: the start appends a hand edit to the views' logs. Full disk: the views' state is gone, so the
    start writes new snapshots (each part fsynced; an append is not)."""
    from reme_procedure_memory.errors import StartupError

    ws = await indexed_corpus(make_app, tmp_path / "ws")
    views = ws / "metadata" / "file_store"
    faults = Faults(monkeypatch)
    if fault == "not writable":
        edit_by_hand(ws, [corpus()[0][0]])  # a change the start reconciles, then saves
        faults.denied = {views}
    else:
        for directory in views.glob("*.view"):
            shutil.rmtree(directory)
        faults.full = {views}
    app = make_app.build(workspace=ws)
    with pytest.raises(StartupError) as raised:
        await app.start()
    message = str(raised.value)
    code = "storage_error" if fault == "not writable" else "disk_full"
    assert raised.value.code == code and message.startswith(f"{code}: ") and str(views) in message, message
    assert faults.hits and all(str(views) in hit for hit in faults.hits)
    await app.close()
    faults.denied, faults.full = set(), set()
    async with make_app(workspace=ws) as app:  # the cause fixed, the next start reconciles and saves
        ok, ans = await run_job(app, "procedure_search", query=corpus()[0][2], index="when_to_use")
        assert ok and ans["index_complete"] and ans["results"], ans


# -- logs, manifests, checkpoints and temporary files ---------------------------------------------------------------


async def test_a_zero_filled_log_tail_is_cut_and_the_rest_of_the_view_kept(make_app, tmp_path):
    ws = await indexed_corpus(make_app, tmp_path / "ws")
    edit_by_hand(ws, [corpus()[1][0]])
    async with make_app(workspace=ws) as app:
        expected = await branch_scores(app, [corpus()[1][2]])
    views = sorted((ws / "metadata" / "file_store").glob("*.view"))
    snapshot = {p: p.stat().st_ino for d in views for p in d.iterdir() if p.suffix != ".log"}
    sizes = {}
    for log in (d / "1.log" for d in views):
        sizes[log] = log.stat().st_size
        with open(log, "ab") as handle:
            handle.write(bytes(16))  # a zero-filled tail, as a file system may leave after a power loss
    async with make_app(workspace=ws) as app:
        assert await branch_scores(app, [corpus()[1][2]]) == expected
    # the snapshot was kept (a discarded view is rebuilt into new files) and only the tail was cut
    assert {p: p.stat().st_ino for d in views for p in d.iterdir() if p.suffix != ".log"} == snapshot
    assert {log: log.stat().st_size for log in sizes} == sizes


async def test_a_deleted_manifest_is_named_in_the_log_and_the_view_rebuilt(make_app, tmp_path, caplog):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        expected = await branch_scores(app, [corpus()[2][2]])
    manifest = next((ws / "metadata" / "file_store").glob("*when_to_use_v*.view")) / "MANIFEST.json"
    manifest.unlink()
    messages = []
    app = make_app.build(workspace=ws)
    app.context.components["procedure_memory"]["default"].logger.add(messages.append, level="WARNING")
    await app.start()
    try:
        assert await branch_scores(app, [corpus()[2][2]]) == expected
    finally:
        await app.close()
    assert any("MANIFEST.json" in m and "missing" in m for m in messages), messages


async def test_reindex_lists_a_damaged_checkpoint(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    answers: list = []
    async with make_app(workspace=ws, scripts=[one_create("a.json", "k-a", answers)]) as app:
        ok, ans = await import_file(app, original, request_id="r-1")
        assert ok, ans
        checkpoint = memory_of(app).workspace.checkpoints.path("r-1")
    checkpoint.write_bytes(checkpoint.read_bytes()[:20])
    async with make_app(workspace=ws) as app:
        ok, ans = await run_job(app, "procedure_reindex")
        damaged = [d["path"] for d in ans["damaged_metadata"]]
        assert memory_of(app).to_workspace_relative(checkpoint) in damaged, ans


async def test_stale_temp_files_of_reme_in_the_workspace_metadata_are_removed_at_start(make_app, tmp_path):
    ws = await indexed_corpus(make_app, tmp_path / "ws")
    stale = []
    for kind in ("file_catalog", "file_graph", "file_store", "keyword_index", "embedding_store"):
        directory = ws / "metadata" / kind
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f".some_state.jsonl.zst.{'ab' * 16}.tmp"
        path.write_bytes(b"half written")
        old = time.time() - 60
        os.utime(path, (old, old))
        stale.append(path)
    unrelated = ws / "metadata" / "file_catalog" / "notes.tmp"  # not ReMe's temporary-file name
    unrelated.write_bytes(b"keep")
    async with make_app(workspace=ws):
        assert not any(p.exists() for p in stale)
        assert unrelated.exists()

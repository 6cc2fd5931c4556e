"""Faults that lost or blocked work, and answers a user can act on, in-process.

Every fault is injected at the OS call (the tests run as root, where a read-only directory does not deny writes):
``Faults`` makes ``os.open(..., O_CREAT)`` and ``open()`` for writing fail with EACCES below chosen directories (a
directory that is not writable) and ``os.fsync`` of a regular file fail with ENOSPC (a full disk; delayed-allocation
file systems report it there). Metadata damage is a truncated file. The provider faults use a local embedding endpoint that hangs.

- writes that failed to publish are lost silently: the import answers complete and a resume does nothing
- one damaged metadata record (journal, checkpoint, import record) blocks start, reindex and every import
- a full disk answers internal_error and leaves temporary files behind (ours and ReMe's)
- a hanging embedding provider stalls searches in waves (every search waits the write timeout)
- the next start does not remove the atomic writer's temporary files
- a process refused by the workspace lock rewrites the view files; the lock is released before the last view write
- experience files and copies are created with mode 0600 whatever the umask
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import stat
from pathlib import Path

import pytest

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers import EmbeddingEndpoint, experience_record, place_trajectory, place_unicorn_experiences, summary
from helpers.corpus import JSONL, creates, long_trajectory, replies, summarises, write
from helpers.endpoints import endpoint_components
from helpers.faults import Faults

SEGMENTED = {"procedure_memory": {"default": {"token_limits": {"segment": 60}}}}


def tmp_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


async def one_experience(app) -> None:
    """Create procedures/a.json through the real write tool inside an extraction run."""
    run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
    ok, ans = await call_tool(
        app,
        run,
        "procedure_create",
        filename="a.json",
        operation_key="k",
        description="d",
        when_to_use="w",
        content="c",
    )
    assert ok, ans


# -- failed writes are never lost silently ------------------------------------------------------------------------


async def test_unwritable_experience_directory_stops_the_import_and_the_resume_redoes_the_segment(
    make_app, tmp_path, monkeypatch
):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)
    answers = []

    async def writes_two(tools, prompt, kwargs):
        for name in ("a.json", "b.json"):
            ok, ans = await tools.call(
                "procedure_create",
                filename=name,
                operation_key=f"k-{name}",
                description=f"About {name}",
                when_to_use=f"When {name} matters",
                content=f"Do the {name} steps.",
            )
            answers.append(ans)
        return summary("wrote a and b")

    async def redoes(tools, prompt, kwargs):
        # the resumed attempt sees the failed writes of the earlier attempt in its operation ledger
        assert "procedures/a.json" in prompt and "procedures/b.json" in prompt and "FAILED" in prompt, prompt
        return await creates("a.json", "b.json", key_prefix="retry")(tools, prompt, kwargs)

    async with make_app(workspace=ws, scripts=[writes_two]) as app:
        faults.denied = {ws / "procedures"}  # procedures/ is not writable from the start of the import
        ok, ans = await import_file(app, original, request_id="ro-1")
        assert not ok and ans["status"] == "incomplete", ans  # not "complete" with 0 of 2 experiences written
        assert ans["error"]["code"] == "write_failed"
        assert [a["error"]["code"] for a in answers] == ["storage_error", "storage_error"]
        assert [f["path"] for f in ans["failed_writes"]] == ["procedures/a.json", "procedures/b.json"]
        assert "Permission denied" in ans["error"]["message"] and "procedures/a.json" in ans["error"]["message"]
        assert ans["segments"]["done"] == 0 and "request_id=ro-1" in ans["resume"]
        assert not list((ws / "procedures").iterdir())
    faults.denied = set()  # the cause is fixed
    async with make_app(workspace=ws, scripts=[redoes]) as app:
        ok, ans = await import_file(app, original, request_id="ro-1")
        assert ok and ans["status"] == "complete", ans
        assert sorted(ans["experiences"]["created"]) == ["procedures/a.json", "procedures/b.json"]
        assert sorted(p.name for p in (ws / "procedures").iterdir()) == ["a.json", "b.json"]


async def test_unwritable_journal_from_segment_two_stops_there_and_the_ledger_shows_the_failure(
    make_app, tmp_path, monkeypatch
):
    original = write(tmp_path, "run.jsonl", long_trajectory(12))
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)
    prompts = []

    async def segment(tools, prompt, kwargs):
        prompts.append(prompt)
        number = len(prompts)
        if number == 2:  # the journal's directory becomes unwritable during segment 2
            faults.denied = {ws / "metadata/procedure/default/operations"}
        return await creates(f"part-{number}.json")(tools, prompt, kwargs)

    async with make_app(workspace=ws, scripts=[segment] * 10, components=SEGMENTED) as app:
        ok, ans = await import_file(app, original, request_id="j-1")
        total = ans["segments"]["total"]
        assert total >= 3
        assert not ok and ans["error"]["code"] == "write_failed", ans
        assert ans["segments"]["done"] == 1  # segment 2 did not advance
        assert [f["path"] for f in ans["failed_writes"]] == ["procedures/part-2.json"]
        assert sorted(p.name for p in (ws / "procedures").iterdir()) == ["part-1.json"]
    faults.denied = set()
    prompts.clear()

    async def resumed(tools, prompt, kwargs):
        prompts.append(prompt)
        if len(prompts) == 1:  # segment 2 again: the journal never recorded the failure, the checkpoint did
            assert "procedures/part-2.json" in prompt and "FAILED" in prompt, prompt
        return await creates(f"part-{len(prompts) + 1}.json", key_prefix="r")(tools, prompt, kwargs)

    async with make_app(workspace=ws, scripts=[resumed] * 10, components=SEGMENTED) as app:
        ok, ans = await import_file(app, original, request_id="j-1")
        assert ok and ans["segments"] == {"done": total, "total": total}, ans
        assert sorted(p.name for p in (ws / "procedures").iterdir()) == [f"part-{n}.json" for n in range(1, total + 1)]


async def test_a_failure_corrected_within_the_segment_lets_it_advance(make_app, tmp_path, monkeypatch):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)

    async def corrects(tools, prompt, kwargs):
        faults.denied = {ws / "procedures"}
        ok, ans = await tools.call(
            "procedure_create",
            filename="a.json",
            operation_key="k1",
            description="d",
            when_to_use="when the disk was busy",
            content="c",
        )
        assert not ok and ans["error"]["code"] == "storage_error"
        faults.denied = set()
        # the same write under another key succeeds: nothing is lost, the segment may advance
        ok, ans = await tools.call(
            "procedure_create",
            filename="a.json",
            operation_key="k2",
            description="d",
            when_to_use="when the disk was busy",
            content="c",
        )
        assert ok, ans
        return summary("s")

    async with make_app(workspace=ws, scripts=[corrects]) as app:
        ok, ans = await import_file(app, original, request_id="fix-1")
        assert ok and ans["status"] == "complete" and ans["experiences"]["created"] == ["procedures/a.json"], ans


# -- one damaged metadata file does not block the workspace -------------------------------------------------------


async def interrupted_import(make_app, ws: Path, original: Path, request_id: str) -> None:
    """An import of ``original`` that wrote one experience in segment 1 and stopped in segment 2 (agent failure)."""

    async def fails(tools, prompt, kwargs):
        raise RuntimeError("upstream 529 overloaded")

    async with make_app(workspace=ws, scripts=[creates("first-part.json"), fails], components=SEGMENTED) as app:
        ok, ans = await import_file(app, original, request_id=request_id)
        assert not ok and ans["error"]["code"] == "agent_failed" and ans["segments"]["done"] == 1, ans


def truncate(path: Path) -> bytes:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path.read_bytes()


async def check_workspace_still_serves(make_app, ws: Path, tmp_path: Path) -> dict:
    """Start, search, reindex and another import all work; returns the reindex answer."""
    other = write(tmp_path, "other.log", "user: the queue backs up\nassistant: drained the queue\n")
    async with make_app(
        workspace=ws, scripts=[creates("drain-queue.json", key_prefix="o")], components=SEGMENTED
    ) as app:
        ok, found = await run_job(app, "procedure_search", query="first part matters", index="when_to_use")
        assert ok and found["results"][0]["path"] == "procedures/first-part.json", found
        ok, reindexed = await run_job(app, "procedure_reindex")
        assert ok, reindexed
        ok, ans = await import_file(app, other, request_id="other-1")
        assert ok and ans["experiences"]["created"] == ["procedures/drain-queue.json"], ans
    return reindexed


@pytest.mark.parametrize("kind", ["journal", "checkpoint", "import"])
async def test_one_damaged_record_blocks_only_its_own_import_once(make_app, tmp_path, kind):
    original = write(tmp_path, "run.jsonl", long_trajectory(12))
    ws = tmp_path / "ws"
    await interrupted_import(make_app, ws, original, "dmg-1")
    state = ws / "metadata/procedure/default"
    record = {
        # a final record (open ones are read at start; the reindex's full check finds final ones)
        "journal": next(p for p in sorted((state / "operations").glob("*/*.json")) if ".open." not in p.name),
        "checkpoint": next((state / "processing").glob("*.json")),
        "import": next((state / "imports").glob("*.json")),
    }[kind]
    damaged = truncate(record)

    reindexed = await check_workspace_still_serves(make_app, ws, tmp_path)
    if kind in ("journal", "import"):  # scanned at start: skipped and reported, left in place for its import
        assert [d["path"] for d in reindexed["damaged_metadata"]] == [str(record.relative_to(ws))], reindexed

    resumed = []

    async def segment(tools, prompt, kwargs):
        resumed.append(prompt)
        return summary(f"segment {len(resumed)}")

    async with make_app(workspace=ws, scripts=[segment] * 10, components=SEGMENTED) as app:
        ok, ans = await import_file(app, original, request_id="dmg-1")
        assert not ok and ans["status"] == "incomplete" and ans["error"]["code"] == "metadata_damaged", ans
        message = ans["error"]["message"]
        assert str(record) in message and "Run the same command again" in message, message
        assert "request_id=dmg-1" in ans["resume"] and resumed == []
        aside = record.with_name(record.name + ".damaged")
        assert not record.exists() and aside.read_bytes() == damaged  # set aside, never deleted
        ok, ans = await import_file(app, original, request_id="dmg-1")
        assert ok and ans["status"] == "complete", ans
    # no second copy of the trajectory: the import record was rebuilt around the copy this request made
    copies = sorted(p.name for p in (ws / "session/trajectories").iterdir())
    assert copies == ["other.log", "run.jsonl"], copies
    assert ans["path"] == "session/trajectories/run.jsonl"


async def test_an_import_record_deleted_by_hand_is_rebuilt_without_a_second_copy(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", long_trajectory(12))
    ws = tmp_path / "ws"
    await interrupted_import(make_app, ws, original, "del-1")
    for record in (ws / "metadata/procedure/default/imports").glob("*.json"):
        record.unlink()
    async with make_app(workspace=ws, scripts=[summarises()] * 10, components=SEGMENTED) as app:
        ok, ans = await import_file(app, original, request_id="del-1")
        assert ok and ans["path"] == "session/trajectories/run.jsonl", ans
        assert ans["segments"]["done"] == ans["segments"]["total"]
    assert sorted(p.name for p in (ws / "session/trajectories").iterdir()) == ["run.jsonl"]


# -- a full disk ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", ["session/trajectories", "metadata/procedure/default/processing"])
async def test_full_disk_for_the_copy_or_a_checkpoint_answers_disk_full_and_leaves_nothing_half_written(
    make_app, tmp_path, monkeypatch, directory
):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)
    async with make_app(workspace=ws, scripts=[replies(), replies()]) as app:
        faults.full = {ws / directory}
        ok, ans = await import_file(app, original, request_id="full-1")
        assert not ok and ans["status"] == "incomplete" and ans["error"]["code"] == "disk_full", ans
        assert "Free space" in ans["error"]["message"] and "resume" in ans["error"]["message"]
        assert "request_id=full-1" in ans["resume"]
        assert faults.hits and tmp_files(ws) == []  # the temporary file was removed
        if directory == "session/trajectories":
            assert list((ws / directory).iterdir()) == []  # no copy, no half copy
        faults.full = set()
        ok, ans = await import_file(app, original, request_id="full-1")
        assert ok and ans["status"] == "complete" and ans["path"] == "session/trajectories/run.jsonl", ans


async def test_full_disk_for_the_agent_writes_stops_the_segment_with_disk_full(make_app, tmp_path, monkeypatch):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    faults = Faults(monkeypatch)
    async with make_app(workspace=ws, scripts=[creates("a.json")]) as app:
        faults.full = {ws / "procedures"}
        ok, ans = await import_file(app, original, request_id="full-2")
        assert not ok and ans["error"]["code"] == "disk_full", ans
        assert [f["code"] for f in ans["failed_writes"]] == ["disk_full"]
        assert list((ws / "procedures").iterdir()) == []


async def test_full_disk_while_persisting_the_views_leaves_no_temporary_files(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    real_replace = os.replace

    def full_disk_for_views(src, dst, *args, **kwargs):
        if "procedure_when_to_use" in str(dst):  # ReMe's own writers of the plugin's view files
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    async with make_app(workspace=ws) as app:
        await one_experience(app)
        monkeypatch.setattr(os, "replace", full_disk_for_views)
    monkeypatch.setattr(os, "replace", real_replace)
    # ReMe's writers leave ``.<file>.<uuid>.tmp`` behind when the disk is full; the plugin removes those of its stores
    assert tmp_files(ws) == []


# -- a hanging embedding provider ------------------------------------------------------------------------------------


def hanging_components(endpoint, **settings) -> dict:
    components = endpoint_components(endpoint)
    components["procedure_memory"]["default"].update(settings)
    return components


@pytest.mark.slow
async def test_searches_answer_within_the_search_timeout_while_a_pending_retry_hangs(make_app, tmp_path):
    ws = tmp_path / "ws"
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws)
    (ws / "procedures/drain.json").write_text(
        json.dumps(experience_record("Drain a node", "Before rebooting a cluster node", "Cordon, drain, reboot."))
    )
    with EmbeddingEndpoint(64) as endpoint:
        endpoint.failing = True  # fails fast at start: the file is pending
        # a write timeout that no search may ever wait for; searches get 0.2 s
        components = hanging_components(
            endpoint, embedding_timeout_seconds=3600, search_embedding_timeout_seconds=0.2, vector_cooldown_seconds=0
        )
        async with make_app(workspace=ws, embedding=False, components=components) as app:
            assert set(memory_of(app).workspace.pending) == {"procedures/drain.json"}
            endpoint.failing, endpoint.hanging = False, True
            # pending_retry_seconds is 0: this search starts a retry round that hangs for the write timeout
            ok, ans = await asyncio.wait_for(run_job(app, "procedure_search", query="rebooting cluster node"), 30)
            assert ok and ans["index_complete"] is False
            assert ans["vector_search"]["available"] is False and "0.2 s" in ans["vector_search"]["error"]


@pytest.mark.slow
async def test_one_probe_at_a_time_while_the_provider_hangs_and_writes_keep_their_timeout(make_app, tmp_path):
    ws = tmp_path / "ws"
    place_unicorn_experiences(ws, 3)
    with EmbeddingEndpoint(64) as endpoint:
        endpoint.hanging = True
        components = hanging_components(
            endpoint,
            embedding_timeout_seconds=1,
            search_embedding_timeout_seconds=0.2,
            vector_cooldown_seconds=0,
            pending_retry_seconds=3600,
        )
        async with make_app(workspace=ws, embedding=False, components=components) as app:
            # the start waited for one provider call (one write timeout), then marked every file pending
            assert endpoint.requests == 1 and len(memory_of(app).workspace.pending) == 3
            before = endpoint.requests
            answers = await asyncio.gather(
                *(run_job(app, "procedure_search", query=f"unicorn{i % 3} degrades") for i in range(20))
            )
            assert all(ok and ans["vector_search"]["available"] is False for ok, ans in answers)
            # one search probed the provider; the others answered from BM25 at once instead of joining a wave
            assert endpoint.requests - before == 1, endpoint.requests - before
            run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
            ok, ans = await call_tool(
                app,
                run,
                "procedure_create",
                filename="x.json",
                operation_key="x",
                description="d",
                when_to_use="w",
                content="c",
            )
            assert ans["status"] == "index_pending" and "within 1 s" in ans["error"]["message"]  # write timeout
            endpoint.hanging = False
            ok, ans = await run_job(app, "procedure_search", query="unicorn1 degrades")
            assert ok and "vector_search" not in ans  # the next probe found the provider back


# -- temporary files of the atomic writer ----------------------------------------------------------------------------


async def test_start_removes_leftover_temporary_files_and_never_reports_them(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        await one_experience(app)
        store = memory_of(app).view_when_to_use
    state = ws / "metadata/procedure/default"
    leftovers = [
        ws / "session/trajectories/.run.jsonl.x8k2_q1z.tmp",  # mkstemp's name (older versions)
        ws / "session/trajectories/.big.jsonl.1a2b3c4d.tmp",
        ws / "procedures/.a.json.0f0f0f0f.tmp",
        state / "imports/.abc.json.12345678.tmp",
        state / "processing/.abc.json.87654321.tmp",
        next((state / "operations").iterdir()) / ".def.json.abcdef12.tmp",
        store.chunks_path.with_name(f".{store.chunks_path.name}.{'ab' * 16}.tmp"),  # ReMe's writer
    ]
    for path in leftovers:
        path.write_bytes(b'{"partial": ')
    kept = [ws / "session/trajectories/.reme-0123456789abcdef0123456789abcdef.tmp", ws / "procedures/.keep"]
    for path in kept:
        path.write_bytes(b"not ours")
    async with make_app(workspace=ws) as app:
        assert [p for p in leftovers if p.exists()] == []
        assert all(p.exists() for p in kept)
        ok, ans = await run_job(app, "procedure_reindex")
        assert ok and ans["indexed"] == 1 and ans["invalid_files"] == [] and ans["pending_indexes"] == []


# -- the workspace lock ----------------------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}


async def test_a_refused_process_writes_nothing(make_app, tmp_path):
    from reme_procedure_memory.errors import WorkspaceBusy

    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        await one_experience(app)
    async with make_app(workspace=ws):
        before = snapshot(ws)
        await asyncio.sleep(0.01)
        with pytest.raises(WorkspaceBusy, match=r"pid=\d+"):
            async with make_app(workspace=ws):
                pass
        assert snapshot(ws) == before  # no view file rewritten on the way out


async def test_the_lock_is_held_during_every_view_write_at_close(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    lock = ws / "metadata/procedure/default/workspace.lock"
    writes = []
    real_replace = os.replace

    def lock_held() -> bool:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing this descriptor drops a lock taken through it
        return False

    def recording_replace(src, dst, *args, **kwargs):
        # ReMe's view files are named after the store; the plugin's view state is a directory per store
        if "metadata" in str(dst) and ("procedure" in Path(dst).name or Path(dst).parent.name.startswith("procedure")):
            writes.append((Path(dst).name, lock_held()))
        return real_replace(src, dst, *args, **kwargs)

    async with make_app(workspace=ws) as app:
        await one_experience(app)
        monkeypatch.setattr(os, "replace", recording_replace)
    monkeypatch.setattr(os, "replace", real_replace)
    assert writes, "the views were not persisted at close"
    assert [name for name, held in writes if not held] == [], writes
    assert not lock_held()  # released after the last write


# -- file modes follow the umask -------------------------------------------------------------------------------------


async def test_experiences_and_copies_follow_the_umask_and_keep_a_chosen_mode(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    previous = os.umask(0o022)
    try:
        async with make_app(scripts=[creates("a.json")]) as app:
            ok, ans = await import_file(app, original)
            assert ok, ans
            ws = memory_of(app).workspace_path
            mode = lambda rel: stat.S_IMODE((ws / rel).stat().st_mode)  # noqa: E731
            assert mode("procedures/a.json") == 0o644 and mode(ans["path"]) == 0o644
            (ws / "procedures/a.json").chmod(0o640)  # a mode the user chose survives an update
            run = memory_of(app).grants.begin_attempt("req", [ans["path"]])
            ok, found = await run_job(app, "procedure_read", path="procedures/a.json")
            ok, updated = await call_tool(
                app,
                run,
                "procedure_update",
                path="procedures/a.json",
                expected_version=found["version"],
                content="new",
                operation_key="u",
            )
            assert ok, updated
            assert mode("procedures/a.json") == 0o640
    finally:
        os.umask(previous)

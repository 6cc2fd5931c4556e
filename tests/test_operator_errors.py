"""The one line an operator gets for a failure (``operator_errors.py``) and what a refused one-shot job leaves behind
(``storage/presence.py``), in-process; ``tests/e2e/test_e2e_failures.py`` runs the real ``reme`` processes."""

from __future__ import annotations

import errno
import sys
import time

import pytest
from reme_procedure_memory.operator_errors import operator_line, unknown_job_sentence
from reme_procedure_memory.errors import (
    ErrorCode,
    ServiceStartAborted,
    SettingsError,
    StartStorageError,
    UnknownJob,
    WorkspaceBusy,
    WorkspaceNotFound,
)
from reme_procedure_memory.storage.presence import holds_plugin_state, remove_created_here


def caught(function, *args):
    try:
        function(*args)
    except BaseException as exc:  # noqa: BLE001 - the exception under test
        return exc, sys.exc_info()[2]
    raise AssertionError("nothing raised")


def _setup_workspace_directories(path):  # named as ReMe's Application method that creates the workspace
    raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path)


def elsewhere(path):
    raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path)


def test_each_startup_error_is_its_code_and_its_sentence_on_one_line():
    assert operator_line(WorkspaceBusy("in use\n  by pid=7")) == "workspace_busy: in use by pid=7"
    assert operator_line(SettingsError("bad key")) == "invalid_settings: bad key"
    assert operator_line(WorkspaceNotFound("no workspace")) == "workspace_not_found: no workspace"
    full = StartStorageError(OSError(errno.ENOSPC, "No space left on device", "/ws/metadata/x"))
    line = operator_line(full)
    assert line == str(full) and line.startswith(
        "disk_full: Writing /ws/metadata/x failed: No space left on device (errno ENOSPC)."
    )  # the code is not repeated
    assert operator_line(ServiceStartAborted(full)) == line  # a service's start answers the same line


def test_remes_own_workspace_set_up_is_a_storage_line_and_other_os_errors_are_not_ours():
    exc, tb = caught(_setup_workspace_directories, "/tmp/a-file/ws")
    assert operator_line(exc, tb) == (
        "storage_error: Writing /tmp/a-file/ws failed: Not a directory (errno ENOTDIR). Make sure /tmp/a-file exists "
        "and is writable by this process (permissions, a read-only mount, a failing disk); nothing half-written was "
        "kept. Then start again."
    )
    exc, tb = caught(elsewhere, "/tmp/a-file/ws")
    assert operator_line(exc, tb) is None  # the previous hook prints it as before
    assert operator_line(ValueError("boom")) is None


def test_an_unknown_procedure_job_names_the_closest_job():
    line = operator_line(KeyError("Job 'procedure_serch' not found"))
    assert line.startswith("unknown_job: There is no job `procedure_serch`; did you mean `procedure_search`? ")
    assert operator_line(KeyError("Job 'serch' not found")) is None  # ReMe's own jobs: ReMe's answer
    assert "did you mean" not in unknown_job_sentence("procedure_zzzzzzzz", served_only=False)
    served = unknown_job_sentence("procedure_reindx", served_only=True)  # the client: only served jobs are offered
    assert "procedure_reindex" not in served and served.endswith(
        "jobs of procedure-memory: procedure_history, "
        "procedure_imports, procedure_list, procedure_read, procedure_search."
    )
    hidden = unknown_job_sentence("procedure_reindex", served_only=True)
    assert hidden.startswith("`procedure_reindex` is not served by the service") and "job=procedure_reindex" in hidden
    assert UnknownJob("x").code == ErrorCode.UNKNOWN_JOB


def test_the_client_http_refusal_of_a_procedure_job_is_one_line():
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1:2333/procedure_serch")
    response = httpx.Response(405, request=request)
    exc = httpx.HTTPStatusError("405", request=request, response=response)
    assert operator_line(exc).startswith(
        "unknown_job: There is no served job `procedure_serch`; did you mean `procedure_search`?"
    )
    other = httpx.Request("POST", "http://127.0.0.1:2333/search")
    assert (
        operator_line(httpx.HTTPStatusError("405", request=other, response=httpx.Response(405, request=other))) is None
    )
    failing = httpx.Response(500, request=request)
    assert operator_line(httpx.HTTPStatusError("500", request=request, response=failing)) is None


def test_plugin_state_is_any_of_the_plugins_directories(tmp_path):
    procedures, state = tmp_path / "procedures", tmp_path / "metadata/procedure/default"
    copies = tmp_path / "session/trajectories"
    assert not holds_plugin_state(procedures, copies, state)
    state.mkdir(parents=True)
    assert holds_plugin_state(procedures, copies, state)
    state.rmdir()
    copies.mkdir(parents=True)  # trajectory copies alone (a read of one is a job on an existing workspace)
    assert holds_plugin_state(procedures, copies, state)
    copies.rmdir()
    procedures.symlink_to(tmp_path / "elsewhere")  # a dangling link is still the user's state (start names it)
    assert holds_plugin_state(procedures, copies, state)


def test_only_empty_directories_are_taken_back_and_a_workspace_holding_anything_stays(tmp_path):
    ws = tmp_path / "ws"
    for sub in ("metadata", "session", "daily"):
        (ws / sub).mkdir(parents=True)
    (ws / "session" / "run.jsonl").write_text("kept")
    (ws / "todo.txt").write_text("kept")
    link_target = tmp_path / "target"
    link_target.mkdir()
    (ws / "digest").symlink_to(link_target)
    removed = remove_created_here(ws, ["metadata", "session", "daily", "digest", "missing"], since=0)
    assert removed == [ws / "metadata", ws / "daily"]
    assert sorted(p.name for p in ws.iterdir()) == ["digest", "session", "todo.txt"] and link_target.is_dir()


def test_a_workspace_made_only_of_new_empty_directories_is_removed_whole(tmp_path):
    ws = tmp_path / "ws"
    for sub in ("metadata", "session", "digest"):
        (ws / sub).mkdir(parents=True)
    assert remove_created_here(ws, ["metadata", "session", "digest", "/abs/elsewhere"], since=0) == [
        ws / "metadata",
        ws / "session",
        ws / "digest",
        ws,
    ]
    assert not ws.exists() and tmp_path.is_dir()
    kept = tmp_path / "kept"
    (kept / "metadata").mkdir(parents=True)
    assert remove_created_here(kept, ["metadata"], since=time.time() + 60) == []  # older than `since`: kept
    assert (kept / "metadata").is_dir()


async def test_a_one_shot_search_on_a_missing_workspace_is_refused_before_anything_is_written(make_app, tmp_path):
    ws = tmp_path / "nowhere"
    with pytest.raises(WorkspaceNotFound) as refused:
        make_app.build(workspace=ws, service={"backend": "cli", "job": "procedure_search", "job_args": {}})
    assert str(refused.value).startswith(
        f"procedure_search needs an existing procedure-memory workspace, and {ws} "
        "has none (no procedures/, session/trajectories/ or metadata/procedure/default/)."
    )
    assert not ws.exists()
    async with make_app(workspace=ws, service={"backend": "cli", "job": "procedure_auto_memory", "job_args": {}}):
        pass  # an import makes the workspace
    assert (ws / "procedures").is_dir() and (ws / "metadata/procedure/default").is_dir()
    async with make_app(workspace=ws, service={"backend": "cli", "job": "procedure_search", "job_args": {}}):
        pass  # now it exists


async def test_any_file_system_failure_in_a_job_answers_a_storage_code(make_app, monkeypatch):
    from conftest import memory_of, run_job

    async with make_app() as app:
        memory = memory_of(app)

        async def unreadable(cursor, limit):
            raise PermissionError(errno.EACCES, "Permission denied", str(memory.workspace_path / "procedures"))

        monkeypatch.setattr(memory.listing, "experiences", unreadable)
        ok, answer = await run_job(app, "procedure_list")
        assert not ok and answer == {
            "status": "error",
            "error": {
                "code": "storage_error",
                "message": (
                    f"Using {memory.workspace_path}/procedures failed: Permission denied (errno EACCES). Make sure "
                    f"{memory.workspace_path} exists and is readable and writable by this process (permissions, a read-only "
                    "mount, a full or failing disk), then run the command again."
                ),
            },
        }

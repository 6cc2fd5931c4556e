"""Every failure an operator meets is one line with a code, never a traceback, with the real ``reme`` console script
in subprocesses.

- a service start that cannot save its views (unwritable view directory, full disk) answers the one-shot job's
  line and exit status, not three tracebacks and exit 3
- a lock file that cannot be created, a read-only workspace and a workspace path under a file: one line each, in
  a one-shot job and a service start
- a job that only reads, on a workspace that does not exist or holds no plugin state: an error naming the path,
  and nothing left behind; a service on a new workspace still starts
- a journal of an unreleased development build's layout: one line naming it, nothing changed
- procedure_export needs an explicit workspace and never claims a destination for a workspace without experiences
- slips: an unknown procedure_* job (one-shot and client) names the closest job, a job the service does not serve
  says how to run it, and MCP reports a failed answer as an error

The tests run as root, where permissions deny nothing: an unwritable directory or a full disk is the OS-level fault
of ``helpers/faults.py``, injected into the subprocess at start-up (``helpers/boot/sitecustomize.py``). The
subprocesses run this checkout's source (``PYTHONPATH``). The embedding provider is a local endpoint started by the
test; the tokenizer is a local file.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, TESTS, EmbeddingEndpoint, experience_record, place_trajectory, write_word_tokenizer
from helpers.cli import free_port, parse_client_output
from helpers import stop_process, wait_for_service

pytestmark = pytest.mark.slow  # real `reme` processes and services

BIN = Path(sys.executable).parent
REME = BIN / "reme"
PLUGINS = 'plugins=["procedure-memory"]'
DIM = "components.as_embedding.procedure.dimensions=64"
STATE = Path("metadata/procedure/default")
VIEWS = Path("metadata/file_store")


@pytest.fixture(scope="module")
def endpoint():
    with EmbeddingEndpoint(64) as embeddings:
        yield embeddings


@pytest.fixture
def cli(tmp_path, endpoint):
    """Environment and cwd of a ``reme`` process running this checkout's source (local endpoints only)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / ".env").write_text("")  # shadows any .env in a parent directory
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_", "PROCEDURE_"))}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(TESTS / "helpers" / "boot")]),
            "HF_HUB_OFFLINE": "1",
            "PYTHONIOENCODING": "utf-8",
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer),
            "EMBEDDING_BACKEND": "openai",
            "EMBEDDING_BASE_URL": endpoint.base_url,
            "EMBEDDING_API_KEY": "test",
            "EMBEDDING_MODEL_NAME": "fake",
        }
    )
    return {"cwd": cwd, "env": env, "ws": tmp_path / "ws", "tmp": tmp_path}


def run(cli, *args: str, denied=(), full=()) -> subprocess.CompletedProcess:
    """``reme *args``; ``denied`` / ``full``: directories below which file creation fails / an fsync finds the disk
    full (``helpers/boot/sitecustomize.py``)."""
    env = dict(
        cli["env"],
        PROCEDURE_TEST_DENIED=os.pathsep.join(map(str, denied)),
        PROCEDURE_TEST_FULL=os.pathsep.join(map(str, full)),
    )
    return subprocess.run([str(REME), *args], cwd=cli["cwd"], env=env, capture_output=True, text=True, timeout=180)


def one_shot(cli, job: str, ws: Path, *args: str, **faults) -> subprocess.CompletedProcess:
    return run(cli, "start", f"job={job}", PLUGINS, f"workspace_dir={ws}", "log_to_file=false", DIM, *args, **faults)


def service(cli, ws: Path, **faults) -> subprocess.CompletedProcess:
    """A ``reme start`` service that is expected to fail at start (it would otherwise serve until stopped)."""
    return run(
        cli,
        "start",
        PLUGINS,
        f"workspace_dir={ws}",
        "log_to_file=false",
        DIM,
        "service.host=127.0.0.1",
        f"service.port={free_port()}",
        **faults,
    )


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one ``reme: error:`` line of a failed process: exit status 1, no traceback anywhere, nothing else on
    stderr but uvicorn's start-up INFO lines (a service)."""
    assert result.returncode == 1, (result.returncode, result.stdout[-3000:], result.stderr[-3000:])
    assert "Traceback" not in result.stdout + result.stderr, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith("INFO:") for line in lines[:-1]), result.stderr[-3000:]
    assert lines[-1].startswith("reme: error: "), result.stderr[-3000:]
    return lines[-1]


def failed_answer(result: subprocess.CompletedProcess) -> dict:
    """The JSON answer of a job that ran and failed: one line on stderr, exit status 1, no traceback."""
    assert result.returncode == 1, (result.stdout[-3000:], result.stderr[-3000:])
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    return json.loads(lines[0])


def storage_line(code: str, target: Path, cause: str) -> str:
    where = target.parent
    if code == "disk_full":
        todo = f"Free space on the file system that holds {where} (or raise the quota)"
    else:
        todo = (
            f"Make sure {where} exists and is writable by this process (permissions, a read-only mount, a failing disk)"
        )
    return (
        f"reme: error: {code}: Writing {target} failed: {cause}. {todo}; nothing half-written was kept. "
        "Then start again."
    )


def indexed_workspace(cli) -> Path:
    """A workspace with two experiences and saved views (a real reindex)."""
    ws = cli["ws"]
    place_trajectory(ws)
    (ws / "procedures").mkdir(parents=True)
    for name, words in (("rebuild.json", "rebuild the index"), ("inspect.json", "inspect the logs")):
        (ws / "procedures" / name).write_text(json.dumps(experience_record(words, f"when to {words}", words)))
    built = one_shot(cli, "procedure_reindex", ws)
    assert built.returncode == 0, built.stderr[-3000:]
    assert sorted(p.name for p in (ws / VIEWS).glob("procedure_*.view")) == [
        "procedure_when_to_use_content_v1.view",
        "procedure_when_to_use_v1.view",
    ]
    return ws


# -- a service that cannot save its views -----------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["not writable", "full disk"])
def test_a_service_that_cannot_save_its_views_answers_the_one_shot_line(cli, fault):
    ws = indexed_workspace(cli)
    views = ws / VIEWS
    if fault == "not writable":  # a hand edit the start reconciles, then saves
        (ws / "procedures/rebuild.json").write_text(
            json.dumps(
                experience_record(
                    "rebuild the index", "when to rebuild the index", "rebuild the index, then verify a known query"
                )
            )
        )
        faults = {"denied": [views]}
    else:  # the views' state is gone: the start writes new snapshots, each part fsynced
        for directory in views.glob("procedure_*.view"):
            shutil.rmtree(directory)
        faults = {"full": [views]}
    job = one_shot(cli, "procedure_search", ws, "query=rebuild", **faults)
    line = error_line(job)
    code = "storage_error" if fault == "not writable" else "disk_full"
    assert (
        line.startswith(f"reme: error: {code}: Writing {views}/procedure_when_to_use") and "Then start again." in line
    ), line

    started = service(cli, ws, **faults)
    assert error_line(started) == line  # the same line, exit status 1 (uvicorn's would be 3)
    assert "Application startup failed" not in started.stdout + started.stderr

    answer = one_shot(cli, "procedure_search", ws, "query=rebuild")  # the cause fixed, the next start saves them
    assert answer.returncode == 0, answer.stderr[-3000:]
    assert json.loads(answer.stdout)["results"][0]["path"] == "procedures/rebuild.json"


# -- lock files, read-only workspaces, paths under a file -------------------------------------------------------------


def test_a_lock_file_that_cannot_be_created_is_one_line(cli):
    ws = indexed_workspace(cli)
    (ws / STATE / "workspace.lock").unlink()
    expected = storage_line("storage_error", ws / STATE / "workspace.lock", "Permission denied (errno EACCES)")
    assert error_line(one_shot(cli, "procedure_search", ws, "query=x", denied=[ws / STATE])) == expected
    assert error_line(service(cli, ws, denied=[ws / STATE])) == expected


def test_a_read_only_workspace_is_one_line(cli):
    ws = cli["ws"]
    ws.mkdir()
    expected = storage_line("storage_error", ws / "metadata", "Permission denied (errno EACCES)")
    assert error_line(one_shot(cli, "procedure_search", ws, "query=x", denied=[ws])) == expected
    assert error_line(service(cli, ws, denied=[ws])) == expected
    assert list(ws.iterdir()) == []


def test_a_workspace_path_under_a_file_is_one_line(cli):
    under = cli["tmp"] / "a-file"
    under.write_text("not a directory")
    ws = under / "ws"
    expected = storage_line("storage_error", ws, "Not a directory (errno ENOTDIR)")
    assert error_line(one_shot(cli, "procedure_search", ws, "query=x")) == expected
    assert error_line(service(cli, ws)) == expected
    assert error_line(one_shot(cli, "procedure_auto_memory", ws, "file=/nonexistent", "filename=run.jsonl")) == expected


def test_a_journal_of_an_unreleased_layout_is_one_line_naming_it_and_nothing_is_changed(cli):
    ws = indexed_workspace(cli)
    operations = ws / STATE / "operations"
    earlier = operations / ("0" * 32)  # a scope directory as development builds named it (no ``.v2``)
    earlier.mkdir(parents=True)
    (earlier / ("a" * 64 + ".json")).write_text("{}")
    expected = (
        f"reme: error: unsupported_workspace: {earlier} is a journal directory of an unreleased development "
        f"build, which this version does not read: move {operations} aside (the experiences stay; the history "
        "of their earlier versions and the ledgers of unfinished imports go with it), then start again."
    )
    assert error_line(one_shot(cli, "procedure_search", ws, "query=rebuild")) == expected
    assert error_line(service(cli, ws)) == expected
    assert [p.name for p in earlier.iterdir()] == ["a" * 64 + ".json"]
    operations.rename(operations.with_name("operations.aside"))  # what the line says
    answer = one_shot(cli, "procedure_search", ws, "query=rebuild")
    assert answer.returncode == 0, answer.stderr[-3000:]
    assert json.loads(answer.stdout)["results"][0]["path"] == "procedures/rebuild.json"


# -- jobs that read need a workspace ----------------------------------------------------------------------------------

READ_JOBS = {
    "procedure_search": ["query=rebuild"],
    "procedure_read": ["path=procedures/rebuild.json"],
    "procedure_list": [],
    "procedure_imports": [],
    "procedure_history": ["path=procedures/rebuild.json"],
    "procedure_reindex": [],
    "procedure_export": ["dest={tmp}/skills"],
    "procedure_dump": [],
}


def not_found_line(job: str, ws: Path) -> str:
    return (
        f"reme: error: workspace_not_found: {job} needs an existing procedure-memory workspace, and {ws} has none "
        "(no procedures/, session/trajectories/ or metadata/procedure/default/). Check workspace_dir (a relative "
        "path is resolved from the current directory); a new workspace is made by `reme start` (the service) or "
        "an import (job=procedure_auto_memory). Nothing was written."
    )


@pytest.mark.parametrize("job", sorted(READ_JOBS))
def test_a_job_that_reads_refuses_a_workspace_that_does_not_exist(cli, job):
    ws = cli["tmp"] / "typo"
    args = [a.format(tmp=cli["tmp"]) for a in READ_JOBS[job]]
    assert error_line(one_shot(cli, job, ws, *args)) == not_found_line(job, ws)
    assert not ws.exists()
    assert not (cli["tmp"] / "skills").exists()


def test_a_directory_without_plugin_state_is_refused_and_left_as_it_was(cli):
    ws = cli["tmp"] / "notes"
    ws.mkdir()
    (ws / "todo.txt").write_text("not a workspace")
    (ws / "session").mkdir()  # the user's own, older than the process: kept
    assert error_line(one_shot(cli, "procedure_list", ws)) == not_found_line("procedure_list", ws)
    assert sorted(p.name for p in ws.iterdir()) == ["session", "todo.txt"]


# -- the export's workspace -------------------------------------------------------------------------------------------


def test_export_needs_an_explicit_workspace(cli):
    default = cli["cwd"] / ".reme"  # ReMe's default workspace, with an experience: still not exported silently
    place_trajectory(default)
    (default / "procedures").mkdir()
    (default / "procedures/rebuild.json").write_text(json.dumps(experience_record("r", "when r", "r")))
    dest = cli["tmp"] / "skills"
    result = run(cli, "start", "job=procedure_export", PLUGINS, f"dest={dest}", "log_to_file=false", DIM)
    assert failed_answer(result) == {
        "status": "error",
        "error": {
            "code": "invalid_argument",
            "message": (
                "procedure_export needs the workspace to export: add workspace_dir=<workspace> (without it ReMe would use "
                f"{default}). Nothing was written."
            ),
        },
    }
    assert not dest.exists()


def test_an_empty_workspace_does_not_claim_the_destination(cli):
    empty, ws = cli["tmp"] / "empty", indexed_workspace(cli)
    (empty / "procedures").mkdir(parents=True)
    dest = cli["tmp"] / "skills"
    dest.mkdir()
    refused = one_shot(cli, "procedure_export", empty, f"dest={dest}")
    assert failed_answer(refused) == {
        "status": "error",
        "error": {
            "code": "not_found",
            "message": (
                f"{empty}/procedures holds no experience, so there is nothing to export and {dest} was left as it was. "
                "Check workspace_dir, or import a trajectory first."
            ),
        },
    }
    assert list(dest.iterdir()) == []
    exported = one_shot(cli, "procedure_export", ws, f"dest={dest}")  # the real workspace may claim it
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert sorted(p.name for p in dest.iterdir() if p.is_dir()) == ["inspect", "rebuild"]


# -- slips ------------------------------------------------------------------------------------------------------------

JOBS = (
    "procedure_auto_memory, procedure_create, procedure_delete, procedure_dump, procedure_export, procedure_history, "
    "procedure_imports, procedure_list, procedure_read, procedure_reindex, procedure_search, procedure_update"
)
SERVED = "procedure_history, procedure_imports, procedure_list, procedure_read, procedure_search"


def test_an_unknown_one_shot_job_names_the_closest_and_creates_nothing(cli):
    ws = cli["tmp"] / "new"
    line = error_line(one_shot(cli, "procedure_serch", ws, "query=x"))
    assert line == (
        "reme: error: unknown_job: There is no job `procedure_serch`; did you mean `procedure_search`? "
        f"The jobs of procedure-memory: {JOBS}."
    )
    assert not ws.exists()


def test_a_service_on_a_new_workspace_serves_and_slips_are_one_line(cli):
    """The service creates its new workspace (how a user starts); on it, a client's unknown job and a job the service
    does not serve are one line each, and MCP reports a failed answer as an error."""
    ws = cli["tmp"] / "fresh"
    port, log = free_port(), cli["tmp"] / "service.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(REME),
                "start",
                PLUGINS,
                f"workspace_dir={ws}",
                "log_to_file=false",
                DIM,
                "service.host=127.0.0.1",
                f"service.port={port}",
            ],
            cwd=cli["cwd"],
            env=cli["env"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_service(proc, port, log)
        assert (ws / "procedures").is_dir() and (ws / STATE).is_dir()
        address = ("host=127.0.0.1", f"port={port}")
        answer, ok = parse_client_output(run(cli, "procedure_search", "query=rebuild", *address).stdout)
        assert ok and answer["status"] == "ok" and answer["results"] == []

        typo = run(cli, "procedure_serch", "query=rebuild", *address)
        assert error_line(typo) == (
            "reme: error: unknown_job: There is no served job `procedure_serch`; did you "
            f"mean `procedure_search`? The served jobs of procedure-memory: {SERVED}."
        )
        hidden = run(cli, "procedure_export", f"dest={cli['tmp']}/skills", *address)
        assert error_line(hidden) == (
            "reme: error: unknown_job: `procedure_export` is not served by the service (imports, writes, reindex "
            "and export run one-shot): run reme start job=procedure_export plugins='[\"procedure-memory\"]' "
            "workspace_dir=<workspace> ..."
        )

        async def session():
            from fastmcp import Client

            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                refused = await client.call_tool("procedure_search", {"query": "x", "limt": 3}, raise_on_error=False)
                served = await client.call_tool("procedure_search", {"query": "x"}, raise_on_error=False)
                return refused, served

        refused, served = asyncio.run(asyncio.wait_for(session(), timeout=60))
        assert refused.is_error and not served.is_error
        assert json.loads(refused.content[0].text)["error"]["code"] == "invalid_argument"
        assert json.loads(served.content[0].text)["status"] == "ok"
    finally:
        stop_process(proc)

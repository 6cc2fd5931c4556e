"""Containment of configured directories, one validation of experience files, and inputs that ended in
internal_error. Each test names the defect it pins.

- a configured directory (or a parent of it inside the workspace) that is a symlink leading out of the workspace
  is used: imports copy to the outside, search serves outside files, read answers internal_error
- hand-placed files with a non-lowercase-hyphenated name are indexed and served by search, while read refuses them
- hand-placed files whose sources are not existing trajectory copies are served
- a lone surrogate in a text argument ends in internal_error (TypeError in the tokenizer, UnicodeEncodeError in
  paths, journal keys and import records)
- a JSON trajectory nested 100,000 levels deep ends in internal_error (RecursionError)
- a 300-character import filename ends in internal_error after the name was reserved (OSError: File name too long)
- NaN / Infinity in JSON and JSONL trajectories are accepted, although strict JSON has no such values
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import call_tool, import_file, memory_of, run_job
from helpers import FakeEmbeddingModel, experience_record, place_trajectory
from helpers.corpus import JSONL, replies, write

VALID = experience_record("Rebuild search", "when search results look stale after a config change", "rebuild it")


def tree(*roots: Path) -> dict[str, bytes]:
    """Every file, directory and symlink (its target) under the roots: what "no byte changed" compares."""
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")) if root.is_dir() else []:
            if path.is_symlink():
                out[str(path)] = b"-> " + os.readlink(path).encode()
            elif path.is_file():
                out[str(path)] = path.read_bytes()
            else:
                out[str(path)] = b"<directory>"
    return out


def view_state(ws: Path) -> list[str]:
    """ReMe's persisted view files of the plugin (empty when nothing was indexed)."""
    return sorted(str(p.relative_to(ws)) for p in (ws / "metadata").rglob("*procedure*") if p.is_file())


# -- configured directories stay inside the workspace ---------------------------------------------------------------

LINKED_DIRECTORIES = [
    "procedures",
    "session",
    "session/trajectories",
    "metadata",
    "metadata/procedure",
    "metadata/procedure/default",
    "metadata/keyword_index",
    "metadata/file_store",
]


@pytest.mark.parametrize("linked", LINKED_DIRECTORIES)
async def test_a_configured_directory_linked_outside_fails_at_start_naming_it(make_app, tmp_path, linked):
    ws, outside = tmp_path / "ws", tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "planted.json").write_text(json.dumps(VALID))
    (ws / Path(linked).parent).mkdir(parents=True, exist_ok=True)
    (ws / linked).symlink_to(outside, target_is_directory=True)
    before = tree(outside)

    with pytest.raises(ValueError) as failure:
        async with make_app(workspace=ws):
            pytest.fail("the component started through a link leading outside the workspace")

    message = str(failure.value)
    assert f"{linked} -> {outside}" in message and "outside the workspace" in message, message
    assert tree(outside) == before  # nothing was created, copied or indexed through the link
    assert view_state(ws) == []


async def test_a_link_that_appears_before_start_is_refused_before_anything_is_indexed(make_app, tmp_path):
    """The application is built, then ``procedures`` is swapped for a link: start refuses it before reconciling."""
    from reme.application import Application

    ws, outside = tmp_path / "ws", tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "planted.json").write_text(json.dumps(VALID))
    app = Application(
        plugins=["procedure-memory"],
        workspace_dir=str(ws),
        service={"backend": "cli"},
        enable_logo=False,
        log_to_console=False,
        log_to_file=False,
        components={"as_embedding": {"procedure": {"dimensions": 64}}},
    )
    model = app.context.components["as_embedding"]["procedure"].model = FakeEmbeddingModel(64)
    (ws / "procedures").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="procedures -> "):
        await app.start()
    assert [p.name for p in outside.iterdir()] == ["planted.json"]
    assert model.calls == []  # the planted file was never indexed
    # the lock is taken when the application is built (before the link appeared); start created nothing more
    assert [p.name for p in (ws / "metadata/procedure/default").iterdir()] == ["workspace.lock"]


async def test_a_symlinked_directory_inside_the_workspace_is_refused_too(make_app, tmp_path):
    """Decision (docs/decisions.md): paths are identities, so a link inside the workspace is refused as well."""
    ws = tmp_path / "ws"
    (ws / "real-procedures").mkdir(parents=True)
    (ws / "procedures").symlink_to(ws / "real-procedures", target_is_directory=True)
    with pytest.raises(ValueError, match="to real-procedures inside the workspace"):
        async with make_app(workspace=ws):
            pass


@pytest.mark.parametrize(
    "components, expected",
    [
        ({"procedure_dir": "session/trajectories"}, "overlap"),
        ({"procedure_dir": "metadata/procedure"}, "overlap"),
        ({"trajectory_subdir": "x"}, "is not a directory"),  # session/x below is a regular file
    ],
)
async def test_overlapping_or_unusable_directories_fail_at_start(make_app, tmp_path, components, expected):
    ws = tmp_path / "ws"
    (ws / "session").mkdir(parents=True)
    (ws / "session" / "x").write_text("a file, not a directory")
    with pytest.raises(ValueError, match=expected):
        async with make_app(workspace=ws, components={"procedure_memory": {"default": components}}):
            pass


async def test_a_link_swapped_in_while_running_is_never_followed(make_app, tmp_path):
    """Reads re-check their directory: a directory replaced by a link at run time answers path_outside."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "rebuild-search.json").write_text(json.dumps(VALID))
    (outside / "run.jsonl").write_text('{"secret": "outside"}\n')
    async with make_app() as app:
        ws = memory_of(app).workspace_path
        run = memory_of(app).grants.begin_attempt("req", [place_trajectory(ws)])
        (ws / "procedures").rmdir()
        (ws / "procedures").symlink_to(outside, target_is_directory=True)
        ok, ans = await run_job(app, "procedure_read", path="procedures/rebuild-search.json")
        assert not ok and ans["error"]["code"] == "path_outside_allowed_directory", ans
        ok, ans = await call_tool(
            app,
            run,
            "procedure_create",
            filename="new-one.json",
            description="d",
            when_to_use="w",
            content="c",
            operation_key="k1",
        )
        assert not ok and ans["error"]["code"] == "path_outside_allowed_directory", ans
        ok, ans = await run_job(app, "procedure_search", query="search results look stale")
        assert ok and ans["results"] == [], ans
        (ws / "procedures").unlink()
        (ws / "session/trajectories/run.jsonl").unlink()
        (ws / "session/trajectories").rmdir()
        (ws / "session/trajectories").symlink_to(outside, target_is_directory=True)
        ok, ans = await run_job(app, "procedure_read", kind="trajectory", path="session/trajectories/run.jsonl")
        assert not ok and ans["error"]["code"] == "path_outside_allowed_directory", ans
    assert sorted(p.name for p in outside.iterdir()) == ["rebuild-search.json", "run.jsonl"]


# -- one validation ---------------------------------------------------------------------------------------------------

INVALID_FILES = {
    # name: (sources, what the error must tell the user to fix)
    "HP-Upper.json": (["session/trajectories/run.jsonl"], "rename the file"),
    "hp space.json": (["session/trajectories/run.jsonl"], "rename the file"),
    "hp.dots.json": (["session/trajectories/run.jsonl"], "rename the file"),
    "source-in-procedures.json": (["procedures/good.json"], "sources"),
    "source-absolute.json": (["/etc/passwd"], "sources"),
    "source-missing.json": (["session/trajectories/gone.jsonl"], "does not exist"),
    "source-directory.json": (["session/trajectories"], "sources"),
    "source-subdirectory.json": (["session/trajectories/sub/run.jsonl"], "sources"),
    "source-alias.json": (["session/trajectories/./run.jsonl"], "sources"),
    "source-link-out.json": (["session/trajectories/link.jsonl"], "sources"),
    "source-one-of-two-missing.json": (
        ["session/trajectories/run.jsonl", "session/trajectories/gone.jsonl"],
        "does not exist",
    ),
}


def hand_placed_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws)
    (ws / "session/trajectories/sub").mkdir()
    (ws / "session/trajectories/sub/run.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "outside.jsonl").write_text('{"secret": 1}\n')
    (ws / "session/trajectories/link.jsonl").symlink_to(tmp_path / "outside.jsonl")
    (ws / "procedures/good.json").write_text(json.dumps(VALID, indent=4))
    for name, (sources, _) in INVALID_FILES.items():
        record = experience_record(
            f"Invalid {name}", "when search results look stale after a config change", "rebuild it", sources=sources
        )
        (ws / "procedures" / name).write_text(json.dumps(record))
    return ws


async def test_hand_placed_files_follow_the_rules_of_written_ones_everywhere(make_app, tmp_path):
    ws = hand_placed_workspace(tmp_path)
    before = tree(ws / "procedures", ws / "session", tmp_path / "outside.jsonl")
    invalid = {f"procedures/{name}" for name in INVALID_FILES}
    async with make_app(workspace=ws) as app:
        for view in ("when_to_use", "when_to_use_content"):
            ok, ans = await run_job(app, "procedure_search", query="search results look stale", index=view, limit=50)
            assert ok and [r["path"] for r in ans["results"]] == ["procedures/good.json"], ans
            assert ans["index_complete"] is False
            pending = {p["path"]: p["error"] for p in ans["pending_indexes"]}
            assert set(pending) == invalid
            for name, (_, fix) in INVALID_FILES.items():
                assert fix in pending[f"procedures/{name}"], (name, pending[f"procedures/{name}"])
            for store in memory_of(app).workspace.views.stores.values():  # excluded from both views
                assert {n.path for n in await store.get_nodes()} == {"procedures/good.json"}

        # read agrees with search: the same error, never the content
        for path, error in pending.items():
            ok, ans = await run_job(app, "procedure_read", path=path)
            assert not ok and ans["error"]["code"] == "invalid_experience", (path, ans)
            assert error.removeprefix("invalid experience: ") in ans["error"]["message"]
            assert "experience" not in ans

        # update refuses them (never rewritten), whatever version it is given
        run = memory_of(app).grants.begin_attempt("req", ["session/trajectories/run.jsonl"])
        for path in pending:
            version = next(p["version"] for p in ans_pending(app) if p["path"] == path)
            ok, ans = await call_tool(
                app,
                run,
                "procedure_update",
                path=path,
                expected_version=version,
                content="fixed by the agent",
                operation_key=f"fix {path}",
            )
            assert not ok and ans["error"]["code"] == "invalid_experience", (path, ans)

        ok, ans = await run_job(app, "procedure_reindex")
        assert ok and ans["indexed"] == 1
        assert {f["path"] for f in ans["invalid_files"]} == invalid
        assert all(f["error"] for f in ans["invalid_files"])
    assert tree(ws / "procedures", ws / "session", tmp_path / "outside.jsonl") == before


def ans_pending(app) -> list[dict]:
    memory = memory_of(app)
    return memory.workspace.pending.entries()


async def test_a_deleted_source_excludes_the_experience_until_it_is_restored(make_app, tmp_path):
    ws = tmp_path / "ws"
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws)
    (ws / "procedures/good.json").write_text(json.dumps(VALID))
    copy = ws / "session/trajectories/run.jsonl"
    async with make_app(workspace=ws) as app:
        ok, ans = await run_job(app, "procedure_search", query="search results look stale")
        assert [r["path"] for r in ans["results"]] == ["procedures/good.json"]
        data = copy.read_bytes()
        copy.unlink()
        ok, ans = await run_job(app, "procedure_search", query="search results look stale")
        assert ans["results"] == [] and "does not exist" in ans["pending_indexes"][0]["error"], ans
        ok, ans = await run_job(app, "procedure_read", path="procedures/good.json")
        assert not ok and ans["error"]["code"] == "invalid_experience"
        copy.write_bytes(data)
        ok, ans = await run_job(app, "procedure_search", query="search results look stale")  # retried (0 s)
        assert [r["path"] for r in ans["results"]] == ["procedures/good.json"] and ans["index_complete"], ans


# -- lone surrogates ------------------------------------------------------------------------------------------------

SURROGATE = "\ud800"


@pytest.mark.parametrize("field", ["description", "when_to_use", "content", "filename", "operation_key"])
async def test_a_lone_surrogate_in_create_is_invalid_argument_and_writes_nothing(make_app, field):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [place_trajectory(memory.workspace_path)])
        args = {
            "filename": "rebuild-search.json",
            "description": "d",
            "when_to_use": "w",
            "content": "c",
            "operation_key": "k",
        }
        args[field] = f"text {SURROGATE} more"
        before = tree(memory.workspace_path / "procedures", memory.workspace.state_dir)
        ok, ans = await call_tool(app, run, "procedure_create", **args)
        assert not ok and ans["error"]["code"] == "invalid_argument", ans
        assert f"`{field}`" in ans["error"]["message"] and "surrogate" in ans["error"]["message"]
        assert tree(memory.workspace_path / "procedures", memory.workspace.state_dir) == before


@pytest.mark.parametrize(
    "field", ["description", "when_to_use", "content", "path", "expected_version", "operation_key"]
)
async def test_a_lone_surrogate_in_update_is_invalid_argument_and_writes_nothing(make_app, field):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [place_trajectory(memory.workspace_path)])
        ok, created = await call_tool(
            app,
            run,
            "procedure_create",
            filename="rebuild-search.json",
            description="d",
            when_to_use="w",
            content="c",
            operation_key="k0",
        )
        assert ok, created
        args = {
            "path": created["path"],
            "expected_version": created["version"],
            "content": "new content",
            "operation_key": "k1",
        }
        args[field] = f"{args.get(field, 'x')}{SURROGATE}"
        before = tree(memory.workspace_path / "procedures", memory.workspace.state_dir)
        ok, ans = await call_tool(app, run, "procedure_update", **args)
        assert not ok and ans["error"]["code"] == "invalid_argument" and "surrogate" in ans["error"]["message"], ans
        assert tree(memory.workspace_path / "procedures", memory.workspace.state_dir) == before


@pytest.mark.parametrize(
    "job, args",
    [
        ("procedure_search", {"query": f"stale {SURROGATE}"}),
        ("procedure_read", {"path": f"procedures/a{SURROGATE}.json"}),
        ("procedure_read", {"kind": "trajectory", "path": f"session/trajectories/{SURROGATE}.jsonl"}),
    ],
)
async def test_a_lone_surrogate_in_a_served_argument_is_invalid_argument(make_app, job, args):
    async with make_app() as app:
        ok, ans = await run_job(app, job, **args)
        assert not ok and ans["error"]["code"] == "invalid_argument" and "surrogate" in ans["error"]["message"], ans


@pytest.mark.parametrize("field", ["filename", "request_id", "memory_hint", "file"])
async def test_a_lone_surrogate_in_an_import_argument_reserves_nothing(make_app, tmp_path, field):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[]) as app:
        memory = memory_of(app)
        args = {"file": str(original), "filename": "run.jsonl", "request_id": "r1", "memory_hint": "h"}
        args[field] = args[field] + SURROGATE
        ok, ans = await run_job(app, "procedure_auto_memory", **args)
        assert not ok and ans["error"]["code"] == "invalid_argument" and "surrogate" in ans["error"]["message"], ans
        assert not any((memory.workspace.state_dir / "imports").iterdir())
        assert not any((memory.workspace_path / memory.workspace.trajectory_rel_dir).iterdir())


# -- deep nesting and non-finite numbers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, data, detail",
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, "deeper"),
        ("deep.jsonl", '{"ok": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n", "line 2"),
        ("nan.json", '{"loss": NaN}', "NaN"),
        ("inf.jsonl", '{"a": 1}\n{"score": Infinity}\n{"b": -Infinity}\n', "line 2"),
        ("neg-inf.json", "[1, -Infinity]", "-Infinity"),
    ],
)
async def test_deep_nesting_and_non_finite_numbers_are_malformed_input_and_keep_the_copy(
    make_app, tmp_path, name, data, detail
):
    original = write(tmp_path, name, data)
    async with make_app(scripts=[]) as app:  # the agent must never run
        ok, ans = await import_file(app, original, request_id="r1")
        assert not ok and ans["status"] == "rejected", ans  # an import that did not complete, never resumable
        assert ans["error"]["code"] == "malformed_input" and detail in ans["error"]["message"], ans
        assert (memory_of(app).workspace_path / ans["path"]).read_bytes() == original.read_bytes()


# -- long import filenames ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("filename", ["a" * 296 + ".log", "é" * 101 + ".md"])
async def test_a_too_long_import_filename_is_refused_before_anything_is_reserved(make_app, tmp_path, filename):
    original = write(tmp_path, "run.log", "a line of a log\n")
    async with make_app(scripts=[]) as app:
        memory = memory_of(app)
        ok, ans = await import_file(app, original, filename=filename, request_id="long-1")
        assert not ok and ans["status"] == "error" and ans["error"]["code"] == "invalid_argument", ans
        assert "at most 200" in ans["error"]["message"] and "resume" not in ans
        assert not any((memory.workspace.state_dir / "imports").iterdir())
        assert not any((memory.workspace_path / memory.workspace.trajectory_rel_dir).iterdir())


async def test_the_longest_accepted_filename_is_copied_also_with_a_numbered_suffix(make_app, tmp_path):
    original = write(tmp_path, "run.log", "a line of a log\n")
    name = "b" * 196 + ".log"  # 200 bytes
    async with make_app(scripts=[replies(), replies()]) as app:
        for request_id, expected in (("l1", name), ("l2", "b" * 196 + "-2.log")):
            ok, ans = await import_file(app, original, filename=name, request_id=request_id)
            assert ok, ans
            assert ans["path"] == f"session/trajectories/{expected}"

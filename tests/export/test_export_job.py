"""``procedure_export`` on the real Application: every valid experience as an Agent Skills folder
that the format's reference validator and a strict parser accept; a rerun that writes only what changed; a kill at
any write that the next run finishes; and every conflict refused with its code, nothing written. (Every hostile
``dest`` — relative, in the workspace, through a link, a file, no permission — is in
``tests/hostile/test_hostile.py``.)"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from reme_procedure_memory.errors import StorageError
from reme_procedure_memory.export.marker import MARKER_FILE
from reme_procedure_memory.export.skills import skill_name
from reme_procedure_memory.storage import atomic

from conftest import run_job
from helpers import FIXTURES, FakeEmbeddingModel, experience_record, place_trajectory
from helpers.agent_skills import skill_problems
from helpers.cli import durable_state
from helpers.export import library_v1, library_v2
from helpers.corpus import corpus, write_corpus
from helpers.faults import Faults

LONG = "restart-the-payment-service-after-the-primary-database-fails-over-to-the-replica-region.json"
SPECIAL = {
    LONG: experience_record("Restart payments after a failover", "When the database failed over", "Restart it."),
    "123.json": experience_record("A name YAML 1.1 reads as a number", "When a name is digits only", "Quote it."),
    "front-matter-lookalike.json": experience_record(
        'Content with "---" lines, quotes and a \\ backslash',
        "When a text\nspans lines,\tholds tabs and \x07 a bell",
        "---\nname: not-the-name\n---\n\nA horizontal rule:\n\n---\n\nand `code` with ``` fences.\n",
    ),
    "long-when-to-use.json": experience_record(
        "Clean a failed build",
        "When " + "a build fails again " * 120,
        "Delete the build directory, then build from scratch.",
    ),
    "unicode-text.json": experience_record("清理失败的构建 🔥", "Когда сборка падает", "Étape 1 : nettoyer."),
}
INVALID = {"broken.json": "{ not json", "Bad-Name.json": json.dumps(experience_record("d", "w", "c"))}


def build_library(ws: Path) -> dict[str, dict]:
    """The fixtures' experiences (the 40 of ``experiences.jsonl`` and the 4 of ``four-experiences``), the special
    ones above and two invalid files; returns the valid ones by file name."""
    write_corpus(ws)
    valid = {name: record for name, record, _ in corpus()}
    for path in sorted((FIXTURES / "four-experiences" / "procedures").glob("*.json")):
        shutil.copy(path, ws / "procedures" / path.name)
        valid[path.name] = json.loads(path.read_text())
    for name, record in SPECIAL.items():
        (ws / "procedures" / name).write_text(json.dumps(record, indent=2))
        valid[name] = record
    for name, text in INVALID.items():
        (ws / "procedures" / name).write_text(text)
    return valid


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (not following links): files with bytes and mtime, directories, links."""
    out = {}
    for path in sorted(root.rglob("*")) if root.exists() else []:
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir",)
        else:
            out[rel] = ("file", path.read_bytes(), path.stat().st_mtime_ns)
    return out


def changed(before: dict, after: dict) -> set[str]:
    return {p for p in set(before) | set(after) if before.get(p) != after.get(p)}


async def export(app, dest) -> tuple[bool, dict]:
    return await run_job(app, "procedure_export", dest=str(dest))


def skill_dirs(dest: Path) -> dict[str, Path]:
    return {p.name: p for p in dest.iterdir() if p.is_dir()}


async def test_every_valid_experience_becomes_a_skill_both_parsers_accept(make_app, tmp_path):
    ws, dest = tmp_path / "ws", tmp_path / "out" / "skills"
    valid = build_library(ws)
    async with make_app(workspace=ws) as app:
        workspace_before = durable_state(ws)
        ok, answer = await export(app, dest)
        assert durable_state(ws) == workspace_before  # the export reads the workspace, never writes it
    assert ok and answer["status"] == "ok", answer
    names = {skill_name(name): name for name in valid}
    assert len(names) == len(valid) == answer["skills"] == 49, answer
    assert answer["dest"] == str(dest.resolve()) and answer["refused"] == [] and answer["removed"] == []
    assert sorted(answer["created"]) == sorted(["INDEX.md", *(f"{n}/SKILL.md" for n in names)])
    assert sorted(i["path"] for i in answer["invalid"]) == ["procedures/Bad-Name.json", "procedures/broken.json"]
    assert set(skill_dirs(dest)) == set(names)
    assert skill_name(LONG) == "restart-the-payment-service-after-the-primary-database-7a685dc3"  # 55 - "-", 8 hex
    for name, folder in skill_dirs(dest).items():
        assert skill_problems(folder) == [], name
        record, text = valid[names[name]], (folder / "SKILL.md").read_text()
        body = text.split("\n---\n", 1)[1]
        assert body.startswith("\n" + record["content"].rstrip("\n") + "\n")
        assert all(f"- `{source}`" in body for source in record["sources"])
        assert f'reme-experience: "procedures/{names[name]}"' in text
    cut = (dest / "long-when-to-use" / "SKILL.md").read_text()
    assert '\u2026"\n' in cut and SPECIAL["long-when-to-use.json"]["when-to-use"] in cut  # cut, and whole below
    index = (dest / "INDEX.md").read_text()
    assert all(f"- [{name}]({name}/SKILL.md): " in index for name in names)
    marker = json.loads((dest / MARKER_FILE).read_text())
    assert marker["workspace"] == os.path.realpath(ws)
    assert set(marker["files"]) == {"INDEX.md", *(f"{n}/SKILL.md" for n in names)}
    for path, entry in marker["files"].items():
        assert entry["sha256"] == [hashlib.sha256((dest / path).read_bytes()).hexdigest()]


async def test_a_rerun_writes_only_what_changed(make_app, tmp_path):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    build_library(ws)
    async with make_app(workspace=ws) as app:
        ok, first = await export(app, dest)
        assert ok, first
        before = tree(dest)
        ok, again = await export(app, dest)
        assert ok and (again["created"], again["updated"], again["removed"]) == ([], [], [])
        assert again["unchanged"] == first["skills"] + 1
        assert tree(dest) == before  # nothing rewritten, the marker included (same bytes, same mtimes)

        procedures = ws / "procedures"
        record = json.loads((procedures / "exp-03.json").read_text())
        (procedures / "exp-03.json").write_text(json.dumps({**record, "content": "A revised procedure."}))
        (procedures / "fresh.json").write_text(json.dumps(experience_record("Fresh", "When new", "Do it.")))
        (procedures / "exp-05.json").unlink()
        (procedures / "exp-07.json").write_text("{ broken by a hand edit")
        ok, rerun = await export(app, dest)
    assert ok, rerun
    assert rerun["created"] == ["fresh/SKILL.md"] and rerun["updated"] == ["INDEX.md", "exp-03/SKILL.md"]
    assert rerun["removed"] == ["exp-05/SKILL.md"]
    assert [k["path"] for k in rerun["kept"]] == ["exp-07/SKILL.md"]  # invalid now: its skill stays as it was
    assert "procedures/exp-07.json" in {i["path"] for i in rerun["invalid"]}
    assert changed(before, tree(dest)) == {
        "INDEX.md",
        "exp-03/SKILL.md",
        "fresh",
        "fresh/SKILL.md",
        "exp-05",
        "exp-05/SKILL.md",
        MARKER_FILE,
    }
    assert not (dest / "exp-05").exists() and (dest / "exp-07/SKILL.md").read_bytes() == before["exp-07/SKILL.md"][1]
    assert "A revised procedure." in (dest / "exp-03/SKILL.md").read_text()
    assert "[exp-05]" not in (dest / "INDEX.md").read_text() and "[fresh]" in (dest / "INDEX.md").read_text()
    assert skill_problems(dest / "fresh") == [] and skill_problems(dest / "exp-03") == []


async def test_skills_of_deleted_experiences_that_were_edited_or_hold_other_files_are_left(make_app, tmp_path):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    place_trajectory(ws)
    (ws / "procedures").mkdir()
    for name in ("edited", "extended", "plain"):
        (ws / f"procedures/{name}.json").write_text(json.dumps(experience_record(name, f"When {name}", "Do.")))
    async with make_app(workspace=ws) as app:
        assert (await export(app, dest))[0]
        (dest / "edited/SKILL.md").write_text("my own notes\n")
        (dest / "extended/notes.md").write_text("kept\n")
        for name in ("edited", "extended", "plain"):
            (ws / f"procedures/{name}.json").unlink()
        ok, answer = await export(app, dest)
        assert ok, answer
        assert answer["removed"] == ["extended/SKILL.md", "plain/SKILL.md"]
        assert sorted(k["path"] for k in answer["kept"]) == ["edited/SKILL.md", "extended/"]
        assert (dest / "edited/SKILL.md").read_text() == "my own notes\n" and (dest / "extended/notes.md").exists()
        assert not (dest / "extended/SKILL.md").exists() and not (dest / "plain").exists()
        assert set(json.loads((dest / MARKER_FILE).read_text())["files"]) == {"INDEX.md"}
        # the left folders are someone else's now: an experience of that name again is refused, not written over
        (ws / "procedures/edited.json").write_text(json.dumps(experience_record("e", "w", "c")))
        ok, answer = await export(app, dest)
    assert not ok and answer["error"]["code"] == "export_conflict"
    assert answer["conflicts"] == ["the folder edited/ is there and was not written by the export"]


async def test_a_name_shared_by_two_experiences_is_refused_clearly(make_app, tmp_path):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    place_trajectory(ws)
    (ws / "procedures").mkdir()
    squatter = f"{skill_name(LONG)}.json"
    for name in (LONG, squatter):
        (ws / "procedures" / name).write_text(json.dumps(experience_record(name[:20], "When w", f"From {name}.")))
    async with make_app(workspace=ws) as app:
        ok, answer = await export(app, dest)
    assert ok and answer["skills"] == 1, answer
    assert [(r["path"], r["skill"]) for r in answer["refused"]] == [(f"procedures/{LONG}", skill_name(LONG))]
    assert f"From {squatter}." in (dest / skill_name(LONG) / "SKILL.md").read_text()


# -- a kill at any write -----------------------------------------------------------------------------------------------


class Killed(StorageError):
    """Stands for a kill at one durable write (nothing after it runs)."""


DURABLE_STEPS = 5  # the marker, alpha/SKILL.md, delta/SKILL.md, INDEX.md (writes), beta (a removal), the marker


@pytest.mark.parametrize("kill_at", range(DURABLE_STEPS + 1))
async def test_a_kill_at_any_write_is_finished_by_the_next_run(make_app, tmp_path, monkeypatch, kill_at):
    ws, dest, clean = tmp_path / "ws", tmp_path / "skills", tmp_path / "clean"
    library_v1(ws)
    async with make_app(workspace=ws) as app:
        assert (await export(app, dest))[0]
        library_v2(ws)
        steps = []
        real_write, real_remove = atomic.atomic_write, atomic.remove_file

        def counted(real):
            def step(path, *args, **kwargs):
                steps.append(str(path))
                if len(steps) - 1 == kill_at:
                    raise Killed(5, "killed", str(path))
                return real(path, *args, **kwargs)

            return step

        monkeypatch.setattr(atomic, "atomic_write", counted(real_write))
        monkeypatch.setattr(atomic, "remove_file", counted(real_remove))
        ok, answer = await export(app, dest)
        assert not ok and answer["error"]["code"] == "storage_error", answer
        monkeypatch.setattr(atomic, "atomic_write", real_write)
        monkeypatch.setattr(atomic, "remove_file", real_remove)
        ok, answer = await export(app, dest)
        assert ok and "conflicts" not in answer, answer
        assert (await export(app, clean))[0]
    assert len(steps) == kill_at + 1
    finished, fresh = tree(dest), tree(clean)
    assert {p: v[:2] for p, v in finished.items()} == {p: v[:2] for p, v in fresh.items()}  # no leftover, same bytes


async def test_the_uninterrupted_rerun_makes_exactly_the_durable_steps_counted_above(make_app, tmp_path, monkeypatch):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    library_v1(ws)
    async with make_app(workspace=ws) as app:
        assert (await export(app, dest))[0]
        library_v2(ws)
        steps = []
        for name in ("atomic_write", "remove_file"):
            real = getattr(atomic, name)
            monkeypatch.setattr(
                atomic, name, lambda path, *a, real=real, **k: (steps.append(str(path)), real(path, *a, **k))[1]
            )
        assert (await export(app, dest))[0]
    assert [Path(s).relative_to(dest).as_posix() for s in steps] == [
        MARKER_FILE,
        "INDEX.md",
        "alpha/SKILL.md",
        "delta/SKILL.md",
        "beta/SKILL.md",
        MARKER_FILE,
    ]
    assert len(steps) == DURABLE_STEPS + 1


async def test_temporary_files_a_killed_export_left_are_removed_only_beside_its_own_files(make_app, tmp_path):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    library_v1(ws)
    async with make_app(workspace=ws) as app:
        assert (await export(app, dest))[0]
        own = [
            dest / ".INDEX.md.0123abcd.tmp",
            dest / f".{MARKER_FILE}.89abcdef.tmp",
            dest / "alpha/.SKILL.md.deadbeef.tmp",
        ]
        foreign = [dest / ".notes.md.0123abcd.tmp", dest / "mine/.SKILL.md.deadbeef.tmp"]
        for path in own + foreign:
            path.parent.mkdir(exist_ok=True)
            path.write_text("partial")
        ok, answer = await export(app, dest)
    assert ok and answer["updated"] == [], answer
    assert [p.exists() for p in own + foreign] == [False, False, False, True, True]


# -- refusals ----------------------------------------------------------------------------------------------------------


def conflicting(name: str, ws: Path, dest: Path, other_ws: Path) -> None:
    """Put something the export did not write in its way (after a first export for some cases)."""
    if name == "foreign-folder":
        (dest / "exp-00").mkdir()
        (dest / "exp-00/SKILL.md").write_text("---\nname: exp-00\ndescription: mine\n---\n")
    elif name == "foreign-index":
        (dest / "INDEX.md").write_text("my index\n")
    elif name == "edited-skill":
        with open(dest / "exp-01/SKILL.md", "a") as handle:
            handle.write("my addition\n")
    elif name == "link-into-workspace":
        shutil.rmtree(dest / "exp-02")
        (dest / "exp-02").symlink_to(ws / "procedures", target_is_directory=True)
    elif name == "linked-skill-file":
        (dest / "exp-02/SKILL.md").unlink()
        (dest / "exp-02/SKILL.md").symlink_to(ws / "procedures/exp-02.json")
    elif name == "directory-for-a-file":
        (dest / "INDEX.md").unlink()
        (dest / "INDEX.md").mkdir()
    elif name == "damaged-marker":
        (dest / MARKER_FILE).write_text('{"format": 1, "files": {"../../etc/passwd": {}}}')
    elif name == "marker-is-a-directory":
        (dest / MARKER_FILE).unlink()
        (dest / MARKER_FILE).mkdir()
    elif name == "another-workspace":
        shutil.rmtree(dest)
        dest.mkdir()
        (dest / MARKER_FILE).write_text(json.dumps({"format": 1, "workspace": str(other_ws), "files": {}}))


CONFLICTS = {  # case -> (a first export before it, a phrase of the message)
    "foreign-folder": (False, "the folder exp-00/ is there and was not written by the export"),
    "foreign-index": (False, "INDEX.md was not written by the export"),
    "edited-skill": (True, "exp-01/SKILL.md was changed since the export wrote it"),
    "link-into-workspace": (True, "exp-02 is a symbolic link"),
    "linked-skill-file": (True, "exp-02/SKILL.md is a symbolic link"),
    "directory-for-a-file": (True, "INDEX.md is a directory"),
    "damaged-marker": (True, "is unreadable"),
    "marker-is-a-directory": (True, "is not a regular file"),
    "another-workspace": (False, "holds the export of another workspace"),
}


@pytest.mark.parametrize("case", sorted(CONFLICTS))
async def test_something_the_export_did_not_write_in_the_way_refuses_the_run_and_nothing_is_written(
    make_app, tmp_path, case
):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    write_corpus(ws)
    dest.mkdir()
    first, phrase = CONFLICTS[case]
    async with make_app(workspace=ws) as app:
        if first:
            assert (await export(app, dest))[0]
        record = json.loads((ws / "procedures/exp-01.json").read_text())
        (ws / "procedures/exp-01.json").write_text(json.dumps({**record, "content": "changed"}))  # a rerun would write
        conflicting(case, ws, dest, tmp_path / "other-ws")
        before, workspace_before = tree(dest), durable_state(ws)
        ok, answer = await export(app, dest)
        assert tree(dest) == before and durable_state(ws) == workspace_before
    assert not ok and answer["status"] == "error" and answer["error"]["code"] == "export_conflict", answer
    assert phrase in answer["error"]["message"] and "nothing was written" in answer["error"]["message"]


async def test_a_second_export_into_the_same_directory_at_once_is_refused(make_app, tmp_path):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    write_corpus(ws)
    dest.mkdir()
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as another export (any process) holds it while it writes
        async with make_app(workspace=ws) as app:
            ok, answer = await export(app, dest)
    finally:
        os.close(fd)
    assert not ok and answer["error"]["code"] == "export_conflict" and "Another export" in answer["error"]["message"]
    assert list(dest.iterdir()) == []


async def test_a_directory_without_write_permission_answers_storage_error_and_nothing_is_written(
    make_app, tmp_path, monkeypatch
):
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    write_corpus(ws)
    dest.mkdir()
    (dest / "mine.md").write_text("a file of the user's\n")
    async with make_app(workspace=ws) as app:
        faults = Faults(monkeypatch)
        faults.denied = {dest}  # as a directory this process may not write (the tests run as root)
        before = tree(dest)
        ok, answer = await export(app, dest)
        assert tree(dest) == before
    assert not ok and answer["error"]["code"] == "storage_error", answer
    assert "Permission denied" in answer["error"]["message"] and str(dest) in answer["error"]["message"]
    assert faults.hits and all(str(dest) in hit for hit in faults.hits)


async def test_a_one_shot_export_process_needs_no_embedding_provider(make_app, tmp_path):
    """``reme start job=procedure_export``: the start-up leaves the views alone (the export reads only files)."""
    ws, dest = tmp_path / "ws", tmp_path / "skills"
    write_corpus(ws)  # not indexed yet: another start would embed all of them
    model = FakeEmbeddingModel(64)
    model.fail_with = RuntimeError("the provider is down")
    async with make_app(
        workspace=ws,
        embedding=model,
        service={"backend": "cli", "job": "procedure_export", "job_args": {"dest": str(dest)}},
    ) as app:
        ok, answer = await export(app, dest)
    assert ok and answer["skills"] == 40, answer
    assert model.calls == []

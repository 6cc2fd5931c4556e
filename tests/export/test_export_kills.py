"""``procedure_export`` killed at every mutating file-system call: the next export finishes or cleans
what the killed one left, and ends with the destination an uninterrupted export makes; what the export did not write
is still refused or left.

A kill is simulated below the export directory's parent at the OS calls that change it — a file created for writing
(``os.open`` with ``O_CREAT``), ``os.replace``/``os.rename``, ``os.unlink``, ``os.rmdir``, ``os.mkdir`` — by raising at
the chosen call and at every mutating call after it: the process is "dead", so no cleanup (an atomic writer's
``finally``) may undo what the kill left, as none would after a real SIGKILL. The kill points are counted on an
uninterrupted run of the same export, so every call is covered whatever the writer's implementation makes.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from reme_procedure_memory.export.marker import MARKER_FILE

from conftest import run_job
from helpers import experience_record
from helpers.export import library_v1, library_v2

MUTATING = ("open", "replace", "rename", "unlink", "rmdir", "mkdir")
TEMP_SUFFIX = re.compile(r"\.[0-9a-f]{8}\.tmp$")  # the atomic writer's temporary files: a random part


class KillSwitch:
    """Counts the mutating OS calls at or below ``root``; with ``at``, the call of that index and every mutating call
    after it raise (``calls`` then lists the calls up to the kill)."""

    def __init__(self, monkeypatch, root: Path, at: int | None = None) -> None:
        self.root, self.at, self.dead = root, at, False
        self.calls: list[str] = []
        for name in MUTATING:
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))

    def _wrap(self, name: str, real):
        def call(*args, **kwargs):
            target = args[1] if name in ("replace", "rename") else args[0]
            creates = name != "open" or (args[1] if len(args) > 1 else kwargs["flags"]) & os.O_CREAT
            if creates and self._below(target):
                if self.dead:
                    raise OSError(errno.EIO, "the process was killed", os.fsdecode(target))
                where = Path(os.fsdecode(target)).relative_to(self.root).as_posix()
                self.calls.append(f"{name} {TEMP_SUFFIX.sub('.<random>.tmp', where)}")
                if len(self.calls) - 1 == self.at:
                    self.dead = True
                    raise OSError(errno.EIO, "killed here", os.fsdecode(target))
            return real(*args, **kwargs)

        return call

    def _below(self, path) -> bool:
        if isinstance(path, int):
            return False
        target = Path(os.path.abspath(os.fsdecode(path)))
        return target == self.root or self.root in target.parents


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (not following links): files with their bytes, directories, links."""
    out = {}
    for path in sorted(root.rglob("*")) if root.exists() else []:
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir",)
        else:
            out[rel] = ("file", path.read_bytes())
    return out


async def export(app, dest: Path) -> tuple[bool, dict]:
    return await run_job(app, "procedure_export", dest=str(dest))


@asynccontextmanager
async def updated(make_app, tmp_path: Path):
    """``(app, ws, base)``: library v1 exported to ``base``, then the library changed to v2 (not exported yet)."""
    ws, base = tmp_path / "ws", tmp_path / "base"
    library_v1(ws)
    async with make_app(workspace=ws) as app:
        assert (await export(app, base))[0]
        library_v2(ws)
        yield app, ws, base


async def killed_export(app, monkeypatch, dest: Path, at: int) -> list[str]:
    """One export of ``dest`` killed at mutating call ``at``; the calls it made up to the kill."""
    with monkeypatch.context() as patch:
        switch = KillSwitch(patch, dest.parent, at)
        ok, answer = await export(app, dest)
    assert not ok and answer["error"]["code"] == "storage_error", answer
    return switch.calls


async def sweep(app, monkeypatch, root: Path, before: Path | None) -> tuple[list[str], dict, list[str]]:
    """Kill the export at each of its mutating calls, starting from a copy of ``before`` (None: no directory yet),
    rerun it once, and compare with the uninterrupted export. Returns (the calls, the uninterrupted tree, the
    kill points whose rerun failed or differs)."""

    def fresh(name: str) -> Path:
        dest = root / name / "skills"  # the parent is created by the export too when ``before`` is None
        if before is not None:
            shutil.copytree(before, dest, symlinks=True)
        return dest

    reference = fresh("reference")
    with monkeypatch.context() as patch:
        counter = KillSwitch(patch, reference.parent)
        ok, answer = await export(app, reference)
    assert ok, answer
    expected = tree(reference)
    problems = []
    for at, call in enumerate(counter.calls):
        dest = fresh(f"kill-{at}")
        made = await killed_export(app, monkeypatch, dest, at)
        assert made == counter.calls[: at + 1]  # the run went the same way up to the kill
        ok, answer = await export(app, dest)
        if not ok:
            problems.append(f"kill at {at} ({call}): the rerun answered {answer}")
        elif tree(dest) != expected:
            problems.append(
                f"kill at {at} ({call}): the rerun left {sorted(set(tree(dest)) ^ set(expected))} "
                "different from the uninterrupted export"
            )
    return counter.calls, expected, problems


async def test_a_first_export_killed_at_any_mutating_call_is_finished_by_the_next(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    library_v1(ws)
    async with make_app(workspace=ws) as app:
        calls, expected, problems = await sweep(app, monkeypatch, tmp_path / "out", None)
    assert problems == []
    kinds = {c.split()[0] for c in calls}
    assert kinds == {"mkdir", "open", "replace"}, calls  # a first export creates and writes, removes nothing
    assert {"alpha/SKILL.md", "beta/SKILL.md", "gamma/SKILL.md", "INDEX.md", MARKER_FILE} <= set(expected)


async def test_an_update_killed_at_any_mutating_call_is_finished_by_the_next(make_app, tmp_path, monkeypatch):
    async with updated(make_app, tmp_path) as (app, ws, base):
        calls, expected, problems = await sweep(app, monkeypatch, tmp_path / "out", base)
    assert problems == []
    # every kind of mutating call is among the kill points: the sweep is not vacuous
    assert {c.split()[0] for c in calls} == {"mkdir", "open", "replace", "unlink", "rmdir"}, calls
    assert "rmdir skills/beta" in calls and "unlink skills/beta/SKILL.md" in calls
    assert "beta" not in expected and "beta/SKILL.md" not in expected and "delta/SKILL.md" in expected


@pytest.mark.slow
async def test_a_rerun_killed_again_at_any_call_is_finished_by_the_third(make_app, tmp_path, monkeypatch):
    """Double crashes: the update killed at every call, its rerun killed at every call of its own, a third run."""
    async with updated(make_app, tmp_path) as (app, ws, base):
        calls, expected, _ = await sweep(app, monkeypatch, tmp_path / "out", base)
        problems = []
        for first in range(len(calls)):
            left = tmp_path / "left" / str(first) / "skills"
            shutil.copytree(base, left, symlinks=True)
            await killed_export(app, monkeypatch, left, first)
            _, second_expected, second_problems = await sweep(app, monkeypatch, tmp_path / "again" / str(first), left)
            problems += [f"after a kill at {first} ({calls[first]}): {p}" for p in second_problems]
            assert second_expected == expected
    assert problems == []


# -- what the export did not write is still not its own ----------------------------------------------------------


async def interrupted_removal(app, monkeypatch, base: Path, dest: Path) -> None:
    """``dest``: ``base`` updated to library v2 with a kill between removing ``beta/SKILL.md`` and ``beta/``."""
    shutil.copytree(base, dest, symlinks=True)
    shutil.copytree(base, (tmp := dest.parent / "count") / "skills", symlinks=True)
    with monkeypatch.context() as patch:
        counter = KillSwitch(patch, tmp)
        assert (await export(app, tmp / "skills"))[0]
    at = counter.calls.index("rmdir skills/beta")
    await killed_export(app, monkeypatch, dest, at)
    assert (dest / "beta").is_dir() and not any((dest / "beta").iterdir())  # the state the audit found


async def test_the_folder_an_interrupted_removal_left_is_removed_and_reported(make_app, tmp_path, monkeypatch):
    dest = tmp_path / "out" / "skills"
    async with updated(make_app, tmp_path) as (app, ws, base):
        await interrupted_removal(app, monkeypatch, base, dest)
        ok, answer = await export(app, dest)
        assert ok and "conflicts" not in answer, answer
        assert answer["removed"] == ["beta/"] and answer["kept"] == [], answer
        assert not (dest / "beta").exists()
        assert "beta/SKILL.md" not in json.loads((dest / MARKER_FILE).read_text())["files"]
        ok, again = await export(app, dest)
    assert ok and again["removed"] == [] and again["created"] == again["updated"] == [], again


@pytest.mark.parametrize("rerun_first", [False, True], ids=["back-at-once", "back-after-a-rerun"])
async def test_an_experience_back_under_the_name_is_exported_after_an_interrupted_removal(
    make_app, tmp_path, monkeypatch, rerun_first
):
    """The audit's defect: the folder a kill left empty was refused as foreign once a rerun had forgotten it."""
    dest = tmp_path / "out" / "skills"
    async with updated(make_app, tmp_path) as (app, ws, base):
        await interrupted_removal(app, monkeypatch, base, dest)
        if rerun_first:
            assert (await export(app, dest))[0]
        (ws / "procedures/beta.json").write_text(json.dumps(experience_record("beta", "When beta", "Back.")))
        ok, answer = await export(app, dest)
    assert ok and "beta/SKILL.md" in answer["created"], answer
    assert "Back." in (dest / "beta/SKILL.md").read_text()


async def test_a_user_file_in_the_emptied_folder_keeps_it_and_is_never_removed(make_app, tmp_path, monkeypatch):
    dest = tmp_path / "out" / "skills"
    async with updated(make_app, tmp_path) as (app, ws, base):
        await interrupted_removal(app, monkeypatch, base, dest)
        (dest / "beta/notes.md").write_text("mine\n")
        ok, answer = await export(app, dest)
        assert ok and [k["path"] for k in answer["kept"]] == ["beta/"], answer
        assert (dest / "beta/notes.md").read_text() == "mine\n"
        # forgotten by the marker: the folder is the user's now, so a skill of that name is refused, not written
        (ws / "procedures/beta.json").write_text(json.dumps(experience_record("beta", "When beta", "Back.")))
        ok, answer = await export(app, dest)
    assert not ok and answer["error"]["code"] == "export_conflict", answer
    assert "the folder beta/ is there and was not written by the export" in answer["error"]["message"]
    assert sorted(p.name for p in (dest / "beta").iterdir()) == ["notes.md"]


@pytest.mark.parametrize("foreign", ["empty-folder", "folder-with-skill", "file"])
async def test_after_any_kill_what_the_export_did_not_write_is_still_refused(make_app, tmp_path, monkeypatch, foreign):
    """At every kill point of the update, a foreign entry where the new skill ``epsilon`` goes refuses the rerun (an
    empty folder the marker does not list is as foreign as a full one); nothing is written.

    Once the killed run's marker announces ``epsilon/SKILL.md`` (it is written before any file), an empty folder
    there cannot be told from the one the run made before the kill: the rerun takes it as its own and writes the
    skill into it. A foreign ``SKILL.md`` or a file there is refused all the same."""
    async with updated(make_app, tmp_path) as (app, ws, base):
        (ws / "procedures/epsilon.json").write_text(json.dumps(experience_record("epsilon", "When e", "Do e.")))
        shutil.copytree(base, tmp_path / "count" / "skills", symlinks=True)
        with monkeypatch.context() as patch:
            counter = KillSwitch(patch, tmp_path / "count")
            assert (await export(app, tmp_path / "count" / "skills"))[0]
        seen = set()
        for at, call in enumerate(counter.calls):
            dest = tmp_path / "out" / str(at) / "skills"
            shutil.copytree(base, dest, symlinks=True)
            await killed_export(app, monkeypatch, dest, at)
            if (dest / "epsilon").exists():  # the killed run got as far as writing epsilon: nothing in the way now
                continue
            if foreign == "file":
                (dest / "epsilon").write_text("my file\n")
            else:
                (dest / "epsilon").mkdir()
                if foreign == "folder-with-skill":
                    (dest / "epsilon/SKILL.md").write_text("---\nname: epsilon\ndescription: mine\n---\n")
            before = {p: v for p, v in tree(dest).items() if not TEMP_SUFFIX.search(p)}  # a killed write's temp
            announced = "epsilon/SKILL.md" in json.loads((dest / MARKER_FILE).read_text())["files"]
            ok, answer = await export(app, dest)
            seen.add((announced, ok))
            if announced and foreign == "empty-folder":
                assert ok and "epsilon/SKILL.md" in answer["created"], (at, call, answer)
                continue
            assert not ok and answer["error"]["code"] == "export_conflict", (at, call, answer)
            assert "epsilon" in answer["error"]["message"] and tree(dest) == before, (at, call)
    assert (False, False) in seen and (True, foreign == "empty-folder") in seen, seen  # both kinds were reached

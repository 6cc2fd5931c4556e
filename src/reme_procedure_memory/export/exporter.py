"""The ``procedure_export`` job: every valid experience as an Agent Skills folder in a directory outside the workspace.

One run (``Exporter.export``): the destination is checked (``destination.resolve_destination``), the experience files
are read and validated as every reader does (``ExperienceReader.scan``: invalid ones are reported, not exported),
each valid one is rendered (``skills.py``) and the run is planned against the marker and what the directory holds
(``plan.py``). A conflict refuses the run before anything is written. Otherwise, under an exclusive lock of the
directory: the marker is written with the old and new hashes of every file to change, then the files (each with the
atomic writer), then the removals, then the settled marker. A kill at any point leaves every file the export's own
by a recorded hash and every folder it made or was emptying listed, so the next run goes on: it removes the
temporary files beside its own files, writes what is still missing and removes the folder of a skill whose
``SKILL.md`` an interrupted run already removed. A run that changes nothing writes nothing, the marker included.

Directory layout::

    <dest>/INDEX.md                     the exported skills, linked
    <dest>/<skill>/SKILL.md             one per exported experience
    <dest>/.reme-procedure-export.json  the marker (marker.py)
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..answers import ExportAnswer
from ..errors import ErrorCode, ProcedureError, StorageError
from ..storage import atomic
from ..storage.experiences import BadFile, StoredExperience
from ..storage.format import temp_files_of
from .destination import DestinationLock, probe, resolve_destination
from .marker import INDEX_FILE, MARKER_FILE, Marker, parse_marker
from .plan import Plan, folders, plan_export, render
from .skills import SKILL_FILE

if TYPE_CHECKING:
    from ..workspace import Workspace

SHOWN_CONFLICTS = 5  # conflicts named in the message; the answer's `conflicts` lists all
# The atomic writer's temporary files of the export's own files, left by a kill (storage/format.py).
ROOT_TEMP = temp_files_of(INDEX_FILE, MARKER_FILE)
SKILL_TEMP = temp_files_of(SKILL_FILE)


class Exporter:
    """``procedure_export`` of one component's workspace."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def export(self, raw_dest: str) -> ExportAnswer:
        """Export every valid experience to the directory ``raw_dest`` (absolute; see the module docstring) and
        answer what was created, updated, unchanged, removed, kept, invalid and refused."""
        workspace = self.workspace
        dest = resolve_destination(raw_dest, workspace.root)
        async with workspace.write_lock:  # no write of this process changes the library while it is read
            experiences, invalid, present = await asyncio.to_thread(_read_library, workspace)
        return await asyncio.to_thread(_export, dest, os.path.realpath(workspace.root), experiences, invalid, present)


def _read_library(workspace: Workspace) -> tuple[list[StoredExperience], list[dict], set[str]]:
    """The valid experiences, the invalid files (``{"path", "error"}``) and the path of every experience file."""
    valid, invalid = [], []
    for item in workspace.files.scan():
        if isinstance(item, BadFile):
            invalid.append({"path": item.path, "error": item.error})
        else:
            valid.append(item)
    return valid, invalid, {item.path for item in valid} | {item["path"] for item in invalid}


def _export(
    dest: Path, workspace: str, experiences: list[StoredExperience], invalid: list[dict], present: set[str]
) -> dict[str, Any]:
    """The synchronous body of ``Exporter.export`` (a worker thread): lock, plan, write."""
    skills, index, refused = render(experiences)
    try:
        atomic.ensure_dir(dest)
        with DestinationLock(dest):
            marker = _read_marker(dest, workspace)
            _remove_own_temp_files(dest, marker)
            paths = [INDEX_FILE, *(s.file for s in skills), *marker.files]
            found = probe(dest, [*paths, *folders(paths)])
            plan = plan_export(skills, index, marker.files, found, present)
            if plan.conflicts:
                raise _conflict(dest, plan.conflicts)
            removed, kept = _apply(dest, plan, marker)
    except StorageError:
        raise
    except OSError as exc:  # creating or opening the directory: answered like any failed write (storage_error)
        raise StorageError(exc.errno, exc.strerror or str(exc), exc.filename or str(dest)) from exc
    return {
        "status": "ok",
        "dest": str(dest),
        "skills": len(skills),
        "created": plan.created,
        "updated": plan.updated,
        "unchanged": len(plan.unchanged),
        "removed": removed,
        "kept": plan.kept + kept,
        "invalid": invalid,
        "refused": refused,
        "index": INDEX_FILE,
    }


def _read_marker(dest: Path, workspace: str) -> Marker:
    """The directory's marker (an empty one of ``workspace`` when there is none); export_conflict when it is not a
    readable marker of this workspace."""
    path = dest / MARKER_FILE
    found = probe(dest, [MARKER_FILE]).get(MARKER_FILE)
    if found is None:
        return Marker(workspace)
    fix = (
        f"Export to another directory, or empty {dest} of what the export wrote (the folders with a SKILL.md, "
        f"{INDEX_FILE}) and remove {path}; nothing was written."
    )
    if found.kind != "file":
        raise ProcedureError(
            ErrorCode.EXPORT_CONFLICT, f"{path}, where the export keeps its marker, is not a regular file. {fix}"
        )
    try:
        marker = parse_marker(path.read_bytes())
    except ValueError as exc:
        raise ProcedureError(
            ErrorCode.EXPORT_CONFLICT,
            f"The export's marker {path} is unreadable: {exc}. Without "
            f"it the export cannot tell its own files from others'. {fix}",
        ) from None
    if marker.workspace != workspace:
        raise ProcedureError(
            ErrorCode.EXPORT_CONFLICT,
            f"{dest} holds the export of another workspace ({marker.workspace}); this one is {workspace}. {fix}",
        )
    return marker


def _remove_own_temp_files(dest: Path, marker: Marker) -> None:
    """Remove the temporary files a killed export left beside its own files (never anyone else's)."""
    own = [dest / name for name in folders(list(marker.files))]
    atomic.remove_temp_files([dest], ROOT_TEMP)
    atomic.remove_temp_files([d for d in own if d.is_dir() and not d.is_symlink()], SKILL_TEMP)


def _conflict(dest: Path, conflicts: list[str]) -> ProcedureError:
    shown = "; ".join(conflicts[:SHOWN_CONFLICTS])
    hidden = len(conflicts) - SHOWN_CONFLICTS
    more = f" (and {hidden} more, listed in `conflicts`)" if hidden > 0 else ""
    return ProcedureError(
        ErrorCode.EXPORT_CONFLICT,
        (
            f"{len(conflicts)} path(s) in {dest} are in the way of the export: {shown}{more}. The export never replaces "
            "or removes what it did not write. Move them away, or export to another directory, then run it again; "
            "nothing was written."
        ),
        conflicts=conflicts,
    )


def _apply(dest: Path, plan: Plan, marker: Marker) -> tuple[list[str], list[dict]]:
    """Write the plan: the marker with old and new hashes, the files, the removals, the settled marker. Returns the
    removed paths and the folders left in place because they hold other files."""
    during, after = Marker(marker.workspace, plan.during), Marker(marker.workspace, plan.after)
    if plan.changes:
        atomic.write_json(dest / MARKER_FILE, during.to_json())
    for path, data in plan.writes.items():
        atomic.atomic_write(dest / path, data)
    removed, kept = [], []
    for path in plan.removes:
        atomic.remove_file(dest / path)
        removed.append(path)
    for folder in [*folders(plan.removes), *plan.emptied]:
        if not atomic.remove_empty_dir(dest / folder):
            kept.append(
                {
                    "path": f"{folder}/",
                    "reason": "its SKILL.md was removed (the experience no longer "
                    "exists); the folder holds other files and is left",
                }
            )
        elif folder in plan.emptied:  # the removal an interrupted run began
            removed.append(f"{folder}/")
    if plan.changes or after != marker:
        atomic.write_json(dest / MARKER_FILE, after.to_json())
    return removed, kept

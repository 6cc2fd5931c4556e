"""The export's marker: which files of an export directory the export wrote, by content hash.

``<dest>/.reme-procedure-export.json`` records the workspace it exports (its real path) and every file it wrote —
``INDEX.md`` and ``<skill>/SKILL.md`` — with the SHA-256 of the bytes it wrote (and, for a skill, the experience it
came from). A file there is the export's own only while its bytes still have a recorded hash: anything else is
someone else's and is never replaced or removed. A file's entry holds two hashes while a rewrite is under way
(written before the rewrite, settled after it), so a kill in between leaves either version recognised.

The marker is read strictly: a path that is not ``INDEX.md`` or ``<valid skill name>/SKILL.md``, a hash that is not
64 hex digits, another format — any of these makes it unreadable (``ValueError`` saying what), never a reason to
touch a file it names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..storage.format import EXPORT_MARKER_FORMAT

MARKER_FILE = ".reme-procedure-export.json"
INDEX_FILE = "INDEX.md"
WRITTEN_BY = "reme-procedure-memory procedure_export"
SKILL_PATH = re.compile(r"^([a-z0-9]+(?:-[a-z0-9]+)*)/SKILL\.md$")  # the specification's names (skills.py)
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Entry:
    """A file the export wrote: the hashes its bytes may have, and the experience a skill came from."""

    hashes: tuple[str, ...]
    experience: str | None = None


@dataclass(frozen=True)
class Marker:
    """The workspace an export directory belongs to, and the files the export wrote there (dest-relative)."""

    workspace: str
    files: dict[str, Entry] = field(default_factory=dict)

    def to_json(self) -> dict:
        files = {}
        for path, entry in sorted(self.files.items()):
            files[path] = {"sha256": list(entry.hashes)}
            if entry.experience is not None:
                files[path]["experience"] = entry.experience
        return {"format": EXPORT_MARKER_FORMAT, "written_by": WRITTEN_BY, "workspace": self.workspace, "files": files}


def valid_path(path: str) -> bool:
    """Whether ``path`` is one the export writes: ``INDEX.md`` or ``<skill name>/SKILL.md`` (name at most 64)."""
    if path == INDEX_FILE:
        return True
    match = SKILL_PATH.match(path)
    return match is not None and len(match.group(1)) <= 64


def parse_marker(data: bytes) -> Marker:
    """The marker of ``data``; ValueError saying what is wrong when it is not one this version wrote."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"it is not JSON ({exc})") from None
    if not isinstance(obj, dict) or obj.get("format") != EXPORT_MARKER_FORMAT:
        raise ValueError(f"it is not a format-{EXPORT_MARKER_FORMAT} export marker")
    workspace, files = obj.get("workspace"), obj.get("files")
    if not isinstance(workspace, str) or not isinstance(files, dict):
        raise ValueError("its `workspace` or `files` is missing")
    entries = {}
    for path, raw in files.items():
        if not valid_path(path):
            raise ValueError(f"it names {path!r}, which is not a file the export writes")
        hashes = raw.get("sha256") if isinstance(raw, dict) else None
        experience = raw.get("experience") if isinstance(raw, dict) else None
        if (
            not isinstance(hashes, list)
            or not hashes
            or not all(isinstance(h, str) and SHA256.match(h) for h in hashes)
        ):
            raise ValueError(f"the hashes of {path} are not SHA-256 digests")
        if experience is not None and not isinstance(experience, str):
            raise ValueError(f"the experience of {path} is not a path")
        entries[path] = Entry(tuple(hashes), experience)
    return Marker(workspace, entries)

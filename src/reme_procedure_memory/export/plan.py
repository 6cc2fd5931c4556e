"""What an export run does, decided before anything is written: a pure function of the experiences, the marker and
what the export directory holds.

Rules (``plan_export``):

* A file the export writes (``INDEX.md``, ``<skill>/SKILL.md``) is created when nothing is at its path; rewritten
  only when its bytes differ and the file there is the export's own (its hash is in the marker); left alone when its
  bytes are already the ones to write. A skill's folder is the export's own when the marker lists its ``SKILL.md``.
* Anything else in the way — a file or folder the marker does not list, a file changed since the export wrote it,
  a symbolic link (never followed), a directory where a file goes — is a conflict. One conflict refuses the whole
  run before any write (``export_conflict``): the export never replaces what it did not write.
* A skill the marker lists whose experience file no longer exists is removed (its ``SKILL.md`` when still as written,
  then its folder when empty): the folder mirrors the library, and a skill of a deleted experience would go on
  being used. A ``SKILL.md`` changed since is left in place and forgotten (it is the user's now). A listed skill whose
  ``SKILL.md`` is gone but whose folder is still there is a removal a kill interrupted: the folder is the export's
  own (the marker still lists its ``SKILL.md``) and is removed when empty, the entry kept until it is gone (a folder
  of another kind there is left and forgotten). A skill whose experience is still there but was not exported this
  time (it became invalid, or lost its name to another) is kept as it was and stays in the marker: a hand edit that
  broke a file for a moment does not delete its skill.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..storage.experiences import StoredExperience
from .marker import INDEX_FILE, Entry
from .skills import SKILL_FILE, Skill, render_index, render_skill, skill_name


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Found:
    """What is at a path of the export directory (never followed): ``file`` (with the SHA-256 of its bytes),
    ``dir``, ``link``, ``unreadable`` (a file this process cannot read) or ``other`` (a socket, a device, ...). A
    missing path is None."""

    kind: str
    sha256: str | None = None


def assign_names(experiences: list[StoredExperience]) -> tuple[list[tuple[str, StoredExperience]], list[dict]]:
    """``(name, experience)`` of each experience that gets a skill, in name order, and the refused ones.

    Names come from ``skills.skill_name``. A name that one experience maps to is its own. When several map to one
    name, the one whose own file name is that name keeps it; the others are refused (``{"path", "skill",
    "reason"}``), and when none is, all of them: one skill never silently replaces another.
    """
    groups: dict[str, list[StoredExperience]] = {}
    for item in experiences:
        groups.setdefault(skill_name(item.path.rpartition("/")[2]), []).append(item)
    named, refused = [], []
    for name in sorted(groups):
        group = sorted(groups[name], key=lambda e: e.path)
        owner = (
            group[0]
            if len(group) == 1
            else next((e for e in group if e.path.rpartition("/")[2] == f"{name}.json"), None)
        )
        if owner is not None:
            named.append((name, owner))
        for item in group:
            if item is not owner:
                others = ", ".join(e.path for e in group if e is not item)
                refused.append(
                    {
                        "path": item.path,
                        "skill": name,
                        "reason": (
                            f"its skill name {name} (the file name shortened to 64 characters) is also the name of {others}; "
                            "rename one of the experience files to export both"
                        ),
                    }
                )
    return named, sorted(refused, key=lambda r: r["path"])


def render(experiences: list[StoredExperience]) -> tuple[list[Skill], bytes, list[dict]]:
    """Every skill to write, the index's bytes, and the experiences refused by ``assign_names``."""
    named, refused = assign_names(experiences)
    skills = [render_skill(name, item.path, item.version, item.experience) for name, item in named]
    return skills, render_index(skills), refused


@dataclass
class Plan:
    """The writes of one run (dest-relative paths) and the marker's entries before and after them."""

    writes: dict[str, bytes] = field(default_factory=dict)  # files to create or rewrite
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removes: list[str] = field(default_factory=list)  # the export's own files of deleted experiences
    emptied: list[str] = field(default_factory=list)  # folders of removed skills whose SKILL.md a kill already removed
    kept: list[dict] = field(default_factory=list)  # {"path", "reason"}: skills left as they are
    conflicts: list[str] = field(default_factory=list)
    during: dict[str, Entry] = field(default_factory=dict)  # the marker while files are written (old and new hashes)
    after: dict[str, Entry] = field(default_factory=dict)  # the marker once they are

    @property
    def changes(self) -> bool:
        """Whether files are written or removed (then the marker first records both hashes of each)."""
        return bool(self.writes or self.removes)


def plan_export(
    skills: list[Skill], index: bytes, recorded: dict[str, Entry], found: dict[str, Found | None], present: set[str]
) -> Plan:
    """The plan of one export run (see the module docstring).

    ``recorded``: the marker's entries; ``found``: what is at each path of the targets, their folders and the
    recorded files (dest-relative; a missing key means nothing is there); ``present``: the workspace-relative paths
    of every experience file there is, valid or not.
    """
    plan = Plan()
    targets = {INDEX_FILE: (index, None)} | {s.file: (s.data, s.path) for s in skills}
    for path, (data, experience) in targets.items():
        _plan_target(plan, path, data, experience, recorded, found)
    for path, entry in recorded.items():
        if path not in targets:
            _plan_leftover(plan, path, entry, found, present)
    return plan


def _plan_target(
    plan: Plan,
    path: str,
    data: bytes,
    experience: str | None,
    recorded: dict[str, Entry],
    found: dict[str, Found | None],
) -> None:
    """Create, rewrite or keep one file the export writes; a conflict when something else is in the way."""
    entry, digest = recorded.get(path), sha256(data)
    folder = path.rpartition("/")[0]
    if folder and (where := found.get(folder)) is not None:
        if where.kind != "dir":
            plan.conflicts.append(f"{folder} is {_kind(where)}, where the export writes the folder {folder}/")
            return
        if entry is None:
            plan.conflicts.append(f"the folder {folder}/ is there and was not written by the export")
            return
    there = found.get(path)
    if there is None:
        plan.created.append(path)
    elif there.kind != "file":
        plan.conflicts.append(f"{path} is {_kind(there)}, where the export writes a file")
        return
    elif entry is None or there.sha256 not in entry.hashes:
        why = "was not written by the export" if entry is None else "was changed since the export wrote it"
        plan.conflicts.append(f"{path} {why}")
        return
    elif there.sha256 == digest:
        plan.unchanged.append(path)
        plan.during[path] = plan.after[path] = Entry((digest,), experience)
        return
    else:
        plan.updated.append(path)
    plan.writes[path] = data
    old = entry.hashes if entry is not None else ()
    plan.during[path] = Entry(tuple(dict.fromkeys((*old, digest))), experience)
    plan.after[path] = Entry((digest,), experience)


def _plan_leftover(plan: Plan, path: str, entry: Entry, found: dict[str, Found | None], present: set[str]) -> None:
    """A file the marker lists that this run does not write: remove, forget or keep it."""
    if entry.experience is not None and entry.experience in present:
        plan.kept.append(
            {"path": path, "reason": f"{entry.experience} was not exported this time; its skill is kept as it was"}
        )
        plan.during[path] = plan.after[path] = entry
        return
    there, folder = found.get(path), path.rpartition("/")[0]
    if there is not None and there.kind == "file" and there.sha256 in entry.hashes:
        plan.removes.append(path)
        plan.during[path] = entry  # until it is gone
    elif there is None and folder and (where := found.get(folder)) is not None:
        if where.kind == "dir":  # a kill came between removing the SKILL.md and its folder: finish the removal
            plan.emptied.append(folder)
            plan.during[path] = entry  # until the folder is gone
        else:
            plan.kept.append(
                {
                    "path": f"{folder}/",
                    "reason": f"{entry.experience or 'its experience'} no longer "
                    f"exists, but {folder} is {_kind(where)} now: left in "
                    "place and no longer the export's",
                }
            )
    elif there is not None:
        plan.kept.append(
            {
                "path": path,
                "reason": f"{entry.experience or 'its experience'} no longer exists, but "
                "this file was changed since the export wrote it: left in place "
                "and no longer the export's",
            }
        )


def _kind(found: Found) -> str:
    return {
        "dir": "a directory",
        "link": "a symbolic link",
        "file": "a file",
        "unreadable": "a file this process cannot read",
    }.get(found.kind, "not a regular file")


def folders(paths: list[str]) -> list[str]:
    """The skill folders of ``paths`` (``<name>/SKILL.md`` -> ``<name>``), in order, once each."""
    return list(dict.fromkeys(p.rpartition("/")[0] for p in paths if p.endswith(f"/{SKILL_FILE}")))

"""A strict parser of the Agent Skills format, for the tests of the export.

Two checks, both must accept a skill folder:

* ``skills_ref.validate``: the reference validator of the specification (PyPI ``skills-ref``, from
  github.com/agentskills/agentskills; the test extra pins it). It parses the front matter with strictyaml.
* ``strict_problems``: the rules of the specification (agentskills.io/specification, ``docs/specification.mdx``),
  where they are stricter than the reference validator, with YAML 1.1 (PyYAML), as many clients read it:

  - S1 "The SKILL.md file must contain YAML frontmatter followed by Markdown content": the file is UTF-8, starts
    with a ``---`` line, and a later ``---`` line closes a YAML mapping.
  - S2 the frontmatter keys are ``name``, ``description``, ``license``, ``compatibility``, ``metadata``,
    ``allowed-tools`` only; ``name`` and ``description`` are required.
  - S3 ``name``: "Must be 1-64 characters"; "lowercase alphanumeric characters (``a-z``) and hyphens" (ASCII: the
    reference validator also lets other Unicode letters through); "Must not start or end with a hyphen"; "Must not
    contain consecutive hyphens"; "Must match the parent directory name". A string as YAML 1.1 reads it (``123``
    or ``true`` unquoted would not be).
  - S4 ``description``: "Must be 1-1024 characters", a string, not blank.
  - S5 ``compatibility``: "Must be 1-500 characters if provided".
  - S6 ``metadata``: "A map from string keys to string values".
  - S7 ``allowed-tools``: "a space-delimited string or a YAML sequence of strings".
  - S8 the values read by YAML 1.1 (PyYAML) equal those read by the reference validator (strictyaml).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ALLOWED_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")  # S3: a-z, 0-9, single inner hyphens


def front_matter(text: str) -> tuple[str, str] | None:
    """(front matter, body) of a SKILL.md text as S1 delimits it, or None."""
    lines = text.split("\n")
    if not lines or lines[0] != "---":
        return None
    for i, line in enumerate(lines[1:], start=1):
        if line == "---":
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :])
    return None


def strict_problems(skill_dir: Path) -> list[str]:
    """What breaks S1-S8 in ``skill_dir/SKILL.md`` (empty: none)."""
    path = Path(skill_dir) / "SKILL.md"
    if not path.is_file():
        return ["S1: SKILL.md is missing"]
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return ["S1: SKILL.md is not UTF-8"]
    parts = front_matter(text)
    if parts is None:
        return ["S1: no front matter between --- lines"]
    try:
        meta = yaml.safe_load(parts[0])
    except yaml.YAMLError as exc:
        return [f"S1: the front matter is not YAML: {exc}"]
    if not isinstance(meta, dict):
        return ["S1: the front matter is not a mapping"]
    problems = [f"S2: unknown key {key!r}" for key in meta if key not in ALLOWED_KEYS]
    problems += [f"S2: {key} is missing" for key in ("name", "description") if key not in meta]
    name = meta.get("name")
    if "name" in meta:
        if not isinstance(name, str):
            problems.append(f"S3: name is a {type(name).__name__}, not a string")
        else:
            if not 1 <= len(name) <= 64:
                problems.append(f"S3: name has {len(name)} characters")
            if not NAME.match(name):
                problems.append(f"S3: name {name!r} is not lowercase a-z/0-9 words joined by single hyphens")
            if name != Path(skill_dir).name:
                problems.append(f"S3: name {name!r} is not the folder's name {Path(skill_dir).name!r}")
    description = meta.get("description")
    if "description" in meta and (
        not isinstance(description, str) or not description.strip() or len(description) > 1024
    ):
        problems.append("S4: description is not a non-blank string of 1-1024 characters")
    if "compatibility" in meta and not (
        isinstance(meta["compatibility"], str) and 1 <= len(meta["compatibility"]) <= 500
    ):
        problems.append("S5: compatibility is not a string of 1-500 characters")
    if "metadata" in meta and not (
        isinstance(meta["metadata"], dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in meta["metadata"].items())
    ):
        problems.append("S6: metadata is not a map of strings to strings")
    tools = meta.get("allowed-tools")
    if "allowed-tools" in meta and not (
        isinstance(tools, str) or (isinstance(tools, list) and all(isinstance(t, str) for t in tools))
    ):
        problems.append("S7: allowed-tools is neither a string nor a list of strings")
    if not problems:
        problems += _reference_reading_differs(text, meta)
    return problems


def _reference_reading_differs(text: str, meta: dict) -> list[str]:
    """S8: the reference validator's parser reads the same values."""
    from skills_ref.errors import ParseError
    from skills_ref.parser import parse_frontmatter

    try:
        reference, _ = parse_frontmatter(text)
    except ParseError as exc:
        return [f"S8: the reference parser refuses it: {exc}"]
    return [] if reference == meta else [f"S8: YAML 1.1 reads {meta!r}, the reference parser {reference!r}"]


def skill_problems(skill_dir: Path) -> list[str]:
    """Every problem the reference validator or the strict rules find in a skill folder (empty: a valid skill)."""
    from skills_ref import validate

    try:
        reference = [f"skills-ref: {p}" for p in validate(Path(skill_dir))]
    except UnicodeDecodeError as exc:  # the reference validator reads the file as UTF-8 without catching this
        reference = [f"skills-ref: not UTF-8 ({exc})"]
    return reference + strict_problems(skill_dir)

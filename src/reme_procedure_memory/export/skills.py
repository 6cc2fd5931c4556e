"""An experience as an Agent Skills folder, and the export's index: pure functions from texts to bytes.

The format is the Agent Skills specification (agentskills.io/specification; its source is ``docs/specification.mdx``
of github.com/agentskills/agentskills, whose reference validator is the ``skills-ref`` package). A skill is a folder
``<name>/`` holding ``SKILL.md``: YAML front matter between ``---`` lines, then a Markdown body with no format
restrictions. The rules this module writes to:

* ``name`` (required): 1-64 characters, lowercase letters ``a-z``, digits and hyphens, no hyphen at either end, no
  ``--``, equal to the folder's name. ``skill_name`` maps an experience's file name onto it.
* ``description`` (required): 1-1024 characters, non-empty; says what the skill does and when to use it.
  ``skill_description`` builds it from the experience's description and when-to-use.
* optional fields: ``license``, ``compatibility`` (1-500 characters), ``metadata`` (a map from string keys to string
  values; clients' own properties, "reasonably unique" key names) and ``allowed-tools``; no other key. The export
  writes ``metadata`` only: ``reme-experience`` (the workspace-relative path) and ``reme-version`` (its version).

Every front-matter value is a YAML double-quoted scalar (``yaml_string``): a name such as ``123`` or ``true`` stays a
string for YAML 1.1 parsers, and any text is safe. A skill is what an agent loads, so the body holds the content
first and the sources last.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..schema import Experience

SKILL_FILE = "SKILL.md"
MAX_NAME_CHARS = 64  # the specification's limit of ``name``
MAX_DESCRIPTION_CHARS = 1024  # the specification's limit of ``description``
NAME_HASH_CHARS = 8  # hex digits of the SHA-256 that end a shortened name
CUT_MARK = "\u2026"  # "…", ends a description that was shortened
CUT_AT_SPACE_WITHIN = 100  # a shortened description ends at a space when one is among its last 100 characters
WHEN_LABEL = "When to use: "
EXPERIENCE_KEY, VERSION_KEY = "reme-experience", "reme-version"  # the export's ``metadata`` keys


def skill_name(filename: str) -> str:
    """The skill's name (and folder name) of a valid experience file name ``<stem>.json``.

    An experience name is already lowercase ``a-z``/``0-9`` words joined by single hyphens, so the stem is a valid
    skill name when it has at most 64 characters, and is used as is. A longer stem (experience names allow 115) is
    shortened to its first 55 characters (without a hyphen at the end), a hyphen and the first 8 hex digits of the
    SHA-256 of the whole stem: 64 characters at most, distinct for distinct long stems but for a hash collision. Such
    a name could still equal another experience's own stem (chosen to look like one): ``plan.assign_names`` refuses
    that clearly instead of letting one overwrite the other.
    """
    stem = filename.removesuffix(".json")
    if len(stem) <= MAX_NAME_CHARS:
        return stem
    digest = hashlib.sha256(stem.encode("utf-8")).hexdigest()[:NAME_HASH_CHARS]
    return f"{stem[: MAX_NAME_CHARS - NAME_HASH_CHARS - 1].rstrip('-')}-{digest}"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines, tabs, Unicode line separators) made one space, stripped."""
    return " ".join(text.split())


def skill_description(description: str, when_to_use: str) -> tuple[str, bool]:
    """The front matter's ``description`` and whether it was shortened.

    It is ``<description>. When to use: <when-to-use>``, each text on one line (``one_line``; the period only when
    the description ends without ``.``, ``!`` or ``?``). Over 1024 characters it is cut to 1023 — back to the last
    space when there is one among the last 100 characters, so a word is not split — and ends with "…". The tail goes
    first, so the when-to-use is what is cut (the description too only when it alone is that long); the body then
    carries both texts whole (``render_skill``).
    """
    what = one_line(description)
    end = "" if what.endswith((".", "!", "?")) else "."
    text = f"{what}{end} {WHEN_LABEL}{one_line(when_to_use)}"
    if len(text) <= MAX_DESCRIPTION_CHARS:
        return text, False
    head = text[: MAX_DESCRIPTION_CHARS - len(CUT_MARK)]
    space = head.rfind(" ")
    if space >= len(head) - CUT_AT_SPACE_WITHIN:
        head = head[:space]
    return head.rstrip() + CUT_MARK, True


def _raw_ok(char: str) -> bool:
    """Whether ``char`` may stand unescaped in a double-quoted scalar: YAML's printable characters (YAML 1.1 and 1.2,
    section 5.1) less the ones some parsers read as line breaks (U+0085, U+2028, U+2029) or a byte order mark."""
    return (
        char == "\t"
        or " " <= char <= "~"
        or ("\xa0" <= char <= "\ud7ff" and char not in "\u2028\u2029")
        or ("\ue000" <= char <= "\ufffd" and char != "\ufeff")
        or char >= "\U00010000"
    )


def yaml_string(text: str) -> str:
    """``text`` as a YAML double-quoted scalar that every YAML parser reads back as exactly ``text``.

    ``"`` and ``\\`` are escaped, and every character ``_raw_ok`` refuses (controls, DEL, C1, line and paragraph
    separators, the byte order mark) as ``\\uXXXX``. A hyphen that would make
    a third one in a row is escaped as ``\\u002d`` too: parsers that find the front matter's end by splitting on
    ``---`` (``skills-ref`` does) must not find one inside a value.
    """
    out = ['"']
    run = 0  # hyphens just written raw
    for char in text:
        if char == "-":
            out.append("-" if run < 2 else "\\u002d")
            run += 1
            continue
        run = 0
        if char in '"\\':
            out.append("\\" + char)
        elif _raw_ok(char):
            out.append(char)
        else:
            out.append(f"\\u{ord(char):04x}")
    out.append('"')
    return "".join(out)


def code_span(text: str) -> str:
    """``text`` as a Markdown code span (a fence longer than any run of backticks inside it, CommonMark 6.1)."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


@dataclass(frozen=True)
class Skill:
    """One experience rendered as a skill: its folder ``name``, the experience's ``path`` and version, the front
    matter's ``description`` (``cut`` when shortened) and the bytes of its ``SKILL.md``."""

    name: str
    path: str
    version: str
    description: str
    cut: bool
    data: bytes

    @property
    def file(self) -> str:
        """``<name>/SKILL.md``, relative to the export's directory."""
        return f"{self.name}/{SKILL_FILE}"


def render_skill(name: str, path: str, version: str, experience: Experience) -> Skill:
    """The skill of experience ``path`` (at ``version``) under the folder name ``name``.

    ``SKILL.md`` is the front matter (``name``, ``description``, ``metadata`` with the experience's path and version)
    and a body: the content as written, then — only when the description was shortened — the whole description and
    when-to-use under "Description" and "When to use", then "Sources": the trajectory copies it was learned from,
    relative to its ReMe workspace. UTF-8, ending in one newline.
    """
    description, cut = skill_description(experience.description, experience.when_to_use)
    lines = [
        "---",
        f"name: {yaml_string(name)}",
        f"description: {yaml_string(description)}",
        "metadata:",
        f"  {EXPERIENCE_KEY}: {yaml_string(path)}",
        f"  {VERSION_KEY}: {yaml_string(version)}",
        "---",
        "",
        experience.content.rstrip("\n"),
        "",
    ]
    if cut:
        lines += [
            "## Description",
            "",
            experience.description.strip("\n"),
            "",
            "## When to use",
            "",
            experience.when_to_use.strip("\n"),
            "",
        ]
    lines += ["## Sources", "", "Trajectories this procedure was learned from (paths in its ReMe workspace):", ""]
    lines += [f"- {code_span(source)}" for source in experience.sources]
    return Skill(name, path, version, description, cut, ("\n".join(lines) + "\n").encode("utf-8"))


def render_index(skills: list[Skill]) -> bytes:
    """The export's index (``INDEX.md``): every exported skill by name, a link to its ``SKILL.md``, its front-matter
    description and the experience it came from. Skills are listed in ``skills``' order."""
    lines = [
        "# Procedures exported from ReMe",
        "",
        "Agent Skills written by `procedure_export` (reme-procedure-memory), one folder per experience. Every export",
        "rewrites this file; edit the experiences, not the skills.",
        "",
    ]
    lines += [f"- [{s.name}]({s.file}): {s.description} (from {code_span(s.path)})" for s in skills]
    if not skills:
        lines.append("No experience was exported.")
    return ("\n".join(lines) + "\n").encode("utf-8")

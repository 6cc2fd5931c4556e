"""Reading trajectories: plain text (extensionless too), Markdown, JSON, JSONL and logs.

The extraction reads the decoded text itself, so JSON and JSONL keep every field. Two checks, both pure:

* ``screen_text``: what can be told of any file before it is copied — a supported extension, no NUL bytes (a binary
  file), UTF-8 text, not empty. The import runs it on the original and refuses before anything is copied
  (docs/decisions.md ``[import-rejected]``);
* ``decode_trajectory``: ``screen_text`` and then the structure the extension promises (strict JSON, one JSON value
  per JSONL line), found while reading the saved copy, which is then kept (the spec: malformed input retains it).

Both raise UnsupportedTrajectory / MalformedTrajectory with a message that names the problem.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ..errors import MalformedTrajectory, UnsupportedTrajectory
from ..schema import loads_strict

TEXT_SUFFIXES = {"", ".txt", ".text", ".log", ".md", ".markdown"}
JSON_SUFFIXES = {".json"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
SUPPORTED = sorted((TEXT_SUFFIXES | JSON_SUFFIXES | JSONL_SUFFIXES) - {""})


def trajectory_format(filename: str) -> str:
    """``text``, ``json`` or ``jsonl`` by extension (case-insensitive); raise UnsupportedTrajectory otherwise."""
    suffix = PurePosixPath(filename).suffix.lower()
    if suffix in JSON_SUFFIXES:
        return "json"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in TEXT_SUFFIXES:
        return "text"
    raise UnsupportedTrajectory(
        f"{filename!r} has an unsupported extension {suffix!r}; supported: plain text (also without extension), "
        f"{', '.join(SUPPORTED)}",
    )


def screen_text(data: bytes, filename: str) -> str:
    """The decoded text of a file whose extension is supported and whose bytes are UTF-8 text (no NUL byte), not
    empty; raise UnsupportedTrajectory / MalformedTrajectory otherwise. Needs no structure: runs before the copy."""
    trajectory_format(filename)
    if b"\x00" in data:
        raise UnsupportedTrajectory(f"{filename!r} contains NUL bytes: binary files are not trajectories")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedTrajectory(f"{filename!r} is not UTF-8 text ({exc})") from None
    if not text.strip():
        raise MalformedTrajectory(f"{filename!r} is empty")
    return text


def decode_trajectory(data: bytes, filename: str) -> str:
    """The decoded text of a trajectory after checking its format (``screen_text``, then the structure of JSON and
    JSONL); raise Unsupported/MalformedTrajectory."""
    text = screen_text(data, filename)
    kind = trajectory_format(filename)
    body = text[1:] if text.startswith("\ufeff") else text  # a byte-order mark is checked past, and kept
    if kind == "json":
        check_json(body, f"{filename!r}")
    elif kind == "jsonl":
        # Records end at "\n" only: U+2028, U+2029 and U+0085 may stand unescaped inside JSON strings.
        for number, line in enumerate(body.split("\n"), 1):
            if line.strip():
                check_json(line, f"{filename!r} line {number}")
    return text


def check_json(text: str, where: str) -> None:
    """Raise MalformedTrajectory unless ``text`` is one strict JSON value (RFC 8259: no NaN/Infinity)."""
    try:
        loads_strict(text)
    except ValueError as exc:  # a JSONDecodeError, or NaN/Infinity refused by loads_strict
        raise MalformedTrajectory(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise MalformedTrajectory(
            f"{where} nests arrays/objects deeper than the JSON reader supports (about 1,000 levels)",
        ) from None

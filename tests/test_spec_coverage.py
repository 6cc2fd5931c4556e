"""``docs/spec-coverage.md`` cites tests that exist: every ``file::test`` (and every ``::test`` after it in the same
cell, which names a test of the last file named) is a test function of that file, so a renamed or deleted test fails
here instead of leaving a citation behind."""

from __future__ import annotations

import re

from helpers import REPO, TESTS

COVERAGE = REPO / "docs" / "spec-coverage.md"
CITATION = re.compile(r"((?:tests/)?[\w/]+\.py)|::(test_\w+)")


def cited() -> list[tuple[int, str, str]]:
    """(line, file under tests/, test name) of every citation of a test."""
    found = []
    for number, line in enumerate(COVERAGE.read_text(encoding="utf-8").splitlines(), 1):
        current = None
        for match in CITATION.finditer(line):
            if match.group(1):
                current = match.group(1).removeprefix("tests/")
            elif current is not None:
                found.append((number, current, match.group(2)))
    return found


def test_every_test_the_spec_coverage_cites_exists():
    citations = cited()
    assert len(citations) > 300  # the table is read (a change of its syntax would otherwise pass unseen)
    missing = [
        f"line {number}: {file}::{name}"
        for number, file, name in citations
        if not (TESTS / file).is_file()
        or not re.search(rf"^\s*(?:async )?def {name}\(", (TESTS / file).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []

"""benchmarks/benchlib/faithfulness.py: steps traced to the trajectories an experience cites."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from benchlib.faithfulness import evidence, faithfulness, steps, traceable  # noqa: E402

CONTENT = """Procedure:
1. cd(folder=<dir>) into the folder the user names, e.g. folder='document'.
2. mv(source=<file_name>, destination=<dir>).
3. Report the result.

Rules:
- Pass the user's names verbatim, e.g. 'final_report.pdf' (2 trajectories).
Advice (not shown in the trajectory):
- rm(file_name='x') first."""


def test_steps_leave_out_headers_blank_lines_and_the_extractors_advice():
    assert steps(CONTENT) == [
        "1. cd(folder=<dir>) into the folder the user names, e.g. folder='document'.",
        "2. mv(source=<file_name>, destination=<dir>).",
        "3. Report the result.",
        "- Pass the user's names verbatim, e.g. 'final_report.pdf' (2 trajectories).",
    ]


def test_evidence_is_calls_and_quoted_literals_never_placeholders():
    assert evidence("1. cd(folder=<dir>) e.g. folder='document'.") == {"cd", "document"}
    assert evidence("3. Report the result.") == set()
    assert evidence('grep(file_name="<file>", pattern="budget analysis")') == {"grep", "budget analysis"}


def test_a_step_is_traced_by_one_piece_in_one_cited_text():
    trajectory = '{"name": "mv", "arguments": {"source": "final_report.pdf"}}'
    assert traceable("2. mv(source=<file_name>)", [trajectory]) is True
    assert traceable("- e.g. 'final_report.pdf'", ["other", trajectory]) is True
    assert traceable("1. rm(file_name='x')", [trajectory]) is False
    assert traceable("3. Report the result.", [trajectory]) is None


def test_faithfulness_counts_over_experiences_with_their_own_sources():
    texts = {"a.jsonl": "cd mv document", "b.jsonl": "nothing"}
    result = faithfulness([(CONTENT, ["a.jsonl"]), ("1. grep(file_name='x')", ["b.jsonl"])], texts.__getitem__)
    # CONTENT: cd/document, mv traced; "Report" no evidence; the rule's literal not in a.jsonl; grep untraced
    assert result == {"steps": 5, "with_evidence": 4, "traceable": 2, "share": 0.5}
    assert faithfulness([], texts.__getitem__)["share"] is None

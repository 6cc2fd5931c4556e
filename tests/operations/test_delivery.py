"""What a search delivers beyond ranking (operations/delivery.py): function names as whole identifiers, the experience
text, the rules of a ``detail=rules`` answer, the token budget."""

from __future__ import annotations

import pytest
from reme_procedure_memory.operations.delivery import (
    evidence_of,
    evident_content,
    rule_items,
    experience_text,
    names_any,
    rules_of,
    rules_text,
    tool_pattern,
    within_budget,
)


@pytest.mark.parametrize(
    "content, names, expected",
    [
        ("1. post_tweet(content='x')", ["post_tweet"], True),
        ("then post_tweet to publish", ["post_tweet"], True),
        ("call TwitterAPI.post_tweet with the text", ["post_tweet"], True),
        ("`post_tweet`", ["post_tweet"], True),
        ("post_tweet", ["post_tweet"], True),  # the whole text
        ("post_tweets(...)", ["post_tweet"], False),  # a longer identifier
        ("repost_tweet(...)", ["post_tweet"], False),
        ("post_tweet_v2(...)", ["post_tweet"], False),
        ("Post_Tweet(...)", ["post_tweet"], False),  # case-sensitive: functions are identifiers
        ("cd(folder='docs')", ["cd"], True),
        ("cd into the folder", ["cd"], True),
        ("mount the cdrom", ["cd"], False),
        ("abcd efg", ["cd"], False),
        ("get_x_y(1)", ["get_x"], False),
        ("get_x(1)", ["get_x"], True),
        ("cd(folder='docs')", ["GorillaFileSystem.cd"], True),  # a qualified name also matches its last part
        ("GorillaFileSystem.cd(folder='docs')", ["GorillaFileSystem.cd"], True),
        ("ls -a", ["GorillaFileSystem.cd"], False),
        ("1. ls(a=True)\n2. mv(source='a')", ["touch", "mv"], True),  # any of the names
        ("1. ls(a=True)", ["touch", "mv"], False),
        ("a.b(c)", ["a.b"], True),
        ("x+y(1)", ["x+y"], True),  # names are matched literally, never as patterns
        ("xxy(1)", ["x+y"], False),
        ("", ["cd"], False),
    ],
)
def test_a_function_is_named_as_a_whole_identifier(content, names, expected):
    assert names_any(content, tool_pattern(names)) is expected


def test_the_longest_name_wins_where_one_name_contains_another():
    pattern = tool_pattern(["get", "get_stock_info"])
    assert pattern.search("use get_stock_info(symbol)").group(0) == "get_stock_info"
    assert names_any("use get_stock_info(symbol)", tool_pattern(["get"])) is False


def test_the_experience_text_joins_the_three_fields_an_agent_is_handed():
    fields = {"description": "D", "when-to-use": "W", "content": "C", "sources": ["s"]}
    assert experience_text(fields) == "D\nW\nC"


@pytest.mark.parametrize(
    "content, rules",
    [
        ("1. touch(file_name=<f>)\nRules:\n- A.\n- B.", "- A.\n- B."),
        ("1. step\n  Rules:  \n\n- A.\n\n", "- A."),  # spaces around the head, blank lines around the rules
        ("Rules:\n- only rules", "- only rules"),
        ("1. step\nRules:\n- A.\nRules:\n- B.", "- A.\nRules:\n- B."),  # the first head starts them
        ("1. step\nRules:", ""),  # a head with nothing after it
        ("1. step, following the Rules: below\n- A.", ""),  # a head is a line of its own
        ("1. step\nrules:\n- A.", ""),  # exactly ``Rules:``
        ("1. step\nRules: - A.", ""),
        ("", ""),
    ],
)
def test_the_rules_are_the_lines_after_the_first_rules_line(content, rules):
    assert rules_of(content) == rules


def test_the_rules_text_is_description_when_to_use_and_rules_or_the_first_two_alone():
    fields = {"description": "D", "when-to-use": "W", "content": "1. step\nRules:\n- R.", "sources": ["s"]}
    assert rules_text(fields) == "D\nW\n- R."
    assert rules_text({**fields, "content": "1. step"}) == "D\nW"


@pytest.mark.parametrize(
    "tokens, budget, expected",
    [
        ([], 10, 0),
        ([5, 5, 5], 15, 3),
        ([5, 5, 5], 14, 2),
        ([5, 5, 5], 10, 2),
        ([5, 5, 5], 9, 1),
        ([5, 5, 5], 5, 1),
        ([5, 5, 5], 4, 0),  # a first result larger than the budget is left out, never cut
        ([20, 1, 1], 10, 0),  # the first that does not fit ends the answer: a smaller later one is not taken instead
        ([3, 20, 1], 10, 1),
        ([0, 0], 1, 2),
    ],
)
def test_the_budget_takes_the_longest_prefix_that_fits(tokens, budget, expected):
    assert within_budget(tokens, budget) == expected
    assert sum(tokens[:expected]) <= budget
    assert expected == len(tokens) or sum(tokens[: expected + 1]) > budget


# -- rules by their evidence (procedure_search min_evidence) --------------------------------------------------------

CONTENT = """Procedure:
1. touch(file_name=<name>).
Rules:
- Write the text verbatim (5 trajectories).
- "If it exists, error" was handled by touch (1 trajectory).
- A rule that goes on
  over a second line (2 trajectories).
- A rule without a count."""


def test_a_rule_is_a_dash_line_with_the_lines_that_continue_it_and_its_evidence_the_last_count():
    lines = ["- A (2 trajectories)", "  more (4 trajectories).", "- B.", "- C (1 trajectory)"]
    items = rule_items(lines)
    assert items == [lines[:2], ["- B."], ["- C (1 trajectory)"]]
    assert [evidence_of(item) for item in items] == [4, None, 1]
    assert rule_items(["preamble", "- A"]) == [["preamble"], ["- A"]]


def test_min_evidence_leaves_out_the_rules_fewer_trajectories_showed_and_says_how_many():
    assert evident_content(CONTENT, 0) == evident_content(CONTENT, 1) == (CONTENT, 0)
    assert evident_content(CONTENT, 2) == (
        CONTENT.replace('- "If it exists, error" was handled by touch (1 trajectory).\n', ""),
        1,
    )
    assert evident_content(CONTENT, 3) == (
        "Procedure:\n1. touch(file_name=<name>).\nRules:\n- Write the text verbatim (5 trajectories).\n"
        "- A rule without a count.",
        2,
    )
    assert evident_content(CONTENT, 6) == (
        "Procedure:\n1. touch(file_name=<name>).\nRules:\n- A rule without a count.",
        3,
    )


def test_with_no_rule_left_the_rules_line_goes_and_a_content_without_rules_stays():
    only_thin = "Procedure:\n1. cd.\nRules:\n- Go in first (1 trajectory)."
    assert evident_content(only_thin, 2) == ("Procedure:\n1. cd.", 1)
    assert evident_content("1. cd (1 trajectory).", 5) == ("1. cd (1 trajectory).", 0)  # no Rules: line: no rules
    every_rule_evident = "1. cd.\nRules:\n- Go in first (3 trajectories)."
    assert evident_content(every_rule_evident, 3) == (every_rule_evident, 0)

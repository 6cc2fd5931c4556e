"""The transfer mode of ``benchmarks/extraction.py``: the trajectory parser (``benchlib/turns.py``), the split and metrics
(``benchlib/transfer.py``), the reference library's placement (``benchlib/library.py``), and the whole mode end to end through the
real ``procedure_auto_memory``, ``procedure_reindex`` and ``procedure_search`` jobs of in-process Applications (a
scripted agent and fake embeddings only) on a case whose answer is known by construction.

Run: ``pytest -q tests/benchmarks``. The parser is also checked on the real trajectories of ``../shared/data`` when
it exists; everything else uses files built here or ``tests/fixtures``.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import extraction  # noqa: E402
from benchlib.library import index_placed, load_library, place_library  # noqa: E402
from benchlib.transfer import (  # noqa: E402
    cases_of,
    ceiling,
    copies_of,
    names,
    split,
    summarize,
    training_calls,
    turn_metrics,
    verdict,
)
from benchlib.turns import Turn, parse_turns, read_turns  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
SHARED_TRAJECTORIES = next(
    (p / "shared" / "data" / "trajectories" for p in REPO.parents if (p / "shared" / "data" / "trajectories").is_dir()),
    None,
)


# -- the parser -----------------------------------------------------------------------------------------------------

# One conversation in the four shared formats, written by hand: parallel calls, a turn without calls, a multi-line
# user message, tool output that looks like a header or a user line, a call before any user message (no turn).
CONVERSATION = [
    Turn("Archive the ledger, please.", ("open_ledger", "archive", "archive")),
    Turn("Thanks!", ()),
    Turn("Now post it.\nUse the team account.", ("authenticate_twitter", "post_tweet")),
]

JSONL = (
    "\n".join(
        json.dumps(m)
        for m in [
            {"role": "system", "content": "You are an assistant."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "warm_up", "arguments": ""}}],
            },
            {"role": "user", "content": "Archive the ledger, please."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "open_ledger", "arguments": "name='q3'"}},
                    {"id": "c2", "type": "function", "function": {"name": "archive", "arguments": "x=1"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "open_ledger", "content": '{"role": "user"}'},
            {"role": "tool", "tool_call_id": "c2", "name": "archive", "content": "None"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "archive", "arguments": "x=2"}}],
            },
            {"role": "assistant", "content": "Done with this request."},
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "You are welcome."},
            {"role": "user", "content": "Now post it.\nUse the team account."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c4", "type": "function", "function": {"name": "authenticate_twitter", "arguments": ""}},
                    {"id": "c5", "type": "function", "function": {"name": "post_tweet", "arguments": "content='x'"}},
                ],
            },
        ]
    )
    + "\n"
)

JSON = json.dumps({"id": "conversation", "messages": [json.loads(line) for line in JSONL.splitlines()]}, indent=1)

MARKDOWN = """# Session conversation

## system

You are an assistant.

**assistant → tool** `warm_up()`

## user

Archive the ledger, please.

**assistant → tool** `open_ledger(name='q3')`

```
## user

not a user message
```

**assistant → tool** `archive(x=1)`

```
None
```

**assistant → tool** `archive(x=2)`

## assistant

Done with this request.

## user

Thanks!

## assistant

You are welcome.

## user

Now post it.
Use the team account.

**assistant → tool** `authenticate_twitter()`

**assistant → tool** `post_tweet(content='x')`
"""

LOG = """2026-11-03T09:00:00 INFO system: You are an assistant.
2026-11-03T09:00:01 INFO agent tool_call warm_up()
2026-11-03T09:00:07 INFO user: Archive the ledger, please.
2026-11-03T09:00:14 INFO agent tool_call open_ledger(name='q3')
2026-11-03T09:00:21 DEBUG tool open_ledger -> {"rows": 2}
INFO user: not a user message (a continuation line of the tool output)
2026-11-03T09:00:28 INFO agent tool_call archive(x=1)
2026-11-03T09:00:35 DEBUG tool archive -> None
2026-11-03T09:00:36 INFO agent tool_call archive(x=2)
2026-11-03T09:00:42 INFO assistant: Done with this request.
2026-11-03T09:00:49 INFO user: Thanks!
2026-11-03T09:00:50 INFO assistant: You are welcome.
2026-11-03T09:00:51 INFO user: Now post it.
Use the team account.
2026-11-03T09:00:56 INFO agent tool_call authenticate_twitter()
2026-11-03T09:00:57 INFO agent tool_call post_tweet(content='x')
"""


@pytest.mark.parametrize("suffix,text", [(".jsonl", JSONL), (".json", JSON), (".md", MARKDOWN), (".log", LOG)])
def test_each_format_gives_the_turns_of_the_conversation(suffix, text):
    assert parse_turns(text, suffix) == CONVERSATION
    assert [t.functions for t in CONVERSATION] == [
        ("open_ledger", "archive"),
        (),
        ("authenticate_twitter", "post_tweet"),
    ]


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown trajectory format"):
        parse_turns("", ".txt")


def markers(path: Path) -> tuple[int, int]:
    """(user messages, tool calls) of a real trajectory, counted on its text without the parser."""
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".jsonl", ".json"):
        return text.count('"role": "user"'), text.count('"type": "function"')
    if path.suffix == ".md":
        return text.count("\n## user\n"), text.count("**assistant → tool**")
    return text.count(" INFO user: "), text.count(" INFO agent tool_call ")


def real_trajectories() -> list[Path]:
    paths = sorted((FIXTURES / "trajectories").iterdir())
    if SHARED_TRAJECTORIES is not None:
        paths += sorted(SHARED_TRAJECTORIES.glob("*/*"))
    return paths


@pytest.mark.parametrize("path", real_trajectories(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_trajectories_parse_into_their_user_turns_and_calls(path):
    turns = read_turns(path)
    users, calls = markers(path)
    assert len(turns) == users > 0
    assert sum(len(t.calls) for t in turns) == calls
    assert all(t.message and not t.message.startswith(("#", "*", "{")) for t in turns)


def test_the_fixture_formats_cover_all_four_and_match_their_content():
    assert {p.suffix for p in real_trajectories()} >= {".jsonl", ".json", ".md", ".log"}
    first = read_turns(FIXTURES / "trajectories" / "multi_turn_base_1.md")
    assert first[0].message.startswith("I am alex.") and first[0].calls == ("ls",)
    assert first[1].calls == ("cd", "mv")
    log = read_turns(FIXTURES / "trajectories" / "multi_turn_base_10.log")
    assert log[0] == Turn(
        "Hey, can you set up a new directory named 'Projects' right in workspace folder?", ("cd", "mkdir")
    )


def first_user_message(path: Path) -> str:
    """The first user message of a real trajectory, found without the parser."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return next(m["content"] for m in map(json.loads, text.splitlines()) if m["role"] == "user")
    if path.suffix == ".json":
        return next(m["content"] for m in json.loads(text)["messages"] if m["role"] == "user")
    if path.suffix == ".md":
        return re.search(r"^## user\n\n(.*?)\n\n", text, re.M | re.S).group(1)
    return re.search(r" INFO user: (.*)$", text, re.M).group(1)


@pytest.mark.parametrize("path", real_trajectories(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_task_is_the_first_user_message(path):
    assert extraction.task_of(path) == first_user_message(path).strip() != ""


# -- split and metrics ----------------------------------------------------------------------------------------------


def test_the_split_is_by_number_and_puts_every_format_in_both_halves():
    suffixes = (".jsonl", ".md", ".log", ".json")  # as the shared files rotate them
    paths = [Path(f"multi_turn_base_{n}{suffixes[n % 4]}") for n in range(40)]
    random.Random(7).shuffle(paths)
    train, test = split(paths)
    assert [int(p.stem.rsplit("_", 1)[1]) for p in train] == list(range(20))
    assert [int(p.stem.rsplit("_", 1)[1]) for p in test] == list(range(20, 40))
    assert {p.suffix for p in train} == {p.suffix for p in test} == set(suffixes)
    assert split(list(reversed(paths))) == (train, test)
    assert split([Path("t_3.md"), Path("t_1.md"), Path("t_2.md")]) == (
        [Path("t_1.md"), Path("t_2.md")],
        [Path("t_3.md")],
    )


@pytest.mark.parametrize(
    "text,function,expected",
    [
        ("Run cd .. first", "cd", True),
        ("GorillaFileSystem.cd(folder='x')", "cd", True),
        ("mount the cdrom", "cd", False),
        ("call get_user_ids", "get_user_id", False),
        ("then `ls`.", "ls", True),
        ("Cd into it", "cd", False),
        ("use post_tweet, then comment", "post_tweet", True),
        ("repost_tweet", "post_tweet", False),
    ],
)
def test_a_function_is_named_only_as_a_whole_identifier(text, function, expected):
    assert names(text, function) is expected


def test_turn_metrics_by_k():
    texts = ["use cd then ls", "nothing relevant", "mkdir here, and cd again"]
    metrics = turn_metrics(["cd", "mkdir", "mv"], texts, [5, 7, 11])
    assert metrics[1] == {"coverage": 1 / 3, "full": False, "results": 1, "named_none": 0, "tokens": 5}
    assert metrics[3] == {"coverage": 2 / 3, "full": False, "results": 3, "named_none": 1, "tokens": 23}
    assert turn_metrics(["cd"], texts, [5, 7, 11])[1]["full"] is True
    empty = turn_metrics(["cd"], [], [])
    assert empty[3] == {"coverage": 0.0, "full": False, "results": 0, "named_none": 0, "tokens": 0}
    with pytest.raises(ValueError):
        turn_metrics([], texts, [1, 1, 1])


def test_summary_means_over_turns_and_shares_over_results():
    per_turn = [turn_metrics(["cd"], ["cd"], [4]), turn_metrics(["mv", "cp"], ["mv", "x", "y"], [2, 3, 5])]
    s = summarize(per_turn)
    assert s["turns"] == 2
    assert s["coverage@1"] == 0.75 and s["coverage@3"] == 0.75
    assert s["full@1"] == 0.5 and s["full@3"] == 0.5
    assert (s["names_none_count@1"], s["results@1"], s["names_none@1"]) == (0, 2, 0.0)
    assert (s["names_none_count@3"], s["results@3"], s["names_none@3"]) == (2, 4, 0.5)
    assert s["tokens@1"] == 3.0 and s["tokens@3"] == 7.0
    assert summarize([])["coverage@1"] is None


def test_ceiling_hands_every_text_for_every_turn():
    cases = [{"functions": ["cd", "mv"]}, {"functions": ["grep"]}, {"functions": ["wc"]}]
    assert ceiling(cases, ["use cd", "then grep", "mv it"]) == {"coverage": round(2 / 3, 3), "full": round(2 / 3, 3)}
    assert ceiling(cases, []) == {"coverage": 0.0, "full": 0.0}


def test_verdict_needs_kept_quality_and_fewer_tokens():
    def views(coverage, none, tokens):
        figures = {
            "coverage@1": coverage,
            "coverage@3": coverage,
            "full@1": 0.5,
            "full@3": 0.5,
            "names_none@1": none,
            "names_none@3": none,
            "tokens@1": tokens / 3,
            "tokens@3": tokens,
        }
        return {"when_to_use": figures, "when_to_use_content": figures}

    before = views(0.5, 0.4, 300)
    assert verdict(before, views(0.5, 0.4, 200))["when_to_use"]["pass"] is True
    fell = verdict(before, views(0.4, 0.4, 200))["when_to_use"]
    assert (fell["pass"], fell["worse"]) == (False, ["coverage@1", "coverage@3"])
    assert verdict(before, views(0.5, 0.5, 200))["when_to_use"]["worse"] == ["names_none@1", "names_none@3"]
    same_tokens = verdict(before, views(0.6, 0.3, 300))["when_to_use_content"]
    assert (same_tokens["quality_kept"], same_tokens["tokens_fell"], same_tokens["pass"]) == (True, False, False)


def test_copies_of_finds_imported_test_trajectories(tmp_path):
    test = [tmp_path / "a.jsonl", tmp_path / "b.md"]
    test[0].write_text("one\n")
    test[1].write_text("two\n")
    copies = tmp_path / "ws" / "session" / "trajectories"
    copies.mkdir(parents=True)
    (copies / "b-2.md").write_text("two\n")
    (copies / "c.md").write_text("three\n")
    assert copies_of(test, copies) == ["b.md"]
    assert copies_of(test, tmp_path / "missing") == []


# -- the reference library's placement ------------------------------------------------------------------------------


async def test_placed_library_experiences_cite_a_copied_file_and_come_back_from_search(make_app, tmp_path):
    library = FIXTURES / "experiences.jsonl"
    experiences = load_library(library)
    ws = tmp_path / "ws"
    source = place_library(ws, experiences, library)
    assert (ws / source).read_bytes() == library.read_bytes()  # the library itself, byte for byte
    assert all(json.loads((ws / "procedures" / e["filename"]).read_text())["sources"] == [source] for e in experiences)
    async with make_app(workspace=ws) as app:
        answer = await index_placed(app, experiences)
        assert answer["indexed"] == len(experiences) == 40
        response = await app.run_job("procedure_search", query=experiences[3]["query"], limit=50)
        found = json.loads(response.answer)
        assert found["pending_indexes"] == [] and len(found["results"]) == 40


async def test_index_placed_refuses_experiences_whose_source_is_missing(make_app, tmp_path):
    library = FIXTURES / "experiences.jsonl"
    experiences = load_library(library)[:3]
    ws = tmp_path / "ws"
    source = place_library(ws, experiences, library)
    (ws / source).unlink()  # the broken placement: sources naming a copy that does not exist
    async with make_app(workspace=ws) as app:
        with pytest.raises(RuntimeError, match="did not index the 3 placed experiences"):
            await index_placed(app, experiences)


# -- the transfer mode end to end -----------------------------------------------------------------------------------


def jsonl(turns: list[Turn]) -> str:
    lines = [{"role": "system", "content": "You are an assistant."}]
    for turn in turns:
        lines.append({"role": "user", "content": turn.message})
        for n, name in enumerate(turn.calls):
            lines.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": ""}}],
                }
            )
            lines.append({"role": "tool", "tool_call_id": f"c{n}", "name": name, "content": "None"})
        lines.append({"role": "assistant", "content": "Done with this request."})
    return "".join(json.dumps(line) + "\n" for line in lines)


def markdown(turns: list[Turn]) -> str:
    parts = ["# Session\n\n## system\n\nYou are an assistant.\n"]
    for turn in turns:
        parts.append(f"\n## user\n\n{turn.message}\n")
        parts += [f"\n**assistant → tool** `{name}()`\n\n```\nNone\n```\n" for name in turn.calls]
        parts.append("\n## assistant\n\nDone with this request.\n")
    return "".join(parts)


def log(turns: list[Turn]) -> str:
    lines = ["2026-11-03T09:00:00 INFO system: You are an assistant."]
    for turn in turns:
        lines.append(f"2026-11-03T09:00:01 INFO user: {turn.message}")
        for name in turn.calls:
            lines += [
                f"2026-11-03T09:00:02 INFO agent tool_call {name}()",
                f"2026-11-03T09:00:03 DEBUG tool {name} -> None",
            ]
        lines.append("2026-11-03T09:00:04 INFO assistant: Done with this request.")
    return "\n".join(lines) + "\n"


def json_file(turns: list[Turn]) -> str:
    return json.dumps({"id": "t", "messages": [json.loads(line) for line in jsonl(turns).splitlines()]}, indent=1)


ARCHIVE = Turn("Archive the zorblax quarterly ledger", ("zorblax_open", "ledger_archive"))
PUBLISH = Turn("Publish the plinth gazette bulletin", ("gazette_publish",))
TEST_A = Turn("Please archive the zorblax quarterly ledger again", ("zorblax_open", "ledger_archive", "ledger_verify"))
TEST_B = Turn("Publish the plinth gazette bulletin now", ("gazette_publish",))
TEST_C = Turn("Say hello", ())
TEST_D = Turn("Fetch the marmalade for the ledger gazette", ("marmalade_fetch",))


def build_case(root: Path) -> tuple[list[Path], Path]:
    """Two training trajectories (numbers 0, 1) and two test ones (2, 3) in the four formats, and a library of two
    released experiences, one of them extracted from a test turn (B)."""
    root.mkdir()
    files = [
        ("multi_turn_base_0.jsonl", jsonl, [ARCHIVE]),
        ("multi_turn_base_1.md", markdown, [PUBLISH]),
        ("multi_turn_base_2.log", log, [TEST_A, TEST_B]),
        ("multi_turn_base_3.json", json_file, [TEST_C, TEST_D]),
    ]
    paths = []
    for name, render, turns in files:
        paths.append(root / name)
        paths[-1].write_text(render(turns), encoding="utf-8")
        assert read_turns(paths[-1]) == turns
    library = root / "library.jsonl"
    library.write_text(
        "".join(
            json.dumps(row) + "\n"
            for row in [
                {
                    "when_to_use": "When the zorblax ledger or the gazette must be archived",
                    "content": "Use zorblax_open then ledger_verify.",
                    "metadata": {"task_query": "Archive something old"},
                },
                {
                    "when_to_use": "When the plinth gazette bulletin must be published",
                    "content": "Call gazette_publish.",
                    "metadata": {"task_query": TEST_B.message},
                },
            ]
        ),
        encoding="utf-8",
    )
    return paths, library


def experience_tokens(path: Path, tokenizer: Path) -> int:
    record = json.loads(path.read_text(encoding="utf-8"))
    text = "\n".join([record["description"], record["when-to-use"], record["content"]])
    return len(Tokenizer.from_file(str(tokenizer)).encode(text).ids)


def smoke_args(*extra: str):
    return extraction.parse_args(["--smoke", "--embedding-dimensions", "64", *extra])


def test_the_transfer_figures_of_a_case_known_by_construction(tmp_path, word_tokenizer):
    paths, library = build_case(tmp_path / "data")
    workdir = tmp_path / "run"
    out = extraction.transfer(smoke_args(), paths, library, word_tokenizer, workdir)

    assert out["split"] == {
        "train": ["multi_turn_base_0.jsonl", "multi_turn_base_1.md"],
        "test": ["multi_turn_base_2.log", "multi_turn_base_3.json"],
    }
    assert out["cases"] == 3  # C led to no call
    assert out["extraction"]["valid_experiences"] == 2 and out["extraction"]["complete"] == 2
    ws = workdir / "ws"
    e_archive, e_publish = "procedures/multi-turn-base-0.json", "procedures/multi-turn-base-1.json"
    tokens = {p: experience_tokens(ws / p, word_tokenizer) for p in (e_archive, e_publish)}
    plugin = out["plugin"]
    assert plugin["index"] == {"indexed": 2, "invalid_files": []} and plugin["pending"] == []
    for view in extraction.VIEWS:
        a, b, d = plugin["turns"]
        assert [t["message"] for t in (a, b, d)] == [TEST_A.message, TEST_B.message, TEST_D.message]
        assert a[view]["paths"][0] == e_archive and b[view]["paths"][0] == e_publish
        assert sorted(d[view]["paths"]) == sorted([e_archive, e_publish])
        assert a[view]["tokens"][0] == tokens[e_archive] and b[view]["tokens"][0] == tokens[e_publish]
        s = plugin["views"][view]
        assert s["turns"] == 3
        assert s["coverage@1"] == s["coverage@3"] == round((2 / 3 + 1 + 0) / 3, 3)
        assert s["full@1"] == s["full@3"] == round(1 / 3, 3)
        assert (s["names_none_count@1"], s["results@1"]) == (1, 3)  # D's first result names none
        assert (s["names_none_count@3"], s["results@3"]) == (4, 6)  # and the other experience of every turn
        assert s["tokens@3"] == tokens[e_archive] + tokens[e_publish]

    bound = {"coverage": round((2 / 3 + 1 + 0) / 3, 3), "full": round(1 / 3, 3)}  # what E0 and E1 name
    assert plugin["ceiling"] == {"experiences": 2, **bound} and out["training_calls"] == bound
    assert training_calls(paths[:2]) == "gazette_publish ledger_archive zorblax_open"

    reference = out["reference"]
    assert (reference["experiences"], reference["excluded"]) == (1, 1)  # the experience of test turn B is left out
    assert reference["ceiling"] == {"experiences": 1, "coverage": round(2 / 9, 3), "full": 0.0}
    for view in extraction.VIEWS:
        s = reference["views"][view]
        assert s["coverage@1"] == s["coverage@3"] == round((2 / 3 + 0 + 0) / 3, 3)  # names zorblax_open, ledger_verify
        assert s["full@3"] == 0.0
        assert (s["names_none_count@3"], s["results@3"]) == (2, 3)


def test_a_kept_workspace_is_evaluated_alike_later_and_one_holding_test_trajectories_is_refused(
    tmp_path, word_tokenizer
):
    paths, library = build_case(tmp_path / "data")
    first = extraction.transfer(smoke_args(), paths, library, word_tokenizer, tmp_path / "run")
    later = extraction.transfer(
        smoke_args("--workspace", str(tmp_path / "run" / "ws")), paths, library, word_tokenizer, tmp_path / "later"
    )
    assert "extraction" not in later
    assert later["plugin"]["views"] == first["plugin"]["views"]
    assert later["plugin"]["turns"] == first["plugin"]["turns"]

    leaky = tmp_path / "leaky"
    (leaky / "session" / "trajectories").mkdir(parents=True)
    (leaky / "session" / "trajectories" / "copy.log").write_bytes(paths[2].read_bytes())
    with pytest.raises(SystemExit, match="multi_turn_base_2.log"):
        extraction.transfer(smoke_args("--workspace", str(leaky)), paths, library, word_tokenizer, tmp_path / "x")


def test_the_smoke_mode_runs_end_to_end_and_compare_reads_its_json(tmp_path):
    answer = tmp_path / "smoke.json"
    out = extraction.main(["--smoke", "--json", str(answer)])
    transfer = out["transfer"]
    assert transfer["cases"] > 0 and transfer["plugin"]["index"]["invalid_files"] == []
    assert transfer["plugin"]["views"]["when_to_use"]["turns"] == transfer["cases"]
    assert json.loads(answer.read_text())["transfer"]["reference"]["views"] == transfer["reference"]["views"]
    same = extraction.main(["--compare", str(answer), str(answer)])
    assert same["plugin"]["when_to_use"] == {"quality_kept": True, "tokens_fell": False, "pass": False, "worse": []}


def test_cases_are_the_turns_with_calls(tmp_path):
    paths, _ = build_case(tmp_path / "data")
    assert [(c["trajectory"], c["turn"], c["functions"]) for c in cases_of(paths[2:])] == [
        ("multi_turn_base_2.log", 0, list(TEST_A.functions)),
        ("multi_turn_base_2.log", 1, ["gazette_publish"]),
        ("multi_turn_base_3.json", 1, ["marmalade_fetch"]),
    ]

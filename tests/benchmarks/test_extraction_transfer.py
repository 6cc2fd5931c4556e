"""The benchmarks' trajectory parser (``benchmarks/_turns.py``) and their placement of ReMe's released experience
library (``benchmarks/_library.py``, used by ``retrieval.py`` and ``extraction.py``) through the real
``procedure_reindex`` and ``procedure_search`` jobs (fake embeddings only).

Run: ``pytest -q tests/benchmarks``. The parser is also checked on the real trajectories of ``../shared/data`` when
it exists; everything else uses files built here or ``tests/fixtures``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import extraction  # noqa: E402
from _library import index_placed, load_library, place_library, source_record  # noqa: E402
from _turns import Turn, parse_turns, read_turns  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
SHARED_TRAJECTORIES = next((p / "shared" / "data" / "trajectories" for p in REPO.parents
                            if (p / "shared" / "data" / "trajectories").is_dir()), None)


# -- the parser -----------------------------------------------------------------------------------------------------

# One conversation in the four shared formats, written by hand: parallel calls, a turn without calls, a multi-line
# user message, tool output that looks like a header or a user line, a call before any user message (no turn).
CONVERSATION = [
    Turn("Archive the ledger, please.", ("open_ledger", "archive", "archive")),
    Turn("Thanks!", ()),
    Turn("Now post it.\nUse the team account.", ("authenticate_twitter", "post_tweet")),
]

JSONL = "\n".join(json.dumps(m) for m in [
    {"role": "system", "content": "You are an assistant."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function",
                                                          "function": {"name": "warm_up", "arguments": ""}}]},
    {"role": "user", "content": "Archive the ledger, please."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "open_ledger", "arguments": "name='q3'"}},
        {"id": "c2", "type": "function", "function": {"name": "archive", "arguments": "x=1"}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "open_ledger", "content": "{\"role\": \"user\"}"},
    {"role": "tool", "tool_call_id": "c2", "name": "archive", "content": "None"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c3", "type": "function", "function": {"name": "archive", "arguments": "x=2"}}]},
    {"role": "assistant", "content": "Done with this request."},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "You are welcome."},
    {"role": "user", "content": "Now post it.\nUse the team account."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c4", "type": "function", "function": {"name": "authenticate_twitter", "arguments": ""}},
        {"id": "c5", "type": "function", "function": {"name": "post_tweet", "arguments": "content='x'"}}]},
]) + "\n"

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
    assert [t.functions for t in CONVERSATION] == [("open_ledger", "archive"), (), ("authenticate_twitter",
                                                                                    "post_tweet")]


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
    assert log[0] == Turn("Hey, can you set up a new directory named 'Projects' right in workspace folder?",
                          ("cd", "mkdir"))


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


# -- the reference library's placement ------------------------------------------------------------------------------


async def test_placed_library_experiences_cite_a_copied_file_and_come_back_from_search(make_app, tmp_path):
    library = FIXTURES / "experiences.jsonl"
    experiences = load_library(library)
    ws = tmp_path / "ws"
    source = place_library(ws, experiences, library)
    assert (ws / source).read_bytes() == source_record(library)
    assert all(json.loads((ws / "procedures" / e["filename"]).read_text())["sources"] == [source]
               for e in experiences)
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

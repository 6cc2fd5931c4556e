"""Which experiences a segment's message lists: queries from pieces of the whole segment, merged rank by
rank, with the contents of the closest ones; pure functions first, then through the real import."""

from __future__ import annotations

import json

from reme_procedure_memory.extraction.prompt import related_lines
from reme_procedure_memory.extraction.related import (
    CALLED_LIMIT,
    PIECE_CHARS,
    PIECES,
    called_names,
    merged_related,
    related_queries,
    shared_calls,
    shown_whole,
    with_contents,
)

from conftest import import_file, memory_of
from helpers import experience_record, place_trajectory
from helpers.corpus import TWO_SEGMENTS, two_segment_original, write


def entry(path, similarity=None, content=None):
    result = {"path": path, "version": "v", "description": f"about {path}", "when-to-use": "w"}
    if similarity is not None:
        result["scores"] = {"vector": similarity}
    if content is not None:
        result["content"] = content
    return result


def test_a_short_segment_is_one_query_with_the_hint():
    assert related_queries("rebuild the index", "search") == ["search rebuild the index"]
    assert related_queries("", "") == ["procedure"] and related_queries("  ", "hint") == ["hint"]


def test_a_long_segment_is_searched_at_its_beginning_middle_and_end():
    text = "".join(f"{i:06d} " for i in range(3000))  # 21,000 characters, word i at character 7 * i
    queries = related_queries(text)
    assert len(queries) == PIECES and all(len(q) <= PIECE_CHARS for q in queries)
    assert [q.split()[0] for q in queries] == ["000000", "001000", "002000"]  # at 0, 7,000 and 14,000
    two = "a" * 755 + "b" * 755  # just over one piece: two pieces that together cover every character
    assert len(two) > PIECE_CHARS and related_queries(two) == ["a" * 755, "b" * 755]


def test_answers_merge_rank_by_rank_and_only_the_closest_keeps_its_content():
    first = {"results": [entry("a", 0.5, "steps a"), entry("b", 0.4), entry("c", 0.3)]}
    second = {"results": [entry("d", 0.9, "steps d"), entry("a", 0.8)]}
    merged = merged_related([first, second], limit=3)
    assert [e["path"] for e in merged] == ["a", "d", "b"]
    assert merged[1]["content"] == "steps d" and "content" not in merged[0]
    assert "content" in first["results"][0]  # the answers themselves are not changed
    no_vectors = merged_related([{"results": [entry("x", None, "steps x")]}, {"results": [entry("y", None, "y")]}], 5)
    assert [("content" in e) for e in no_vectors] == [True, False]  # BM25 only: the first query's best
    assert merged_related([{"results": []}], 5) == [] and merged_related([], 5) == []
    three = merged_related([first, second], limit=5, contents=2)  # the two closest of those carrying content
    assert [("content" in e) for e in three] == [True, True, False, False] and three[1]["content"] == "steps d"
    every = {"results": [entry("p", 0.2, "p"), entry("q", 0.7, "q"), entry("r", 0.5, "r"), entry("s", 0.9, "s")]}
    assert [e["path"] for e in merged_related([every], 4, contents=3) if "content" in e] == ["q", "r", "s"]


def test_a_compact_answer_takes_every_kept_results_content_from_the_whole_answer():
    compact = {
        "results": [entry("a", 0.9, "steps a"), entry("b", 0.8), {"path": "c", "version": "v", "shown_before": True}],
        "left_out": 2,
    }
    whole = {
        "results": [
            entry("a", 0.9, "steps a"),
            {**entry("b", 0.8, "steps b"), "content_truncated": True},
            entry("c", 0.7, "steps c"),
            entry("d", 0.1, "steps d"),
        ]
    }
    out = with_contents(compact, whole)
    assert [(e["path"], e.get("content"), e.get("content_truncated")) for e in out["results"]] == [
        ("a", "steps a", None),
        ("b", "steps b", True),
        ("c", None, None),
    ]  # only named stays only named
    assert out["left_out"] == 2 and "content" not in compact["results"][1]  # weak ones stay out; input unchanged


def test_the_closest_is_listed_with_its_when_to_use_and_content_the_others_by_description():
    lines = related_lines([entry("procedures/a.json", 0.9, "1. cd\n2. mv"), entry("procedures/b.json", 0.5)])
    assert lines == [
        "- procedures/a.json (v): about procedures/a.json\n  when to use: w\n  content:\n    1. cd\n    2. mv",
        "- procedures/b.json (v): about procedures/b.json",
    ]
    cut = related_lines([{**entry("procedures/c.json", 0.9, "1. cd"), "content_truncated": True}])
    assert "content (continues: procedure_read it before rewriting the content):" in cut[0]


def test_an_entry_over_the_bound_says_its_size():
    lines = related_lines(
        [entry("procedures/a.json", 0.9, "1. cd"), entry("procedures/b.json", 0.8, "1. mv")],
        {"procedures/b.json": 287},
        250,
    )
    assert lines[0].startswith("- procedures/a.json (v): about")
    assert lines[1].startswith("- procedures/b.json (v; 287 tokens, over 250: a revision shortens it): about")


def test_only_entries_naming_a_function_the_segment_calls_are_shown_whole():
    entries = [
        entry("procedures/a.json", 0.9, "1. GorillaFileSystem.cd(folder=<dir>)\n2. mv"),
        {**entry("procedures/b.json", 0.8, "1. cdrom_eject()"), "content_truncated": True},
        entry("procedures/c.json", 0.7, "then cd into it"),
        entry("procedures/d.json", 0.6),
    ]
    shown = shown_whole(entries, ["cd", "touch"])
    assert [("content" in e, "content_truncated" in e) for e in shown] == [
        (True, False),
        (False, False),
        (True, False),
        (False, False),
    ]  # "cd" as a whole identifier (a qualified name too), never inside "cdrom_eject"
    assert "content" in entries[1] and entries[1]["content_truncated"]  # copies: the input is unchanged
    assert shown_whole(entries, []) == entries  # no names known: every entry as it was


def test_a_call_more_than_half_of_three_or_more_candidates_name_is_shared_when_another_tells_them_apart():
    assert shared_calls([{"cd", "mv"}, {"cd"}, {"cd", "touch"}]) == {"cd"}
    assert shared_calls([{"cd", "mv"}, {"cd", "mv"}, {"cd", "mv"}, {"wc"}]) == {"cd", "mv"}  # 3 and 3 of 4
    assert shared_calls([{"cd", "mv"}, {"mv"}, {"cd"}, {"wc"}]) == set()  # 2 of 4 is not more than half
    assert shared_calls([{"cd"}, {"cd"}, {"cd"}]) == set()  # nothing else tells them apart
    assert shared_calls([{"cd", "mv"}, {"cd"}]) == set()  # fewer than three candidates


def whole(entries, names):
    return [e["path"][11:] for e in shown_whole(entries, names) if "content" in e]


def test_an_entry_naming_only_a_step_most_entries_share_is_listed_by_its_head():
    entries = [
        entry("procedures/move.json", 0.9, "1. cd(folder=<dir>)\n2. mv(source=<file>)"),
        entry("procedures/touch.json", 0.8, "1. cd(folder=<dir>)\n2. touch(file_name=<file>)"),
        {**entry("procedures/go.json", 0.7, "1. cd(folder=<dir>)"), "description": "Change directory with cd"},
        entry("procedures/grep.json", 0.6, "1. fs.cd(folder=<dir>)\n2. grep(pattern=<word>)"),
        entry("procedures/other.json", 0.5, "1. wc(file_name=<file>)"),
    ]
    # cd: named by all four candidates, so shared; touch.json and grep.json name nothing else the segment calls
    assert whole(entries, ["cd", "mv"]) == ["move.json", "go.json"]  # go.json's description names cd: its goal
    assert whole(entries, ["fs.cd", "cd", "mv"]) == ["move.json", "go.json"]  # one function, two spellings
    assert whole(entries, ["cd", "mv", "touch"]) == ["move.json", "touch.json", "go.json"]
    # with fewer than three candidates nothing is shared; nor when no candidate names another called function
    assert whole(entries[:4], ["cd"]) == ["move.json", "touch.json", "go.json", "grep.json"]
    assert whole(entries[1:2] + entries[3:], ["cd"]) == ["touch.json", "grep.json"]
    # named by exactly half of the candidates is not more than half: not shared
    pair = [entry("procedures/tweet.json", 0.9, "post_tweet(content=<text>)"), *entries[:3]]
    assert whole(pair, ["post_tweet", "mv", "touch"]) == ["tweet.json", "move.json", "touch.json"]
    assert "content" in entries[1]  # copies: the input is unchanged


async def listing(app, original) -> str:
    """Import ``original`` (one segment) with a scripted agent that writes nothing; the listed matches it was shown."""
    prompts = []

    async def reads(tools, prompt, kwargs):
        prompts.append(prompt)
        return "Nothing new."

    app.agent.scripts.append(reads)
    ok, ans = await import_file(app, original, request_id="r1")
    assert ok and ans["status"] == "complete", ans
    return prompts[0].split("match this segment best", 1)[1]


async def test_a_procedure_at_the_end_of_a_segment_is_listed_too(make_app, tmp_path):
    ws = tmp_path / "ws"
    place_trajectory(ws)
    (ws / "procedures").mkdir(parents=True)
    for name, when, content in (
        ("drain-node.json", "Before rebooting a cluster node: cordon and drain it", "cordon, drain, reboot"),
        ("rotate-keys.json", "When leaked credentials must be rotated and access audited", "rotate, audit"),
    ):
        (ws / "procedures" / name).write_text(json.dumps(experience_record(f"About {name}", when, content)))
    drain = '{"role": "user", "content": "cordon the cluster node and drain it before the reboot"}\n'
    rotate = '{"role": "user", "content": "the credentials leaked: rotate them and audit access"}\n'
    original = write(tmp_path, "run.jsonl", drain * (3 * PIECE_CHARS // len(drain)) + rotate * 3)
    async with make_app(workspace=ws, scripts=[]) as app:
        listed = await listing(app, original)
    assert "procedures/drain-node.json" in listed and "procedures/rotate-keys.json" in listed
    assert listed.count("  content:") == 2  # both whole (the segment writes no call: every listed match is)


def test_the_names_a_segment_calls_in_every_trajectory_format():
    jsonl = (
        '{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": '
        '{"name": "cd", "arguments": "{\\"folder\\": \\"docs\\"}"}}]}\n'
        '{"role": "tool", "tool_call_id": "c1", "name": "cd", "content": "{}"}\n'
        '{"role": "assistant", "tool_calls": [{"function": {"name" : "GorillaFileSystem.mv", "arguments": "{}"}}]}\n'
    )
    assert called_names(jsonl) == ["cd", "GorillaFileSystem.mv"]
    markdown = "## assistant\n**assistant → tool** `diff(file_name1='a', file_name2='b')`\nthen `wc(file_name='a')`"
    assert called_names(markdown) == ["diff", "wc"]
    log = "2024-01-01T10:00:00 INFO agent tool_call post_tweet(content='x')\n... tool post_tweet -> {}"
    assert called_names(log) == ["post_tweet"]
    assert called_names("move the file (the draft) into temp, e.g. now") == []  # prose: a space before "("
    many = " ".join(f"f{i}()" for i in range(CALLED_LIMIT + 5))
    assert called_names(many) == [f"f{i}" for i in range(CALLED_LIMIT)]


def six_experiences(tmp_path, name: str, when: str):
    """A workspace with six experiences ``<name>-<n>.json`` whose when-to-use is ``when`` with ``n`` filled in."""
    ws = tmp_path / "ws"
    place_trajectory(ws)
    (ws / "procedures").mkdir(parents=True)
    for n in range(6):
        record = experience_record(f"{name} {n}", when.format(n), f"{name} step {n}")
        (ws / "procedures" / f"{name}-{n}.json").write_text(json.dumps(record))
    return ws


async def test_an_experience_naming_a_function_the_segment_calls_is_listed_first(make_app, tmp_path):
    """Six experiences share the segment's words; the one that names the function it calls (``du``) shares none of
    them, so the queries of the segment's words leave it out of the five listed, and the calls query lists it first."""
    ws = six_experiences(
        tmp_path, "archive-report", "When the project report folder {} must be archived for the review"
    )
    (ws / "procedures" / "disk-usage.json").write_text(
        json.dumps(experience_record("Disk usage", "Size of a directory", "1. du(human_readable=True)"))
    )
    turn = (
        '{"role": "user", "content": "archive the project report folder for the quarterly review"}\n'
        '{"role": "assistant", "tool_calls": [{"function": {"name": "du", "arguments": "{}"}}]}\n'
    )
    original = write(tmp_path, "run.jsonl", turn * 3)
    async with make_app(workspace=ws, scripts=[]) as app:
        listed = await listing(app, original)
        words = json.loads((await app.run_job("procedure_search", query=turn * 3, limit=5, min_relevance=0)).answer)
    assert "procedures/disk-usage.json" not in [r["path"] for r in words["results"]]  # the words alone miss it
    entries = [line.split(" ", 2)[1] for line in listed.splitlines() if line.startswith("- procedures/")]
    assert entries[0] == "procedures/disk-usage.json" and len(entries) == 5


async def test_a_later_segment_lists_what_the_import_wrote_before_first_and_whole(make_app, tmp_path):
    """Six experiences match segment 2's words better than the six segment 1 created (whose words are unrelated): the
    import's own earlier writes are listed first, the latest first, each with its content (they name the function
    the segment calls), more of them than the five searched ones (a read of each would cost a request), then
    searched ones up to ten in all, by their head (they name none); segment 1 lists none of its own (nothing was
    written before it)."""
    ws = six_experiences(tmp_path, "rebuild-index", "When the search index {} is stale after a configuration change")
    prompts = []

    async def creates(tools, prompt, kwargs):
        prompts.append(prompt)
        for n in range(6):
            ok, ans = await tools.call(
                "procedure_create",
                filename=f"rotate-keys-{n}.json",
                operation_key=f"s1-{n}",
                description=f"Rotate leaked keys {n}",
                when_to_use="When credentials leak",
                content=f"1. revoke {n}\n2. rebuild_index(index=<name>)",
            )
            assert ok, ans
        return "<summary>Segment 1: created six rotate-keys experiences.</summary>"

    async def reads(tools, prompt, kwargs):
        prompts.append(prompt)
        return "Nothing new."

    async with make_app(workspace=ws, scripts=[creates, reads], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, two_segment_original(tmp_path), request_id="r1")
        assert ok and ans["status"] == "complete" and ans["segments"]["total"] == 2, ans
    first, second = (p.split("match this segment best", 1)[1] for p in prompts)
    entries = [line.split(" ", 2)[1] for line in second.splitlines() if line.startswith("- procedures/")]
    assert entries[:6] == [f"procedures/rotate-keys-{n}.json" for n in reversed(range(6))]
    # the searched ones follow, each path once: those the own ones do not already list (the calls search finds the
    # own ones too, since they name rebuild_index)
    assert 6 < len(entries) <= 10 and len(set(entries)) == len(entries)
    assert all(e.startswith("procedures/rebuild-index-") for e in entries[6:])
    own = second.split("- procedures/rotate-keys-0.json", 1)[1].split("\n- ", 1)[0]
    assert "content:\n    1. revoke 0\n    2. rebuild_index(index=<name>)" in own
    # a searched entry whose content names no function the segment calls (rebuild_index) is listed by its head
    searched = second.split("- procedures/rebuild-index-", 1)[1]
    assert "when to use:" not in searched and "content:" not in searched
    assert "rotate-keys" not in first


async def test_a_listed_experience_over_the_growth_bound_is_listed_with_its_size(make_app, tmp_path):
    """Two experiences name the function the segment calls (``du``): the one whose three fields hold more than
    ``extraction.grow_limit`` tokens (counted with the workspace's tokenizer, as a revision's bound counts them) is
    listed with its size, the other without one; a bound of 0 lists neither with a size."""
    long = "1. du(human_readable=True) " + " ".join(f"word{i}" for i in range(80))

    def workspace(name):
        ws = tmp_path / name
        place_trajectory(ws)
        (ws / "procedures").mkdir(parents=True)
        for stem, content in (("disk-usage-long", long), ("disk-usage-short", "1. du(human_readable=True)")):
            record = experience_record(f"Disk usage {stem}", "Size of a directory", content)
            (ws / "procedures" / f"{stem}.json").write_text(json.dumps(record))
        return ws

    turn = '{"role": "assistant", "tool_calls": [{"function": {"name": "du", "arguments": "{}"}}]}\n'
    original = write(tmp_path, "run.jsonl", turn)
    bound = {"procedure_memory": {"default": {"extraction": {"grow_limit": 60}}}}
    async with make_app(workspace=workspace("ws"), scripts=[], components=bound) as app:
        listed = await listing(app, original)
        tokens = memory_of(app).workspace.tokens
        size = sum(tokens.count(t) for t in ("Disk usage disk-usage-long", "Size of a directory", long))
    assert size > 60
    heads = {line.split(" ", 2)[1]: line for line in listed.splitlines() if line.startswith("- procedures/")}
    assert f"; {size} tokens, over 60: a revision shortens it): Disk usage" in heads["procedures/disk-usage-long.json"]
    assert "tokens, over" not in heads["procedures/disk-usage-short.json"]
    unbounded = {"procedure_memory": {"default": {"extraction": {"grow_limit": 0}}}}
    async with make_app(workspace=workspace("ws0"), scripts=[], components=unbounded) as app:
        listed = await listing(app, original)
    assert "procedures/disk-usage-long.json" in listed and "tokens, over" not in listed

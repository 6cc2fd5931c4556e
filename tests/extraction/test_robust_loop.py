"""The agent loop absorbs what real models do: misspelt filenames, the file's own `when-to-use` key, summaries that
are not summaries, and identical calls repeated in a loop. Real Application, real jobs; the agent is scripted."""

import json

import pytest
from reme_procedure_memory.extraction.summary import NO_SUMMARY_YET, summary_problem
from reme_procedure_memory.schema import NAME_EXAMPLE, canonical_name, check_name

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers import summary
from helpers.corpus import JSONL, TWO_SEGMENTS, long_trajectory, two_segment_original, write


async def done(tools, prompt, kwargs):
    """The last segment's reply: no rolling summary is asked for there."""
    return "Nothing more."


FIELDS = {
    "description": "Rebuild search after a configuration change",
    "when_to_use": "After changing search configuration when results appear stale",
    "content": "Rebuild the affected indexes, then verify a known query before resuming.",
}


async def create(app, run, name, key="op-1", **overrides):
    return await call_tool(app, run, "procedure_create", filename=name, operation_key=key, **{**FIELDS, **overrides})


def listing(app):
    return sorted(p.name for p in (memory_of(app).workspace_path / "procedures").iterdir())


# -- filenames ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, canonical",
    [
        ("rebuild-index.json", "rebuild-index.json"),
        ("Rebuild_Index.json", "rebuild-index.json"),
        ("rebuild_index_after_change", "rebuild-index-after-change.json"),
        ("Rebuild Index  after change.JSON", "rebuild-index-after-change.json"),
        ("  rebuild__index - v2 ", "rebuild-index-v2.json"),
        ("_rebuild-index_.json", "rebuild-index.json"),
        ("RUN42", "run42.json"),
    ],
)
def test_canonical_name_fixes_spelling_only(raw, canonical):
    assert canonical_name(raw) == canonical and check_name(canonical) is None


@pytest.mark.parametrize(
    "raw",
    [
        "v1.2 notes.json",
        "café-notes",
        "notes.md",
        "notes.jsonl",
        "a/b.json",
        "",
        "  ",
        ".json",
        "___",
        "x" * 130,
        "line\nbreak",
        "tab\tname",
        " name\n",
    ],
)
def test_names_without_an_unambiguous_spelling_have_none(raw):
    assert canonical_name(raw) is None


async def test_create_uses_the_canonical_filename_and_says_which(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, ans = await create(app, run, "Rebuild_Search after change")
        assert ok and ans["status"] == "created"
        assert ans["path"] == "procedures/rebuild-search-after-change.json"
        assert ans["filename_used"] == "rebuild-search-after-change.json"
        assert ans["filename_given"] == "Rebuild_Search after change"
        ok, ans = await create(app, run, "procedures/already-fine.json", key="op-2")
        assert ok and ans["path"] == "procedures/already-fine.json" and "filename_used" not in ans
        assert listing(app) == ["already-fine.json", "rebuild-search-after-change.json"]


async def test_already_exists_applies_to_the_canonical_name(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        assert (await create(app, run, "rebuild-search.json"))[0]
        before = (memory_of(app).workspace_path / "procedures/rebuild-search.json").read_bytes()
        ok, ans = await create(app, run, "REBUILD_SEARCH", key="op-2", content="Something else.")
        assert not ok and ans["error"]["code"] == "already_exists"
        assert ans["path"] == "procedures/rebuild-search.json" and ans["filename_used"] == "rebuild-search.json"
        assert "'REBUILD_SEARCH' is used as rebuild-search.json" in ans["error"]["message"]
        assert (memory_of(app).workspace_path / "procedures/rebuild-search.json").read_bytes() == before


@pytest.mark.parametrize("raw", ["v1.2 notes.json", "café-notes", "notes.md", "../escape.json", "   "])
async def test_a_filename_without_a_canonical_spelling_is_rejected_with_an_example(make_app, raw):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, ans = await create(app, run, raw)
        assert not ok and ans["error"]["code"] == "invalid_argument"
        assert f"e.g. {NAME_EXAMPLE}" in ans["error"]["message"] and repr(raw) in ans["error"]["message"]
        assert listing(app) == [] and memory_of(app).workspace.journal.records("req-1") == []


async def test_a_retry_in_either_spelling_is_the_same_operation(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        source = add_trajectory(app)
        ok, first = await create(app, memory.grants.begin_attempt("req-1", [source]), "Rebuild_Search")
        assert ok
        for spelling in ("Rebuild_Search", "rebuild-search.json"):  # a resumed segment retries it
            ok, again = await create(app, memory.grants.begin_attempt("req-1", [source]), spelling)
            assert ok and again["replayed"] and again["version"] == first["version"], spelling
        assert listing(app) == ["rebuild-search.json"] and len(memory.workspace.journal.records("req-1")) == 1


# -- the `when-to-use` alias --------------------------------------------------------------------------------------


async def test_when_to_use_alias_is_accepted_by_create_and_update(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        fields = {k: v for k, v in FIELDS.items() if k != "when_to_use"}
        ok, created = await call_tool(
            app,
            run,
            "procedure_create",
            filename="a.json",
            operation_key="k1",
            **fields,
            **{"when-to-use": "When the file's key is what the model read"},
        )
        assert ok, created
        ok, updated = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            operation_key="k2",
            expected_version=created["version"],
            **{"when-to-use": "Revised trigger"},
        )
        assert ok and updated["status"] == "updated"
        ok, same = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            operation_key="k3",
            expected_version=updated["version"],
            when_to_use="Same text",
            **{"when-to-use": "Same text"},
        )
        assert ok, same
        data = json.loads((memory_of(app).workspace_path / "procedures/a.json").read_text())
        assert sorted(data) == ["content", "description", "sources", "when-to-use"]
        assert data["when-to-use"] == "Same text"


async def test_when_to_use_and_a_different_alias_are_ambiguous(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, ans = await create(app, run, "a.json", **{"when-to-use": "another trigger"})
        assert not ok and ans["error"]["code"] == "invalid_argument" and "when-to-use" in ans["error"]["message"]
        assert listing(app) == []


# -- summaries that are not summaries -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, previous, segment, fragment",
    [
        ("no tags at all", "", "text", "no <summary>"),
        ("<summary>The user listed tmp. The user listed tmp. The user", "", "text", "cut off before </summary>"),
        ("Listed.</summary> and <summary>The user", "", "text", "cut off before </summary>"),
        ("<summary>  </summary>", "", "text", "empty"),
        (f"<summary>{NO_SUMMARY_YET}</summary>", "", "text", "placeholder"),
        ("<summary>None yet: this is the first segment.</summary>", "", "text", "placeholder"),
        ("<summary>Rebuilt the index.</summary>", "Rebuilt  the index", "more text", "unchanged"),
    ],
)
def test_summary_problems(reply, previous, segment, fragment):
    from reme_procedure_memory.extraction.summary import parse_summary

    problem = summary_problem(reply, parse_summary(reply), previous, segment)
    assert problem is not None and fragment in problem


def test_an_unchanged_summary_is_fine_when_the_segment_has_no_content():
    reply = "<summary>Rebuilt the index.</summary>"
    assert summary_problem(reply, "Rebuilt the index.", "Rebuilt the index.", " \n\t") is None
    assert summary_problem(reply, "Rebuilt the index.", "", "any text") is None  # no earlier summary: new


async def test_a_copied_placeholder_is_repaired_with_the_segment_in_view(make_app, tmp_path):
    original = two_segment_original(tmp_path)

    async def copies_placeholder(tools, prompt, kwargs):
        assert NO_SUMMARY_YET in prompt
        return f"<summary>\n{NO_SUMMARY_YET}\n</summary>"

    async def repaired(tools, prompt, kwargs):
        assert kwargs["job_tools"] == [] and "placeholder" in prompt
        assert "rebuilt 1200 documents" in prompt  # the segment itself: the summary is about it
        assert "<reply>" not in prompt  # a copied placeholder is not quoted back (it would only be copied again)
        return summary("Rebuilt a stale docs index after a config change.")

    async with make_app(scripts=[copies_placeholder, repaired, done], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, original, request_id="p1")
        assert ok and ans["status"] == "complete", ans
        assert (
            memory_of(app).workspace.checkpoints.get("p1").summary
            == "Rebuilt a stale docs index after a config change."
        )
        first, repair, _ = app.agent.replies
        assert repair["prompt"].startswith(first["prompt"].split("</segment>")[0])  # same prefix as the run


@pytest.mark.parametrize(
    "reply, in_repair",
    [
        # a reply without tags may be the summary: it is quoted to the repair
        ("The user rebuilt the docs index.", "<reply>\nThe user rebuilt the docs index.\n</reply>"),
        ("Done.<summary></summary>", "the summary between <summary> and </summary> is empty"),
    ],
)
async def test_an_untagged_or_empty_summary_is_repaired(make_app, tmp_path, reply, in_repair):
    original = two_segment_original(tmp_path)

    async def first(tools, prompt, kwargs):
        return reply

    async def repaired(tools, prompt, kwargs):
        assert in_repair in prompt
        return summary("Rebuilt the docs index.")

    async with make_app(scripts=[first, repaired, done], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, original, request_id="e1")
        assert ok and memory_of(app).workspace.checkpoints.get("e1").summary == "Rebuilt the docs index."


async def test_a_cut_off_repair_is_followed_by_a_repair_that_says_so(make_app, tmp_path):
    # A deterministic model answers the same input the same way: the second repair must not repeat the first.
    original = two_segment_original(tmp_path)

    async def untagged(tools, prompt, kwargs):
        return ""

    async def cut_off(tools, prompt, kwargs):
        assert "no <summary>...</summary> section" in prompt
        return "<summary>The user rebuilt the index. The user rebuilt the index. The user rebuilt"

    async def repaired(tools, prompt, kwargs):
        assert "cut off before </summary>" in prompt and "<summary>The user rebuilt" not in prompt
        return summary("Rebuilt the docs index.")

    async with make_app(scripts=[untagged, cut_off, repaired, done], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, original, request_id="c1")
        assert ok and memory_of(app).workspace.checkpoints.get("c1").summary == "Rebuilt the docs index."
        _, first_repair, second_repair, _ = app.agent.replies
        assert first_repair["prompt"] != second_repair["prompt"]
        assert "rebuilt 1200 documents" in second_repair["prompt"]  # written from the segment, shown again


async def test_a_too_long_summary_is_quoted_to_the_repair_without_the_segment(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    components = {"procedure_memory": {"default": {"token_limits": {"summary": 10, "segment": 200}}}}
    too_long = " ".join(["rebuilt"] * 12)  # ceiling floor(10 * 1.1) = 11

    async def long_summary(tools, prompt, kwargs):
        return summary(too_long)

    async def shortened(tools, prompt, kwargs):
        assert f"<summary>{too_long}</summary>" in prompt and "12 tokens; the limit is 10" in prompt
        assert "rebuilt 1200 documents" not in prompt  # shortening needs the summary, not the segment again
        return summary("Rebuilt the docs index.")

    async with make_app(scripts=[long_summary, shortened, done], components=components) as app:
        ok, ans = await import_file(app, original, request_id="l1")
        assert ok and memory_of(app).workspace.checkpoints.get("l1").summary == "Rebuilt the docs index."


async def test_an_unchanged_summary_is_repaired_then_stops_resumably(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", long_trajectory(20))
    components = {
        "procedure_memory": {
            "default": {"token_limits": {"segment": 120}, "extraction": {"summary_repair_attempts": 1}}
        }
    }

    def says(text):
        async def script(tools, prompt, kwargs):
            return summary(text)

        return script

    async def unchanged_again(tools, prompt, kwargs):
        assert "previous summary unchanged" in prompt
        return summary("Segment one shows the rollout.")

    scripts = [says("Segment one shows the rollout."), says("Segment one shows the rollout."), unchanged_again]
    async with make_app(scripts=scripts, components=components) as app:
        ok, ans = await import_file(app, original, request_id="u1")
        assert ans["segments"]["total"] > 1
        assert not ok and ans["error"]["code"] == "summary_invalid" and ans["segments"]["done"] == 1
        assert "previous summary unchanged" in ans["error"]["message"] and "request_id=u1" in ans["resume"]
        checkpoint = memory_of(app).workspace.checkpoints.get("u1")
        assert checkpoint.next_segment == 1 and checkpoint.summary == "Segment one shows the rollout."


# -- identical calls in a loop --------------------------------------------------------------------------------------


def answers_of(tools):
    return [(name, ok, answer) for name, _args, ok, answer in tools.log]


async def test_an_identical_call_gets_its_earlier_answer_and_a_nudge(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def loops(tools, prompt, kwargs):
        ok, first = await tools.call("procedure_create", filename="a.json", operation_key="k1", **FIELDS)
        assert ok
        journal = [(r.key, r.status) for r in memory.workspace.journal.records("loop-1")]
        for _ in range(3):
            ok, again = await tools.call("procedure_search", query="stale search", index="when_to_use")
        assert ok and again["repeated_call"] and "create or update" in again["note"] and "<summary>" in again["note"]
        ok, search = tools.log[1][2], tools.log[1][3]
        assert "repeated_call" not in search  # the first one ran
        assert {k: v for k, v in again.items() if k not in ("repeated_call", "note")} == search
        ok, repeated_create = await tools.call("procedure_create", filename="a.json", operation_key="k1", **FIELDS)
        assert ok and repeated_create["repeated_call"] and repeated_create["version"] == first["version"]
        ok, bad = await tools.call("procedure_create", filename="a.b.json", operation_key="k2", **FIELDS)
        ok2, bad_again = await tools.call("procedure_create", filename="a.b.json", operation_key="k2", **FIELDS)
        assert not ok and not ok2 and bad_again["error"] == bad["error"] and bad_again["repeated_call"]
        assert [
            (r.key, r.status) for r in memory.workspace.journal.records("loop-1")
        ] == journal  # nothing journaled again
        return summary("Created a.json.")

    async with make_app(scripts=[loops]) as app:
        memory = memory_of(app)
        ok, ans = await import_file(app, original, request_id="loop-1")
        assert ok and ans["experiences"] == {"created": ["procedures/a.json"], "updated": []}
        assert listing(app) == ["a.json"]


async def test_a_call_repeated_after_a_change_runs_again(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def searches_writes_searches(tools, prompt, kwargs):
        ok, before = await tools.call("procedure_search", query="stale search config")
        assert before["results"] == [] and "procedure_create" in before["note"]  # the agent is told what next
        await tools.call("procedure_create", filename="stale-search.json", operation_key="k1", **FIELDS)
        ok, after = await tools.call("procedure_search", query="stale search config")
        assert "repeated_call" not in after and after["results"][0]["path"] == "procedures/stale-search.json"
        ok, missing = await tools.call("procedure_read", path="procedures/later.json")
        assert missing["error"]["code"] == "not_found"
        await tools.call("procedure_create", filename="later.json", operation_key="k2", **FIELDS)
        ok, found = await tools.call("procedure_read", path="procedures/later.json")
        assert ok and "repeated_call" not in found
        return summary("Two experiences.")

    async with make_app(scripts=[searches_writes_searches]) as app:
        ok, ans = await import_file(app, original)
        assert ok, ans


async def test_a_temporary_failure_is_never_answered_from_memory(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def retries(tools, prompt, kwargs):
        ok, pending = await tools.call(
            "procedure_create", filename="a.json", operation_key="k1", **{**FIELDS, "content": "REJECTED for now"}
        )
        assert pending["status"] == "index_pending"
        model.reject = set()  # the provider recovers
        ok, retried = await tools.call(
            "procedure_create", filename="a.json", operation_key="k1", **{**FIELDS, "content": "REJECTED for now"}
        )
        assert ok and retried["status"] == "created" and "repeated_call" not in retried
        return summary("Created a.json after a retry.")

    async with make_app(scripts=[retries]) as app:
        model = app.context.components["as_embedding"]["procedure"].model
        model.reject = {"REJECTED"}
        ok, ans = await import_file(app, original)
        assert ok and ans["pending_writes"] == []


async def test_service_callers_and_later_segments_never_get_remembered_answers(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", long_trajectory(20))
    components = {"procedure_memory": {"default": {"token_limits": {"segment": 120}}}}
    seen = []

    async def searches(tools, prompt, kwargs):
        ok, found = await tools.call("procedure_search", query="rollout")
        seen.append(found)
        return summary(f"Read {len(seen)} segment(s) of a rollout.")

    async with make_app(scripts=[searches] * 10, components=components) as app:
        ok, ans = await import_file(app, original)
        assert ok and len(seen) > 1 and not any("repeated_call" in found for found in seen)
        for _ in range(2):
            ok, found = await run_job(app, "procedure_search", query="rollout")
            assert ok and found["results"] == [] and "repeated_call" not in found and "note" not in found


# -- the same rules through ReMe's real AgentScope agent (only the chat model is scripted) --------------------------


def sloppy_model(conversation):
    """What small models do: a snake_case filename without .json, the file's `when-to-use` key, a repeated call, an
    argument its tools do not show."""
    from helpers.chat import call, say

    answers = [json.loads(r) for r in conversation.tool_results if r.startswith("{")]  # the plugin's (JSON) answers
    answer = answers[-1] if answers else {}
    steps = [
        lambda: call(
            "procedure_create",
            filename="Rebuild_Search_After_Change",
            **{k: v for k, v in FIELDS.items() if k != "when_to_use"},
            **{"when-to-use": "Results look stale"},
        ),  # AgentScope: when_to_use is required here
        lambda: call("procedure_create", filename="Rebuild_Search_After_Change", **FIELDS),
        lambda: call("procedure_read", path=answer["path"]),
        lambda: call("procedure_read", path="procedures/rebuild-search-after-change.json"),
        lambda: call(
            "procedure_update",
            path=answer["path"],
            expected_version=answer["version"],
            operation_key="s1-2",
            **{"when-to-use": "After a config change, when results look stale"},
        ),  # neither the alias nor an operation_key is in the update the agent is shown
        lambda: call(
            "procedure_update",
            path=answer["path"],
            expected_version=answer["version"],
            when_to_use="After a config change, when results look stale",
        ),
        lambda: say("<summary>Rebuilt a stale search index after a config change.</summary>"),
    ]
    return steps[conversation.step]()


async def test_the_rules_hold_through_the_real_agentscope_agent(make_app, tmp_path):
    from helpers.chat import ChatEndpoint, llm_components, text_of

    original = write(tmp_path, "run.jsonl", JSONL)
    with ChatEndpoint(sloppy_model) as endpoint:
        async with make_app(components=llm_components(endpoint.base_url)) as app:
            ok, ans = await import_file(app, original, request_id="as-1")
            assert endpoint.errors == [] and ok, ans
            assert ans["experiences"] == {"created": ["procedures/rebuild-search-after-change.json"], "updated": []}
            last = endpoint.conversations()[-1]
            results = last.tool_results
            # AgentScope validates arguments against the schema the agent is shown before the plugin sees them:
            # create requires when_to_use (grammar-constrained providers fill only required properties), so the
            # alias alone is answered by the SDK, and so is an update with the alias or an operation_key, which the
            # agent's update does not show (the job itself accepts both: test_when_to_use_alias_is_accepted_...).
            assert "when_to_use" in results[0] and "required" in results[0]
            created = json.loads(results[1])
            assert created["filename_used"] == "rebuild-search-after-change.json"
            read, repeated = json.loads(results[2]), json.loads(results[3])
            assert "repeated_call" not in read and repeated["repeated_call"] and repeated["version"] == read["version"]
            assert "additional" in results[4].lower() and "operation_key" in results[4], results[4]
            assert json.loads(results[5])["status"] == "updated"
            data = json.loads((memory_of(app).workspace_path / created["path"]).read_text())
            assert data["when-to-use"] == "After a config change, when results look stale"
            # no request of the reply carried AgentScope's runtime reminder (the current time, re-sent every turn)
            assert len(last.messages) > 10
            assert not any("<current-time>" in text_of(m) for m in last.messages)


async def test_a_reply_without_the_quiet_kwarg_keeps_agentscopes_reminder(make_app, tmp_path):
    """The control of the check above: the same wrapper, prepared by an import, still builds the agent of any other
    reply with AgentScope's runtime reminder (the time), so the check can fail and other jobs are unchanged."""
    from helpers.chat import ChatEndpoint, llm_components, say, text_of

    def plain(conversation):
        return say("<summary>Nothing reusable.</summary>") if conversation.segment else say("hello")

    original = write(tmp_path, "run.jsonl", JSONL)
    with ChatEndpoint(plain) as endpoint:
        async with make_app(components=llm_components(endpoint.base_url)) as app:
            ok, ans = await import_file(app, original, request_id="as-2")
            assert endpoint.errors == [] and ok, ans
            wrapper = app.context.components["agent_wrapper"]["default"]
            await wrapper.reply("hello", system_prompt="You are terse.")
            asked = [c for c in endpoint.conversations() if not c.segment]
            assert asked and any("<current-time>" in text_of(m) for m in asked[-1].messages)
            extraction = [c for c in endpoint.conversations() if c.segment]
            assert extraction and not any("<current-time>" in text_of(m) for c in extraction for m in c.messages)


async def test_one_system_prompt_for_every_segment_and_the_segment_first(make_app, tmp_path):
    """What a provider's prefix cache needs: system prompt + tools identical across segments, the segment up front."""
    from helpers.corpus import summarises

    original = write(tmp_path, "run.jsonl", long_trajectory(20))
    components = {"procedure_memory": {"default": {"token_limits": {"segment": 120}}}}
    async with make_app(scripts=[summarises()] * 10, components=components) as app:
        ok, ans = await import_file(app, original)
        assert ok and ans["segments"]["total"] > 2
        replies = app.agent.replies
        assert len({r["kwargs"]["system_prompt"] for r in replies}) == 1
        assert len({json.dumps(sorted(r["kwargs"]["job_tools"])) for r in replies}) == 1
        text = original.read_text()
        for n, reply in enumerate(replies):
            assert reply["prompt"].startswith("<segment>\n")
            segment = reply["prompt"][len("<segment>\n") : reply["prompt"].index("\n</segment>")]
            assert segment and segment in text
            assert f"segment {n + 1} of {ans['segments']['total']}" in reply["prompt"].split("</segment>")[1]

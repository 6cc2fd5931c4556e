"""The downstream benchmark harness (``benchmarks/downstream.py``, issue 24) in CI, so that it cannot rot.

Real: BFCL's tasks, its API simulators (execution) and its multi-turn checker (bfcl-eval, installed ``--no-deps``),
the driver's HTTP client talking to OpenAI-compatible chat servers on 127.0.0.1 that the tests start and stop,
ReMe Applications with the plugin and the ``procedure_search`` / ``procedure_reindex`` jobs. The scripted "models"
answer from the conversation they are sent (ground-truth replay, no call at all, or the replay minus one call); the
embedding model is the tests' hashed bag of words, served over HTTP as a provider is.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import downstream  # noqa: E402  (benchmarks/downstream.py)
from helpers import EmbeddingEndpoint, experience_record, place_trajectory, write_word_tokenizer  # noqa: E402

T0, T1, T5 = "multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_5"


@pytest.fixture(scope="module")
def lib():
    return downstream.bfcl()


@pytest.fixture(scope="module")
def tasks(lib):
    return downstream.load_tasks(lib)


@pytest.fixture
def embeddings(monkeypatch):
    """The hashed bag-of-words provider over HTTP, configured as ``EMBEDDING_*`` (what the harness reads)."""
    with EmbeddingEndpoint(64) as endpoint:
        monkeypatch.setenv("EMBEDDING_BACKEND", "openai")
        monkeypatch.setenv("EMBEDDING_MODEL_NAME", "hash")
        monkeypatch.setenv("EMBEDDING_API_KEY", "x")
        monkeypatch.setenv("EMBEDDING_BASE_URL", endpoint.base_url)
        yield endpoint


def run(settings: downstream.RunSettings, workdir: Path, lib) -> dict:
    return asyncio.run(downstream.run(settings, workdir, lib))


def flat(turns):
    return [call for turn in turns for step in turn for call in step]


# -- smoke: the scripted endpoints, BFCL's execution and checker ----------------------------------------------------


@pytest.mark.slow
def test_smoke_ground_truth_replay_passes_every_task_and_the_silent_endpoint_none():
    out = {mode: o["summary"] for mode, o in downstream.smoke([T0, T1]).items()}
    assert out["ground_truth"]["tasks"] == 2 and out["ground_truth"]["passed"] == 2
    assert out["silent"]["tasks"] == 2 and out["silent"]["passed"] == 0
    assert out["silent"]["error_types"] == {"multi_turn:empty_turn_model_response": 2}
    # both tasks have 4 turns: a request with the turn's calls and one that ends it (ground truth), or one (silent)
    assert out["ground_truth"]["requests_per_task"] == 8
    assert out["silent"]["requests_per_task"] == 4


@pytest.mark.slow
def test_the_calls_executed_are_the_endpoints_and_bfcl_fails_a_missing_call(lib, tasks, tmp_path):
    ids = [T0, T1]
    outcomes = {}
    for mode in ("ground_truth", "drop_last"):
        with downstream.ScriptedEndpoint(mode, [tasks[t] for t in ids], lib) as endpoint:
            settings = downstream.RunSettings(ids, ["none"], {"none": endpoint.base_url})
            outcomes[mode] = run(settings, tmp_path / mode, lib)["results"]
    for r in outcomes["ground_truth"]:
        assert r["passed"]
        # BFCL executed the endpoint's tool calls: as many as the ground truth has (positionals become keywords)
        assert len(flat(r["decoded"])) == len(flat([tasks[r["id"]].ground_truth])) > 0
        assert r["bfcl_result"][0][0] and isinstance(r["bfcl_result"][0][-1], str)  # calls, then the closing text
    for r in outcomes["drop_last"]:
        assert not r["passed"]
        if len(tasks[r["id"]].ground_truth[-1]) == 1:  # the last turn left without any call
            assert r["error_type"] == "multi_turn:empty_turn_model_response"
        else:
            assert r["error_type"] in ("multi_turn:instance_state_mismatch", "multi_turn:execution_response_mismatch")
        assert len(flat(r["decoded"])) == len(flat([tasks[r["id"]].ground_truth])) - 1


def test_a_made_replay_is_the_shared_replay_and_one_of_a_task_without_one_passes(lib, tmp_path):
    """``replays`` (``build --train`` beyond 0..39): task 0's made replay has the shared ground-truth replay's messages
    (roles, user and assistant texts, each call alone with the simulated API's exact answer; only the call ids and the
    arguments' spelling, JSON instead of Python, differ); task 50 (vehicle API, no shared replay) passes BFCL's
    checker (``replays`` refuses one that does not) and cites its API class."""
    made = downstream.replays([T0, "multi_turn_base_50"], tmp_path, lib)
    assert [p.name for p in made] == [f"{T0}.jsonl", "multi_turn_base_50.jsonl"]
    shared = REPO.parent / "shared" / "data" / "trajectories" / "base" / f"{T0}.jsonl"

    def shape(path: Path) -> list:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return [
            (m["role"], m.get("content"), m.get("name"), [c["function"]["name"] for c in m.get("tool_calls") or []])
            for m in rows
        ]

    if shared.is_file():  # the shared data is beside the checkout on the team's machines, not in CI's clone
        assert shape(made[0]) == shape(shared)
    rows = shape(made[0])
    assert rows[0][1] == "You are an assistant with tools from: TwitterAPI, GorillaFileSystem."
    assert all(len(calls) <= 1 for _, _, _, calls in rows)  # one call per step
    assert rows[-1] == ("assistant", downstream.REPLAY_REPLY, None, [])
    vehicle = shape(made[1])
    assert vehicle[0][1] == "You are an assistant with tools from: VehicleControlAPI."
    assert [calls for _, _, _, calls in vehicle if calls] == [["lockDoors"], ["setHeadlights"]] + [
        [downstream.tool_call_of(c, [])[0]]
        for turn in downstream.load_tasks(lib)["multi_turn_base_50"].ground_truth[1:]
        for c in turn
    ]


def test_tool_call_of_names_positional_arguments_from_the_function_docs(tasks):
    functions = tasks[T0].entry["function"]
    assert downstream.tool_call_of("sort('final_report.pdf')", functions) == ("sort", {"file_name": "final_report.pdf"})
    assert downstream.tool_call_of("mv(source='a', destination='b')", functions) == (
        "mv",
        {"source": "a", "destination": "b"},
    )


# -- the plugin arm: the real search job, the block in the model's messages, a frozen workspace ---------------------


def make_workspace(root: Path, tokenizer: Path, lib, experiences: dict[str, dict]) -> Path:
    """A tiny indexed workspace: hand-placed experiences citing a real trajectory copy, then ``procedure_reindex``."""
    from extraction import application

    ws = root / "ws"
    place_trajectory(ws)
    (ws / "procedures").mkdir(parents=True)
    for name, record in experiences.items():
        (ws / "procedures" / name).write_text(json.dumps(record))

    async def index():
        app = application(ws, tokenizer, downstream.app_settings(64), with_model=False)
        await app.start()
        try:
            answer = json.loads((await app.run_job("procedure_reindex")).answer)
            assert answer["indexed"] == len(experiences) and not answer["invalid_files"], answer
        finally:
            await app.close()

    asyncio.run(index())
    return ws


EXPERIENCES = {
    "move-into-new-directory.json": experience_record(
        "Move a file into a new directory",
        "When a file must be moved into a directory that may not exist yet",
        "1. cd into the parent directory. 2. mkdir the directory. 3. mv the file into it.\nRules:\n"
        '- "Into a new folder X" means mkdir X before mv (2 trajectories).',
    ),
    "search-file-with-grep.json": experience_record(
        "Search a file for a phrase with grep",
        "When sections of a file pertaining to a phrase must be found",
        "1. cd to the file's directory. 2. grep the file name with the pattern.",
    ),
    "post-a-tweet.json": experience_record(
        "Post a tweet about a file", "When a user wants a tweet posted", "authenticate_twitter, then post_tweet."
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("k,fields,inject", [(2, "all", "every"), (1, "when-to-use,content", "first")])
def test_plugin_arm_block_reaches_the_model_and_the_workspace_is_unchanged(
    lib, tasks, tmp_path, embeddings, k, fields, inject
):
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    ws = make_workspace(tmp_path, tokenizer, lib, EXPERIENCES)
    before = downstream.digest(ws)
    ids = [T0]
    with (
        downstream.ScriptedEndpoint("ground_truth", [tasks[T0]], lib) as plain,
        downstream.ScriptedEndpoint("ground_truth", [tasks[T0]], lib) as with_memory,
    ):
        settings = downstream.RunSettings(
            ids,
            ["none", "plugin"],
            {"none": plain.base_url, "plugin": with_memory.base_url},
            workspace=ws,
            k=k,
            fields=downstream.parse_fields(fields),
            inject=inject,
            tokenizer=tokenizer,
            dimensions=64,
        )
        result = run(settings, tmp_path / "work", lib)
    assert downstream.digest(ws) == before
    assert result["frozen"]["plugin"]["unchanged"] is True
    assert result["frozen"]["plugin"]["memory_before"] == result["frozen"]["plugin"]["memory_after"]
    assert result["memories"]["plugin"]["valid_experiences"] == 3
    by_arm = {r["arm"]: r for r in result["results"]}
    assert by_arm["none"]["passed"] and by_arm["plugin"]["passed"]  # the replay ignores the block
    turns = tasks[T0].entry["question"]
    injected = by_arm["plugin"]["memory"]
    assert [m["turn"] for m in injected] == ([0, 1, 2, 3] if inject == "every" else [0])
    assert all(len(m["paths"]) == k and m["tokens"] > 0 and m["vector_search"] for m in injected)
    # the first turn: "Move 'final_report.pdf' ... to 'temp' directory ... create the directory"
    assert injected[0]["paths"][0] == "procedures/move-into-new-directory.json"

    def users(endpoint):
        return [m["content"] for m in endpoint.requests[-1]["messages"] if m["role"] == "user"]

    plain_users, memory_users = users(plain), users(with_memory)
    assert plain_users == [t[0]["content"] for t in turns]  # no block without memory
    for n, (message, original) in enumerate(zip(memory_users, plain_users)):
        assert message.endswith(original)
        if inject == "every" or n == 0:
            block = message[: -len(original)]
            assert block.startswith(downstream.BLOCK_HEAD) and downstream.BLOCK_TAIL in block
            top = EXPERIENCES[injected[n]["paths"][0].split("/")[1]]
            assert top["when-to-use"] in block and top["content"] in block
            assert (top["description"] in block) == (fields == "all")
            assert block.count("When to use: ") == k
        else:
            assert message == original
    # the same tools in both arms; the memory arm's prompts are longer by its blocks
    assert plain.requests[0]["tools"] == with_memory.requests[0]["tools"]
    assert by_arm["plugin"]["prompt_tokens"] > by_arm["none"]["prompt_tokens"]
    summary = result["summary"]
    assert summary["arms"]["plugin"]["injected_turns"] == len(injected)
    assert summary["paired"]["plugin"] == {
        "both": 1,
        "only_with": 0,
        "only_without": 0,
        "neither": 0,
        "tasks": 1,
        "p": 1.0,
    }


def test_library_workspace_cites_a_real_copy_so_its_experiences_are_valid_and_found(lib, tasks, tmp_path, embeddings):
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    library = tmp_path / "library.jsonl"
    rows = [
        {
            "when_to_use": f"When {topic} is asked for",
            "content": f"Use {tool} first. Then check the result.",
            "metadata": {"task_query": query},
        }
        for topic, tool, query in (
            ("a file listing", "ls", "List the files please, all of them now"),
            ("a tweet", "post_tweet", tasks[T5].messages[1]),
            ("a directory change", "cd", "Go into the documents folder right away"),
        )
    ]
    library.write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = asyncio.run(downstream.library_workspace(library, tmp_path / "lib-ws", tokenizer, 64))
    assert info == {"experiences": 3, "indexed": 3}
    assert (tmp_path / "lib-ws/session/trajectories" / library.name).read_bytes() == library.read_bytes()
    # the run refuses the task whose (second-turn) message is a released task query, and runs another one
    with downstream.ScriptedEndpoint("ground_truth", [tasks[T0], tasks[T5]], lib) as replay:
        settings = downstream.RunSettings(
            [T5], ["library"], {"library": replay.base_url}, library=library, tokenizer=tokenizer, dimensions=64
        )
        with pytest.raises(SystemExit, match=f"library: {T5}"):
            run(settings, tmp_path / "w1", lib)
        settings.task_ids = [T0]
        result = run(settings, tmp_path / "w2", lib)
    assert result["memories"]["library"]["valid_experiences"] == 3
    assert result["memories"]["library"]["seen_tasks"] == [T5]
    assert result["results"][0]["passed"] and result["frozen"]["library"]["unchanged"]
    assert all(len(m["paths"]) == 3 for m in result["results"][0]["memory"])


# -- honesty rules --------------------------------------------------------------------------------------------------


def test_run_refuses_test_tasks_the_memory_has_seen(lib, tasks, tmp_path, embeddings):
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    ws = make_workspace(tmp_path, tokenizer, lib, EXPERIENCES)
    # a rollout of task 1 imported as a trajectory (the JSONL form the build step writes)
    conversation = [m for turn in tasks[T1].entry["question"] for m in turn]
    rollout = downstream.rollout_jsonl(tasks[T1], conversation)
    place_trajectory(ws, "rollout_multi_turn_base_1.jsonl", rollout)
    assert downstream.seen_task_ids(downstream.source_texts(ws), tasks) == {T1}
    settings = downstream.RunSettings(
        [T0, T1],
        ["none", "plugin"],
        {"none": "http://127.0.0.1:9/v1", "plugin": "http://127.0.0.1:9/v1"},
        workspace=ws,
        tokenizer=tokenizer,
        dimensions=64,
    )
    with pytest.raises(SystemExit, match=f"refused: .*plugin: {T1}"):
        run(settings, tmp_path / "work", lib)


def test_seen_tasks_match_json_escaped_messages_and_ignore_short_ones(tasks):
    message = tasks[T5].messages[0]
    assert downstream.seen_task_ids([json.dumps({"content": message})], tasks) >= {T5}
    assert downstream.seen_task_ids(["nothing of the sort"], tasks) == set()
    short = next(m for t in tasks.values() for m in t.messages if len(m) < downstream.MIN_MESSAGE_CHARS)
    assert downstream.seen_task_ids([short], tasks) == set()


# -- pure parts -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "only_with,only_without,p",
    [
        (0, 0, 1.0),
        (1, 0, 1.0),
        (3, 3, 1.0),
        (0, 5, 0.0625),
        (6, 0, 0.03125),
        (2, 8, 0.109375),
        (1, 9, 0.021484375),
        (10, 0, 0.001953125),
        (7, 3, 0.34375),
    ],
)
def test_mcnemar_exact_p_known_values(only_with, only_without, p):
    # two-sided exact McNemar = binomial test of the discordant pairs at 1/2 (e.g. R: binom.test(2, 10)$p.value)
    assert downstream.mcnemar_p(only_with, only_without) == pytest.approx(p, abs=1e-12)


def test_paired_table_counts_the_four_cells_over_common_tasks():
    with_memory = {"a": True, "b": True, "c": False, "d": False, "e": True}
    without = {"a": True, "b": False, "c": True, "d": False}
    assert downstream.paired_table(with_memory, without) == {
        "both": 1,
        "only_with": 1,
        "only_without": 1,
        "neither": 1,
        "tasks": 4,
        "p": 1.0,
    }


def test_memory_block_fields_order_and_marking():
    experiences = [
        {"description": "D1", "when-to-use": "W1", "content": "C1"},
        {"description": "D2", "when-to-use": "W2", "content": "C2"},
    ]
    block = downstream.memory_block(experiences, downstream.FIELD_NAMES)
    assert block == (
        f"{downstream.BLOCK_HEAD}\n[1] Description: D1\nWhen to use: W1\nContent: C1\n\n"
        f"[2] Description: D2\nWhen to use: W2\nContent: C2\n{downstream.BLOCK_TAIL}"
    )
    lean = downstream.memory_block(experiences[:1], downstream.parse_fields("when_to_use,content"))
    assert "Description" not in lean and "W1" in lean and "C1" in lean
    assert downstream.memory_block([], downstream.FIELD_NAMES) == ""
    assert downstream.with_block("", "hi") == "hi" and downstream.with_block(block, "hi").endswith("\n\nhi")
    with pytest.raises(ValueError):
        downstream.parse_fields("when-to-use,steps")
    with pytest.raises(ValueError):  # the rules are part of the content
        downstream.parse_fields("content,rules")


def test_memory_block_of_rules_results_leaves_an_empty_rules_line_out():
    ruled = {"path": "p", "description": "D", "when-to-use": "W", "rules": "- A (2)\n- B"}  # a detail=rules result
    bare = {"path": "q", "description": "E", "when-to-use": "V", "rules": ""}
    fields = downstream.parse_fields("description,rules")
    assert fields == ("description", "rules")
    block = downstream.memory_block([ruled, bare], fields)
    assert (
        block
        == f"{downstream.BLOCK_HEAD}\n[1] Description: D\nRules: - A (2)\n- B\n\n[2] Description: E\n{downstream.BLOCK_TAIL}"
    )


def test_parse_ids_ranges_and_names():
    assert downstream.parse_ids("3-5,multi_turn_base_9,4") == [
        "multi_turn_base_3",
        "multi_turn_base_4",
        "multi_turn_base_5",
        "multi_turn_base_9",
    ]
    with pytest.raises(ValueError):
        downstream.parse_ids("multi_turn_long_context_1")


def test_rollout_trajectory_names_each_tool_result_and_the_api_classes(tasks):
    conversation = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "[]", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Done."},
    ]
    lines = [json.loads(line) for line in downstream.rollout_jsonl(tasks[T0], conversation).decode().splitlines()]
    assert lines[0] == {
        "role": "system",
        "content": "You are an assistant with tools from: TwitterAPI, GorillaFileSystem.",
    }
    assert lines[3] == {"role": "tool", "content": "[]", "tool_call_id": "c1", "name": "ls"}
    assert lines[1:3] + lines[4:] == conversation[:2] + conversation[3:]


def test_the_delivery_passes_the_floor_the_tasks_tools_and_the_budget_to_procedure_search(
    lib, tasks, tmp_path, embeddings
):
    """issue 31: ``run``'s delivery flags reach the real procedure_search of the memory arm."""
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    ws = make_workspace(tmp_path, tokenizer, lib, EXPERIENCES)
    query = tasks[T0].messages[0]
    functions = [f["name"] for f in tasks[T0].entry["function"] if f["name"] in ("mkdir", "mv", "touch")]
    deliveries = {
        "before": downstream.Delivery(),
        "tools": downstream.Delivery(task_tools=True),
        "budget": downstream.Delivery(max_tokens=1),
        "floor": downstream.Delivery(min_relevance=1.0),
    }

    rules_fields = downstream.parse_fields("description,when-to-use,rules")

    async def blocks() -> dict:
        out = {}
        ruled = {"rules": downstream.Delivery(), "evident": downstream.Delivery(min_evidence=3)}
        for label, delivery in {**deliveries, **ruled}.items():
            fields = rules_fields if label in ruled else downstream.FIELD_NAMES
            async with downstream.Memory(
                label, ws, tmp_path / label, "when_to_use_content", 3, fields, tokenizer, 64, delivery
            ) as memory:
                out[label] = await memory.block(query, functions)
        return out

    found = asyncio.run(blocks())
    before = found["before"][1]["paths"]
    assert len(before) == 3 and all(0 <= r <= 1 for r in found["before"][1]["relevance"])
    naming = [
        p
        for p in before
        if any(re.search(rf"(?<![\w]){f}(?![\w])", EXPERIENCES[p.split("/")[1]]["content"]) for f in functions)
    ]
    assert len(functions) == 3 and len(naming) == 1 and found["tools"][1]["paths"] == naming
    assert found["budget"][0] == "" and found["budget"][1]["budget_left_out"] == 3
    assert found["floor"][1]["paths"] == [] and found["floor"][1]["tokens"] == 0
    # --fields ...,rules: the plugin's detail=rules answer, the same experiences, their rules and none of their steps
    assert found["rules"][1]["paths"] == before and found["rules"][1]["relevance"] == found["before"][1]["relevance"]
    assert 'Rules: - "Into a new folder X" means mkdir X before mv (2 trajectories).' in found["rules"][0]
    assert "1. cd into" not in found["rules"][0] and "1. cd into" in found["before"][0]
    assert found["rules"][0].count("When to use: ") == 3 and found["rules"][1]["tokens"] < found["before"][1]["tokens"]
    # --min-evidence 3: the plugin leaves out the rule two trajectories showed, and counts the block without it
    assert found["evident"][1]["paths"] == before and "(2 trajectories)" not in found["evident"][0]
    assert found["evident"][1]["tokens"] < found["rules"][1]["tokens"]
    assert downstream.Delivery(None, True, 500).arguments(["cd"]) == {
        "tools": ["cd"],
        "max_tokens": 500,
        "min_evidence": 0,
    }
    assert downstream.Delivery(0.3, True, None, min_evidence=3).arguments([]) == {
        "min_relevance": 0.3,
        "min_evidence": 3,
    }


def test_dropped_repeats_leave_out_of_a_block_what_an_earlier_block_of_the_task_showed(
    lib, tasks, tmp_path, embeddings
):
    """``--repeats drop``: the same searches as with repeats shown, each answer without the experiences an earlier
    turn's block of the same task already held (listed as ``repeated``); the next task starts with nothing held."""
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    ws = make_workspace(tmp_path, tokenizer, lib, EXPERIENCES)
    logs = {}
    for label, delivery in {"show": downstream.Delivery(), "drop": downstream.Delivery(repeats=False)}.items():
        with downstream.ScriptedEndpoint("ground_truth", [tasks[T0], tasks[T1]], lib) as endpoint:
            settings = downstream.RunSettings(
                [T0, T1],
                ["plugin"],
                {"plugin": endpoint.base_url},
                workspace=ws,
                k=2,
                tokenizer=tokenizer,
                dimensions=64,
                delivery=delivery,
            )
            result = run(settings, tmp_path / label, lib)
        logs[label] = {r["id"]: r["memory"] for r in result["results"]}
    for task in (T0, T1):
        shown, dropped = logs["show"][task], logs["drop"][task]
        assert all(turn["repeated"] == [] for turn in shown)
        held: set[str] = set()
        for with_repeats, without in zip(shown, dropped, strict=True):
            assert without["repeated"] == [p for p in with_repeats["paths"] if p in held]
            assert without["paths"] == [p for p in with_repeats["paths"] if p not in held]
            assert without["tokens"] <= with_repeats["tokens"]
            held.update(without["paths"])
        assert any(turn["repeated"] for turn in dropped)  # the check above compared something left out
        assert dropped[0]["paths"] == shown[0]["paths"]  # a task starts with nothing held


def test_embedded_clears_every_embedding_setting_so_the_plugins_own_model_embeds(monkeypatch):
    from types import SimpleNamespace

    for name in ("EMBEDDING_BACKEND", "EMBEDDING_MODEL_NAME", "EMBEDDING_API_KEY", "EMBEDDING_BASE_URL"):
        monkeypatch.setenv(name, "http://127.0.0.1:9/v1" if name.endswith("URL") else "x")
    assert downstream.hosted_embeddings(SimpleNamespace(embedded=False))  # a configured provider: no hash server
    assert downstream.hosted_embeddings(SimpleNamespace(embedded=True))
    assert not any(name.startswith("EMBEDDING_") for name in __import__("os").environ)
    assert not downstream.hosted_embeddings(SimpleNamespace(embedded=False))  # nothing set: the hash server


def test_a_runs_settings_with_its_delivery_are_shown_as_json(tmp_path, monkeypatch):
    """The report and ``--json`` of a run with a delivery (a dataclass) and paths: plain JSON values (a run of 60
    tasks once ended in a TypeError here, after its last task)."""
    captured = {}
    monkeypatch.setattr(downstream, "command_run", lambda args: captured.setdefault("args", args))
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    downstream.main(
        [
            "run",
            "--tasks",
            "40-41",
            "--arms",
            "none,plugin",
            "--workspace",
            str(tmp_path),
            "--min-relevance",
            "0.3",
            "--tools",
            "task",
            "--memory-tokens",
            "500",
        ]
    )
    shown = downstream.shown_settings(downstream.settings_from(captured["args"], ["none", "plugin"]))
    assert json.loads(json.dumps(shown))["delivery"] == {
        "min_relevance": 0.3,
        "task_tools": True,
        "max_tokens": 500,
        "repeats": False,  # the default: an experience an earlier block of the task showed is not shown again
        "min_evidence": 0,  # the default: every rule of a result (procedure_search min_evidence)
    }
    assert "task_ids" not in shown and "api_key" not in shown
    assert "settings: {" in downstream.report({"arms": {}, "paired": {}}, shown)


def test_build_makes_the_missing_replay_and_grows_the_memory_from_a_start_workspace(tmp_path, embeddings, monkeypatch):
    """``build --train 50 --start-from WS`` end to end with a scripted chat model (helpers.chat): the replay of task 50
    is made (no shared one exists) and imported into a copy of WS, whose experience stays beside the new one; WS is
    not changed; the manifest names the made replay and the start."""
    from helpers import place_trajectory
    from helpers.chat import EXPERIENCE, ChatEndpoint, search_create_summarize

    start = tmp_path / "start"
    place_trajectory(start)
    (start / "procedures").mkdir(parents=True)
    (start / "procedures" / "drain-node.json").write_text(
        json.dumps(experience_record("Drain a node", "Before a node reboot", "cordon, drain, reboot"))
    )
    before = {p.relative_to(start): p.read_bytes() for p in start.rglob("*") if p.is_file()}
    shared = tmp_path / "shared"
    (shared / "data" / "trajectories" / "base").mkdir(parents=True)
    (shared / "tools").mkdir()
    out = tmp_path / "mem"
    with ChatEndpoint(search_create_summarize) as chat:
        for name, value in (("BACKEND", "openai"), ("MODEL_NAME", "fake-chat"), ("API_KEY", "x")):
            monkeypatch.setenv(f"LLM_{name}", value)
        monkeypatch.setenv("LLM_BASE_URL", chat.base_url)
        tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")  # no ../shared beside a CI clone
        monkeypatch.setenv("PROCEDURE_TOKENIZER_SOURCE", str(tokenizer))
        downstream.main(
            ["build", "--shared", str(shared), "--out", str(out), "--train", "50", "--start-from", str(start)]
        )
        assert chat.errors == [] and "multi_turn_base_50" in json.dumps(chat.requests[0])
    manifest = json.loads((out / "build.json").read_text())
    assert manifest["generated_replays"] == ["multi_turn_base_50"] and manifest["start_from"] == str(start)
    assert [i["status"] for i in manifest["imports"]] == ["complete"]
    assert (out / "replays" / "multi_turn_base_50.jsonl").is_file()
    assert sorted(p.name for p in (out / "ws" / "procedures").iterdir()) == sorted(
        ["drain-node.json", EXPERIENCE["filename"]]
    )
    assert (out / "ws" / "session" / "trajectories" / "multi_turn_base_50.jsonl").is_file()
    assert {p.relative_to(start): p.read_bytes() for p in start.rglob("*") if p.is_file()} == before


# -- combine: one measurement from runs over disjoint tasks ---------------------------------------------------------


def run_json(settings: downstream.RunSettings, result: dict) -> dict:
    """What ``run --json`` writes (``command_run``), through JSON as ``combine`` reads it."""
    shown = downstream.shown_settings(settings)
    return json.loads(json.dumps({"settings": {**shown, "task_ids": settings.task_ids}, **result}, default=str))


@pytest.mark.slow
def test_combined_halves_are_the_run_of_all_their_tasks(lib, tasks, tmp_path, embeddings):
    """Two runs of one task each, with their own endpoints, combine into what one run of both tasks measures: the
    same summary, and a comparison naming the tasks the memory arm alone passed (here the ``none`` endpoint leaves
    out each task's last call, so it fails both)."""
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    ws = make_workspace(tmp_path, tokenizer, lib, EXPERIENCES)

    def measured(ids: list[str], name: str) -> dict:
        chosen = [tasks[t] for t in ids]
        with (
            downstream.ScriptedEndpoint("drop_last", chosen, lib) as plain,
            downstream.ScriptedEndpoint("ground_truth", chosen, lib) as with_memory,
        ):
            settings = downstream.RunSettings(
                ids,
                ["none", "plugin"],
                {"none": plain.base_url, "plugin": with_memory.base_url},
                workspace=ws,
                k=2,
                tokenizer=tokenizer,
                dimensions=64,
            )
            return run_json(settings, run(settings, tmp_path / name, lib))

    halves = [measured([T0], "first"), measured([T1], "second")]
    whole = measured([T0, T1], "whole")
    combined = downstream.combine(halves)
    assert combined["summary"] == whole["summary"]
    assert combined["runs"] == 2 and combined["settings"]["task_ids"] == [[T0], [T1]]
    assert len(set(map(json.dumps, combined["settings"]["urls"]))) == 2  # each half its own endpoints
    compared = combined["comparison"]["plugin"]
    assert compared["only_with"] == [0, 1] and compared["only_without"] == [] and compared["net"] == 2
    assert compared["p"] == 0.5 and compared["no_net_loss"]
    none, plugin = (whole["summary"]["arms"][a]["prompt_tokens_per_task"] for a in ("none", "plugin"))
    assert compared["prompt_tokens_change"] == round(plugin / none - 1, 4) > 0  # the blocks cost tokens

    out = tmp_path / "combined.json"
    paths = []
    for n, half in enumerate(halves):
        paths.append(tmp_path / f"half{n}.json")
        paths[-1].write_text(json.dumps(half))
    downstream.main(["combine", *map(str, paths), "--json", str(out)])
    assert json.loads(out.read_text())["comparison"] == combined["comparison"]


def result_row(arm: str, number: int, passed: bool, prompt_tokens: int) -> dict:
    """One task's result as ``solve`` records it, with the fields ``summarize`` reads."""
    return {
        "arm": arm,
        "id": f"multi_turn_base_{number}",
        "passed": passed,
        "requests": 4,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 10,
        "usage_missing": 0,
        "memory": [{"tokens": 100}] if arm != "none" else [],
        "task_turns": [[]],
        "error_type": None if passed else "multi_turn:instance_state_mismatch",
    }


def a_run(task_numbers: list[int], rows: list[dict], **settings) -> dict:
    shown = {"arms": ["none", "plugin"], "view": "when_to_use_content", "k": 3, "urls": {"none": "u"}}
    return {
        "settings": {**shown, **settings, "task_ids": [f"multi_turn_base_{n}" for n in task_numbers]},
        "results": rows,
        "frozen": {"plugin": {"unchanged": True}},
    }


def test_comparison_names_the_changed_tasks_and_the_verification_bars():
    # tasks 20 and 21: memory wins 20 and loses 21; 30: both pass; prompt tokens 1,000 -> 1,200 a task (+20%)
    rows = [
        result_row("none", 20, False, 1000),
        result_row("plugin", 20, True, 1200),
        result_row("none", 21, True, 1000),
        result_row("plugin", 21, False, 1200),
    ]
    more = [result_row("none", 30, True, 1000), result_row("plugin", 30, True, 1200)]
    combined = downstream.combine([a_run([20, 21], rows), a_run([30], more, urls={"none": "v"})])
    assert combined["comparison"]["plugin"] == {
        "only_with": [20],
        "only_without": [21],
        "net": 0,
        "p": 1.0,
        "prompt_tokens_change": 0.2,
        "within_prompt_token_bar": False,
        "no_net_loss": True,
    }
    lines = downstream.comparison_lines(combined["comparison"])
    assert lines == [
        "plugin vs none: net +0 (only with memory: 20; only without: 21; p = 1); prompt tokens per task +20.0% "
        "(at most +15%: NO; no net loss: yes)"
    ]


def test_combine_refuses_what_is_not_one_measurement():
    first = a_run([20], [result_row("none", 20, True, 1), result_row("plugin", 20, True, 1)])
    again = a_run([20], [result_row("none", 20, True, 1), result_row("plugin", 20, True, 1)])
    with pytest.raises(ValueError, match="multi_turn_base_20 is in run 1 and run 2"):
        downstream.combine([first, again])
    other_k = a_run([21], [result_row("none", 21, True, 1), result_row("plugin", 21, True, 1)], k=5)
    with pytest.raises(ValueError, match="run 2 differs from run 1 in k"):
        downstream.combine([first, other_k])
    changed = a_run([22], [])
    changed["frozen"]["plugin"]["unchanged"] = False
    with pytest.raises(ValueError, match="a memory changed during run 2: plugin"):
        downstream.combine([first, changed])
    with pytest.raises(ValueError, match="no run"):
        downstream.combine([])

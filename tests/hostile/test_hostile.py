"""The hostile-input suite: every way in, every bad input, one clean answer, no byte out of place.

Channels: HTTP and MCP against one real ``reme start`` service on 127.0.0.1 (started and stopped by this module), the
``reme`` CLI client, the one-shot CLI (``reme start job=...``, one process per workspace, run side by side), agent
tool calls (a scripted agent inside a real import) and hand-placed files. For every case:

* the answer is a JSON object; a failure carries a specific error code from ``KNOWN_CODES`` (never internal_error),
  and an input that must be refused is refused;
* no byte changed outside the case's expected destination: the experience, trajectory and plugin-state directories
  are compared entry by entry (bytes, mtime, links) before and after;
* nothing outside the workspace was touched: the test root around the workspace (with the targets of the planted
  links) is compared the same way.

ReMe's generic file jobs (write, edit, save, move, delete, frontmatter_*, read, load, read_image, stat, list, and
reindex with a plugin view as file_store) are driven over HTTP and MCP on the plugin's directories (refused with
``protected_path``, nothing changed) and on a user directory (they still work).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import httpx
import pytest

from conftest import app_factory, memory_of
from helpers import (
    PLAIN_FILE_STORE,
    EmbeddingEndpoint,
    experience_record,
    place_trajectory,
    summary,
    write_word_tokenizer,
)
from helpers.cli import INSPECT, REBUILD, REME, make_reme, parse_client_output, running_server, start_args
from helpers.chat import ChatEndpoint
from helpers.faults import Faults

KNOWN_CODES = {
    "invalid_argument",
    "path_outside_allowed_directory",
    "not_found",
    "invalid_experience",
    "already_exists",
    "stale_version",
    "field_too_long",
    "no_active_extraction_run",
    "operation_key_conflict",
    "malformed_input",
    "unsupported_format",
    "protected_path",
    "destination_not_allowed",
    "export_conflict",
}
SECRET = "OUTSIDE-SECRET-7f3a"
EXPERIENCE = "procedures/rebuild-search-after-config-change.json"
LOCK = "metadata/procedure/default/workspace.lock"
IMPORTS = "metadata/procedure/default/imports"
TRAJECTORY = "session/trajectories/run.jsonl"

# -- the hostile values ---------------------------------------------------------------------------------------------

VALUES: list[tuple[str, Any]] = [
    ("empty", ""),
    ("blank", " \t "),
    ("surrogate", "\ud800"),
    ("low-surrogate", "x\udcff"),
    ("nul", "a\x00b"),
    ("escape-seq", "a\x1b[31mb"),
    ("newline", "line\nbreak"),
    ("traversal", "../../etc/passwd"),
    ("deep-traversal", "procedures/../../../../etc/passwd"),
    ("absolute", "/etc/passwd"),
    ("absolute-inside", "{WS}/" + EXPERIENCE),
    ("home", "~/.ssh/id_rsa"),
    ("backslash", "procedures\\..\\metadata"),
    ("state-via-dotdot", "procedures/../metadata/procedure/default/workspace.lock"),
    ("state", "metadata/procedure/default/workspace.lock"),
    ("long", "x" * 5000),
    ("long-name", "procedures/" + "a" * 300 + ".json"),
    ("link-out", "procedures/escape.json"),
    ("trajectory-link-out", "session/trajectories/escape.jsonl"),
    ("bad-name", "procedures/HP-Upper.json"),
    ("glob", "procedures/*.json"),
    ("dot-segment", "procedures/./rebuild-search-after-config-change.json"),
    ("url-encoded", "procedures%2F..%2F..%2Fetc%2Fpasswd"),
    ("directory", "procedures"),
    ("slash", "procedures/"),
    ("unicode", "процедуры/🔥.json"),
    ("bidi", "\u202eprocedures"),
    ("json-text", '{"$ne": null}'),
    ("number-text", "1e999"),
    ("sql", "' OR 1=1 --"),
    ("int", 7),
    ("zero", 0),
    ("negative", -1),
    ("float", 2.5),
    ("huge-int", 10**30),
    ("true", True),
    ("list", [EXPERIENCE]),
    ("empty-list", []),
    ("object", {"path": "x"}),
    ("null", None),
]


def concrete(value: Any, ws: Path) -> Any:
    return value.replace("{WS}", str(ws)) if isinstance(value, str) else value


def valid_text(value: Any, *, numbers: bool, max_chars: int | None = None) -> bool:
    """What a text argument accepts: non-blank Unicode text (and numbers where the CLI may send them)."""
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    if not isinstance(value, str) or not value.strip():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return max_chars is None or len(value.strip()) <= max_chars


def valid_int(value: Any, low: int, high: int | None) -> bool:
    """What an integer argument accepts: absent, an int (or integral float / short digit string) within bounds."""
    if value is None or value == "":
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        digits = value.strip().removeprefix("-")
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 12):
            return False
        value = int(value)
    return isinstance(value, int) and value >= low and (high is None or value <= high)


def valid_flag(value: Any) -> bool:
    """What a boolean argument accepts: absent, a bool, 0/1, or true/false/yes/no/1/0 as text in any case."""
    if value is None or value == "" or isinstance(value, bool):
        return True
    if type(value) is int:
        return value in (0, 1)
    return isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0")


def valid_fraction(value: Any) -> bool:
    """What ``min_relevance`` accepts: absent, or a number from 0 to 1 (also as text); never a bool."""
    if value is None or value == "":
        return True
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return False
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= 1


def valid_tools(value: Any) -> bool:
    """What ``tools`` accepts: absent, or 1-256 names (a list, or text of comma-separated names), each 1-200
    characters of Unicode text without whitespace."""
    if value is None or value == "":
        return True
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not 0 < len(names) <= 256:
        return False
    return all(valid_text(n, numbers=False, max_chars=200) and not any(c.isspace() for c in n.strip()) for n in names)


@dataclass(frozen=True)
class Slot:
    """One argument of one served job: the other arguments are valid; ``accepts`` says which values must work."""

    job: str
    argument: str
    base: dict
    accepts: Callable[[Any], bool]


SERVED_SLOTS = [
    Slot("procedure_search", "query", {}, lambda v: valid_text(v, numbers=True, max_chars=4096)),
    Slot("procedure_search", "index", {"query": "stale search"}, lambda v: v in (None, "")),
    Slot("procedure_search", "limit", {"query": "stale search"}, lambda v: valid_int(v, 1, 50)),
    Slot("procedure_search", "min_relevance", {"query": "stale search"}, valid_fraction),
    Slot("procedure_search", "tools", {"query": "stale search"}, valid_tools),
    Slot("procedure_search", "max_tokens", {"query": "stale search"}, lambda v: valid_int(v, 1, None)),
    Slot("procedure_read", "path", {}, lambda v: v == "procedures/./rebuild-search-after-config-change.json"),
    Slot("procedure_read", "path", {"kind": "trajectory"}, lambda v: False),
    Slot("procedure_read", "kind", {"path": EXPERIENCE}, lambda v: not v or v == "experience"),
    Slot("procedure_read", "offset", {"kind": "trajectory", "path": TRAJECTORY}, lambda v: valid_int(v, 0, None)),
    Slot("procedure_read", "length", {"kind": "trajectory", "path": TRAJECTORY}, lambda v: valid_int(v, 1, None)),
    *[Slot(job, "limit", {}, lambda v: valid_int(v, 1, 500)) for job in ("procedure_list", "procedure_imports")],
    # a cursor is any text (it only says where a page starts): absent or "" is the first page
    *[
        Slot(job, "cursor", {}, lambda v: v in (None, "") or valid_text(v, numbers=True, max_chars=4096))
        for job in ("procedure_list", "procedure_imports")
    ],
    # procedure_history: paths as procedure_read refuses them; an entry of the directory (a link, a bad name) has a
    # history (its current content, unrecorded; a link is never followed)
    Slot(
        "procedure_history",
        "path",
        {},
        lambda v: (
            v
            in (
                "procedures/./rebuild-search-after-config-change.json",
                "procedures/escape.json",
                "procedures/HP-Upper.json",
            )
        ),
    ),
    Slot("procedure_history", "diff", {"path": EXPERIENCE}, lambda v: valid_flag(v)),
    Slot("procedure_history", "offset", {"path": EXPERIENCE}, lambda v: valid_int(v, 0, None)),
    Slot("procedure_history", "limit", {"path": EXPERIENCE}, lambda v: valid_int(v, 1, 50)),
]


@dataclass(frozen=True)
class Case:
    name: str
    job: str
    args: dict
    must_succeed: bool

    def body(self, ws: Path) -> dict:
        return {k: concrete(v, ws) for k, v in self.args.items() if v is not None}


def served_cases() -> list[Case]:
    cases = []
    for slot in SERVED_SLOTS:
        for label, value in VALUES:
            kind = slot.base.get("kind", "")
            cases.append(
                Case(
                    f"{slot.job}{'-' + kind if kind else ''}-{slot.argument}-{label}",
                    slot.job,
                    {**slot.base, slot.argument: value},
                    slot.accepts(value),
                )
            )
    return cases


SERVED_CASES = served_cases()

# Generic ReMe file jobs aimed at the plugin's directories: every one must be refused with protected_path.
GENERIC_REFUSED = [
    ("write", {"path": "procedures/new-one.json", "name": "n", "description": "d", "content": "{}"}),
    ("write", {"path": EXPERIENCE, "name": "n", "description": "d", "content": "{}"}),
    ("write", {"path": "procedures/notes", "name": "n", "description": "d", "content": "x"}),
    ("write", {"path": "session/trajectories/planted.jsonl", "name": "n", "description": "d", "content": "{}"}),
    ("write", {"path": "metadata/procedure/default/imports/x.json", "name": "n", "description": "d", "content": "{}"}),
    ("write", {"path": "{WS}/procedures/absolute.json", "name": "n", "description": "d", "content": "{}"}),
    ("write", {"path": "notes/into-procedures.md", "name": "n", "description": "d", "content": "x"}),
    ("write", {"path": "notes/into-state/x.md", "name": "n", "description": "d", "content": "x"}),
    ("edit", {"path": EXPERIENCE, "old": "Rebuild", "new": "HACKED"}),
    ("edit", {"path": TRAJECTORY, "old": "user", "new": "HACKED"}),
    ("edit", {"path": "notes/into-procedures.md", "old": "Rebuild", "new": "HACKED"}),
    ("save", {"path": EXPERIENCE, "content": "{}"}),
    ("save", {"path": TRAJECTORY, "content": "{}"}),
    ("save", {"path": "metadata/procedure/default/workspace.lock", "content": "pid=1"}),
    ("move", {"src_path": EXPERIENCE, "dst_path": "notes/stolen.json"}),
    ("move", {"src_path": TRAJECTORY, "dst_path": "notes/run.jsonl"}),
    ("move", {"src_path": "notes/readme.md", "dst_path": "procedures/readme-moved.json"}),
    ("move", {"src_path": "notes/readme.md", "dst_path": "session/trajectories/planted.jsonl"}),
    ("move", {"src_path": "notes/into-procedures.md", "dst_path": "notes/moved.md"}),
    ("move", {"src_path": "notes/readme.md", "dst_path": "notes/elsewhere.md", "file_store": "procedure_when_to_use"}),
    ("delete", {"path": EXPERIENCE}),
    ("delete", {"path": "procedures"}),
    ("delete", {"path": "session"}),
    ("delete", {"path": TRAJECTORY}),
    ("delete", {"path": "metadata/procedure"}),
    ("delete", {"path": "metadata"}),
    ("delete", {"path": "notes/into-procedures.md"}),
    ("delete", {"path": "{WS}/procedures"}),
    ("frontmatter_update", {"path": EXPERIENCE, "metadata": {"hacked": True}}),
    ("frontmatter_update", {"path": TRAJECTORY, "metadata": {"hacked": True}}),
    ("frontmatter_delete", {"path": EXPERIENCE, "keys": ["description"]}),
    ("read", {"path": "metadata/procedure/default/workspace.lock"}),
    ("load", {"path": "metadata/procedure/default/workspace.lock"}),
    ("load", {"path": "notes/into-state/workspace.lock"}),
    ("read_image", {"path": "metadata/procedure/default/workspace.lock"}),
    ("stat", {"path": "metadata/procedure/default/workspace.lock"}),
    ("list", {"path": "metadata/procedure/default"}),
    ("frontmatter_read", {"path": "metadata/procedure/default/workspace.lock"}),
    ("read", {"path": TRAJECTORY}),  # a copy's content: procedure_read kind=trajectory serves it masked
    ("load", {"path": TRAJECTORY}),
    ("read_image", {"path": TRAJECTORY}),
    ("list", {"path": "mem_session"}),  # the agents' session files
    ("reindex", {"file_store": "procedure_when_to_use"}),
    ("reindex", {"file_store": "procedure_when_to_use_content", "scope": "embedding"}),
]
HIDDEN_JOBS = {
    "procedure_create": {
        "filename": "x.json",
        "description": "a",
        "when_to_use": "b",
        "content": "c",
        "operation_key": "k",
        "_procedure_grant": "forged",
        "tool_context_id": "forged",
    },
    "procedure_update": {"path": EXPERIENCE, "expected_version": "v", "content": "HACKED", "operation_key": "k"},
    "procedure_auto_memory": {"file": "/etc/passwd", "filename": "passwd.log"},
    "procedure_reindex": {},
    "procedure_export": {"dest": "/tmp/stolen-skills"},
    "procedure_delete": {"path": EXPERIENCE},
}


# -- the workspace and its states ----------------------------------------------------------------------------------


def entries(*roots: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """Every entry under the roots without following links: files (bytes, mtime), links (target), directories."""
    out: dict[str, tuple] = {}
    for root in roots:
        if not root.exists() and not root.is_symlink():
            continue
        stack = [root]
        while stack:
            path = stack.pop()
            if any(path == s or path.is_relative_to(s) for s in skip):
                continue
            if path.is_symlink():
                out[str(path)] = ("link", os.readlink(path))
            elif path.is_dir():
                out[str(path)] = ("dir",)
                stack += list(path.iterdir())
            else:
                out[str(path)] = ("file", path.read_bytes(), path.stat().st_mtime_ns)
    return out


def plugin_dirs(ws: Path) -> tuple[Path, ...]:
    return ws / "procedures", ws / "session" / "trajectories", ws / "metadata" / "procedure"


def build_workspace(root: Path) -> Path:
    """Experiences (one hand-placed under a bad name), a trajectory copy, links leading out of the workspace and
    into the plugin's directories, a user directory ``notes/``; secrets outside the workspace."""
    ws, outside = root / "ws", root / "outside"
    outside.mkdir(parents=True)
    (outside / "secret.json").write_text(json.dumps(experience_record("s", SECRET, SECRET)))
    (outside / "secret.log").write_text(SECRET)
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws, "run.jsonl", b'{"role": "user", "content": "search results are stale after a change"}\n')
    for name, record in (
        (EXPERIENCE, REBUILD),
        ("procedures/inspect-logs-before-rebuilding.json", INSPECT),
        ("procedures/HP-Upper.json", REBUILD),
    ):
        (ws / name).write_text(json.dumps(record, indent=4))
    (ws / "procedures/escape.json").symlink_to(outside / "secret.json")
    (ws / "session/trajectories/escape.jsonl").symlink_to(outside / "secret.log")
    (ws / "notes").mkdir()
    (ws / "notes/readme.md").write_text("---\nname: readme\ndescription: user notes\n---\nUser notes.\n")
    (ws / "notes/into-procedures.md").symlink_to(Path("..") / EXPERIENCE)
    (ws / "notes/into-state").symlink_to(Path("../metadata/procedure/default"), target_is_directory=True)
    return ws


@dataclass
class Served:
    root: Path
    ws: Path
    port: int
    reme: Any
    mcp: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def state(self) -> tuple[dict, dict]:
        """(the plugin's directories, everything around the workspace)."""
        return (
            entries(*plugin_dirs(self.ws)),
            entries(self.root, skip=(self.ws, self.root / "server.log", self.root / "cwd" / "logs")),
        )


def ascii_json(obj: Any) -> bytes:
    """JSON as many clients send it (escaped non-ASCII): carries lone surrogates such as ``\\ud800`` too."""
    return json.dumps(obj).encode("ascii")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    with EmbeddingEndpoint(64) as endpoint:
        reme = make_reme(root, endpoint, write_word_tokenizer(root / "tok" / "tokenizer.json"))
        ws = build_workspace(root)
        with running_server(
            reme, ws, root / "server.log", "components.procedure_memory.default.pending_retry_seconds=0"
        ) as (proc, port):
            yield Served(root=root, ws=ws, port=port, reme=reme)


def check_answer(text: str, success: bool | None, must_succeed: bool) -> dict:
    """The common assertion: a JSON object; success as required; a failure with a specific, known code.

    ``success`` is None where the channel carries only the answer (MCP): the answer's status decides.
    """
    answer = json.loads(text)
    assert isinstance(answer, dict), text
    assert SECRET not in text
    if success is None:
        success = answer.get("status") not in ("error", "incomplete", "rejected")
    if must_succeed:
        assert success and answer.get("status") == "ok", answer
    else:
        assert not success and answer.get("status") in ("error", "incomplete", "rejected"), answer
        assert answer["error"]["code"] in KNOWN_CODES and answer["error"]["message"], answer
    return answer


# -- HTTP ------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", SERVED_CASES, ids=lambda c: c.name)
def test_http_served_jobs_answer_every_hostile_input_cleanly(served, case):
    before = served.state()
    response = httpx.post(
        f"{served.url}/{case.job}",
        content=ascii_json(case.body(served.ws)),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 200, response.text[:500]
    result = response.json()
    check_answer(result["answer"], result["success"], case.must_succeed)
    assert served.state() == before


@pytest.mark.slow
@pytest.mark.parametrize("job, args", GENERIC_REFUSED, ids=lambda v: v if isinstance(v, str) else None)
def test_http_generic_file_jobs_cannot_reach_the_plugin_directories(served, job, args):
    before = served.state()
    body = {k: concrete(v, served.ws) for k, v in args.items()}
    response = httpx.post(f"{served.url}/{job}", json=body, timeout=60)
    assert response.status_code == 200, response.text[:500]
    result = response.json()
    answer = check_answer(result["answer"], result["success"], must_succeed=False)
    assert answer["error"]["code"] == "protected_path", answer
    assert served.state() == before


@pytest.mark.slow
@pytest.mark.parametrize("job", sorted(HIDDEN_JOBS))
def test_http_write_and_import_jobs_are_not_served(served, job):
    before = served.state()
    response = httpx.post(f"{served.url}/{job}", json=HIDDEN_JOBS[job], timeout=60)
    assert response.status_code in (404, 405)
    assert served.state() == before


@pytest.mark.slow
def test_http_generic_file_jobs_still_work_elsewhere_and_may_read_experiences(served):
    before = served.state()
    calls = [
        ("write", {"path": "notes/new.md", "name": "new", "description": "d", "content": "Hello."}),
        ("edit", {"path": "notes/new.md", "old": "Hello", "new": "Hi"}),
        ("save", {"path": "notes/saved.md", "content": "saved\n"}),
        ("frontmatter_update", {"path": "notes/new.md", "metadata": {"topic": "t"}}),
        ("frontmatter_delete", {"path": "notes/new.md", "keys": ["topic"]}),
        ("move", {"src_path": "notes/new.md", "dst_path": "notes/moved.md"}),
        ("delete", {"path": "notes/moved.md"}),
        ("delete", {"path": "notes/saved.md"}),
        ("load", {"path": EXPERIENCE}),
        ("stat", {"path": TRAJECTORY}),
        ("list", {"path": "procedures"}),
    ]
    with httpx.Client(base_url=served.url, timeout=60) as client:
        results = {job: client.post(f"/{job}", json=args).json() for job, args in calls}
    assert all(r["success"] for r in results.values()), results
    assert "Rebuild the affected indexes" in results["load"]["answer"]
    assert not (served.ws / "notes/moved.md").exists() and (served.ws / "notes/readme.md").exists()
    assert served.state() == before


# -- MCP (one session runs every case; the assertions are per case) ---------------------------------------------------


def _encode_ascii_json(obj):
    body = ascii_json(obj)
    from httpx._content import ByteStream

    return {"Content-Length": str(len(body)), "Content-Type": "application/json"}, ByteStream(body)


@pytest.fixture(scope="module")
def mcp_results(served):
    """Every MCP case in one session: (is_error, text, plugin state unchanged, outside unchanged)."""
    from fastmcp import Client

    cases = [(f"served-{c.name}", c.job, c.body(served.ws)) for c in SERVED_CASES]
    cases += [
        (f"generic-{i}-{job}", job, {k: concrete(v, served.ws) for k, v in args.items()})
        for i, (job, args) in enumerate(GENERIC_REFUSED)
    ]
    cases += [(f"hidden-{job}", job, args) for job, args in HIDDEN_JOBS.items()]

    async def session() -> dict:
        out = {}
        async with Client(f"{served.url}/mcp", timeout=60) as client:
            tools = {tool.name for tool in await client.list_tools()}
            out["tools"] = tools
            for name, job, args in cases:
                before = served.state()
                if job not in tools:
                    out[name] = ("not served", "", True, True)
                    continue
                result = await client.call_tool(job, args, raise_on_error=False)
                after = served.state()
                text = result.content[0].text if result.content else ""
                out[name] = (result.is_error, text, after[0] == before[0], after[1] == before[1])
        return out

    # Lone surrogates travel as JSON escapes, as most clients send non-ASCII; the default client encoder refuses them.
    with mock.patch("httpx._content.encode_json", _encode_ascii_json):
        return asyncio.run(asyncio.wait_for(session(), timeout=600))


@pytest.mark.slow
@pytest.mark.parametrize("case", SERVED_CASES, ids=lambda c: c.name)
def test_mcp_served_tools_answer_every_hostile_input_cleanly(mcp_results, case):
    is_error, text, plugin_unchanged, outside_unchanged = mcp_results[f"served-{case.name}"]
    check_answer(text, False if is_error else None, case.must_succeed)
    assert plugin_unchanged and outside_unchanged


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(GENERIC_REFUSED)), ids=lambda i: GENERIC_REFUSED[i][0])
def test_mcp_generic_file_tools_cannot_reach_the_plugin_directories(mcp_results, index):
    is_error, text, plugin_unchanged, outside_unchanged = mcp_results[f"generic-{index}-{GENERIC_REFUSED[index][0]}"]
    answer = check_answer(text, False if is_error else None, must_succeed=False)
    assert answer["error"]["code"] == "protected_path"
    assert plugin_unchanged and outside_unchanged


@pytest.mark.slow
@pytest.mark.parametrize("job", sorted(HIDDEN_JOBS))
def test_mcp_write_and_import_tools_are_not_listed(mcp_results, job):
    assert job not in mcp_results["tools"]
    assert mcp_results[f"hidden-{job}"] == ("not served", "", True, True)


@pytest.mark.slow
def test_mcp_generic_file_tools_still_work_elsewhere(served, mcp_results):
    from fastmcp import Client

    before = served.state()

    async def session():
        async with Client(f"{served.url}/mcp", timeout=60) as client:
            results = []
            for job, args in [
                ("write", {"path": "notes/mcp.md", "name": "m", "description": "d", "content": "x"}),
                ("edit", {"path": "notes/mcp.md", "old": "x", "new": "y"}),
                ("delete", {"path": "notes/mcp.md"}),
                ("load", {"path": EXPERIENCE}),
            ]:
                result = await client.call_tool(job, args, raise_on_error=False)
                results.append((job, result.is_error, result.content[0].text))
            return results

    results = asyncio.run(asyncio.wait_for(session(), timeout=120))
    assert not any(is_error for _, is_error, _ in results), results
    assert "Rebuild the affected indexes" in results[-1][2]
    assert served.state() == before


# -- the reme CLI client and the one-shot CLI (subprocesses, run side by side) --------------------------------------

# Each client process costs seconds (it imports ReMe): the cases are the ones the client itself shapes (it converts
# JSON-looking values) plus one of each refusal; HTTP covers every value.
CLIENT_CASES = [
    ("procedure_read", ["kind=trajectory", "path=session/trajectories/escape.jsonl"], "path_outside_allowed_directory"),
    ("procedure_search", ["query=[1, 2]"], "invalid_argument"),  # the client converts JSON-looking values
    ("procedure_search", ["query=stale", "limit=1e999"], "invalid_argument"),
    ("procedure_list", ["cursor=[1, 2]"], "invalid_argument"),
    ("procedure_imports", ["limt=5"], "invalid_argument"),
    ("write", ["path=procedures/cli.json", "name=n", "description=d", "content=c"], "protected_path"),
]


@pytest.mark.slow
def test_cli_client_answers_hostile_input_cleanly(served):
    before = served.state()
    procs = [
        subprocess.Popen(
            [str(REME), job, *args, "host=127.0.0.1", f"port={served.port}"],
            cwd=served.reme.cwd,
            env=served.reme.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job, args, _ in CLIENT_CASES
    ]
    for proc, (job, args, code) in zip(procs, CLIENT_CASES):
        stdout, stderr = proc.communicate(timeout=300)
        answer, ok = parse_client_output(stdout)
        assert not ok and answer["error"]["code"] == code, (job, args, answer, stderr[-2000:])
        assert SECRET not in stdout
    assert served.state() == before


BAD_NAMES = [
    "HP-Upper.json",
    "hp space.json",
    "hp.dots.json",
    "-leading.json",
    "trailing-.json",
    "double--hyphen.json",
    "\u00e9-accent.json",
    "a" * 130 + ".json",
    ".hidden.json",
    "tab\tname.json",
    "new\nline.json",
]
HAND_PLACED: dict[str, bytes | str] = {  # name -> bytes, or "link:<target>"
    **{name: json.dumps(REBUILD).encode() for name in BAD_NAMES},  # valid content under a name a write refuses
    "not-json.json": b'{"description": ',
    "not-utf8.json": b'{"description": "\xff\xfe"}',
    "bom.json": b"\xef\xbb\xbf" + json.dumps(REBUILD).encode(),
    "array.json": b"[]",
    "empty.json": b"",
    "extra-field.json": json.dumps({**REBUILD, "id": 1}).encode(),
    "missing-field.json": json.dumps({k: v for k, v in REBUILD.items() if k != "content"}).encode(),
    "empty-field.json": json.dumps({**REBUILD, "description": ""}).encode(),
    "blank-field.json": json.dumps({**REBUILD, "when-to-use": " \n "}).encode(),
    "number-field.json": json.dumps({**REBUILD, "description": 5}).encode(),
    "nan-field.json": json.dumps(REBUILD).replace('"Rebuild search after a configuration change"', "NaN").encode(),
    "deep-field.json": json.dumps({**REBUILD, "content": "@"}).replace('"@"', "[" * 100_000 + "]" * 100_000).encode(),
    "sources-empty.json": json.dumps({**REBUILD, "sources": []}).encode(),
    "sources-string.json": json.dumps({**REBUILD, "sources": TRAJECTORY}).encode(),
    "sources-duplicate.json": json.dumps({**REBUILD, "sources": [TRAJECTORY, TRAJECTORY]}).encode(),
    "sources-traversal.json": json.dumps({**REBUILD, "sources": ["session/trajectories/../../../etc/passwd"]}).encode(),
    "sources-in-procedures.json": json.dumps({**REBUILD, "sources": [EXPERIENCE]}).encode(),
    "sources-missing.json": json.dumps({**REBUILD, "sources": ["session/trajectories/gone.jsonl"]}).encode(),
    "sources-absolute.json": json.dumps({**REBUILD, "sources": ["/etc/passwd"]}).encode(),
    "sources-link-out.json": json.dumps({**REBUILD, "sources": ["session/trajectories/escape.jsonl"]}).encode(),
    "link-out.json": "link:{OUTSIDE}/secret.json",
    "link-inside.json": "link:rebuild-search-after-config-change.json",
    "dangling-link.json": "link:nowhere.json",
}


def place_hostile_files(ws: Path, outside: Path) -> None:
    for name, data in HAND_PLACED.items():
        path = ws / "procedures" / name
        if isinstance(data, str):
            path.unlink(missing_ok=True)
            path.symlink_to(data.removeprefix("link:").replace("{OUTSIDE}", str(outside)))
        else:
            path.write_bytes(data)


@dataclass(frozen=True)
class OneShot:
    name: str
    args: list[str]
    code: str
    prepare: Callable[[Path, Path], None] = lambda ws, originals: None


ONE_SHOT = [
    OneShot(
        "deep-json",
        ["job=procedure_auto_memory", "file={ORIG}/deep.json", "filename=deep.json", "request_id=deep"],
        "malformed_input",
        lambda ws, o: (o / "deep.json").write_text("[" * 100_000 + "]" * 100_000),
    ),
    OneShot(
        "nan-jsonl",
        ["job=procedure_auto_memory", "file={ORIG}/nan.jsonl", "filename=nan.jsonl"],
        "malformed_input",
        lambda ws, o: (o / "nan.jsonl").write_text('{"a": 1}\n{"loss": NaN}\n'),
    ),
    # issue 32 item 5: refused before the copy, so nothing of the workspace changes (``changed == set()`` below)
    OneShot(
        "pdf",
        ["job=procedure_auto_memory", "file={ORIG}/t.pdf", "filename=t.pdf"],
        "unsupported_format",
        lambda ws, o: (o / "t.pdf").write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"),
    ),
    OneShot(
        "elf-as-log",
        ["job=procedure_auto_memory", "file={ORIG}/tool.log", "filename=tool.log"],
        "unsupported_format",
        lambda ws, o: (o / "tool.log").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(64)),
    ),
    OneShot(
        "long-filename",
        ["job=procedure_auto_memory", "file={ORIG}/run.log", "filename=" + "a" * 296 + ".log"],
        "invalid_argument",
        lambda ws, o: (o / "run.log").write_text("a log line\n"),
    ),
    OneShot(
        "undecodable-filename",
        ["job=procedure_auto_memory", "file={ORIG}/run.log", b"filename=run\xff.log"],
        "invalid_argument",
        lambda ws, o: (o / "run.log").write_text("a log line\n"),
    ),
    OneShot(
        "generic-write",
        ["job=write", "path=procedures/one-shot.json", "name=n", "description=d", "content=c"],
        "protected_path",
    ),
    OneShot(
        "export-through-a-link-into-the-workspace",
        ["job=procedure_export", "dest={ORIG}/skills"],
        "destination_not_allowed",
        lambda ws, o: (o / "skills").symlink_to(ws / "procedures", target_is_directory=True),
    ),
    OneShot(
        "reindex-hand-placed",
        ["job=procedure_reindex"],
        "",
        lambda ws, o: place_hostile_files(ws, o.parent / "outside"),
    ),
]


@pytest.fixture(scope="module")
def one_shot_results(tmp_path_factory):
    """Each one-shot case in its own workspace, all processes side by side: (answer, returncode, states)."""
    root = tmp_path_factory.mktemp("one-shot")
    with EmbeddingEndpoint(64) as endpoint, ChatEndpoint(lambda c: pytest.fail("no extraction")) as chat:
        reme = make_reme(root, endpoint, write_word_tokenizer(root / "tok" / "tokenizer.json"))
        reme.env["LLM_BASE_URL"] = chat.base_url  # answers the import preflight's probe
        runs = []
        for case in ONE_SHOT:
            base = root / case.name
            ws = build_workspace(base)
            originals = base / "originals"
            originals.mkdir()
            case.prepare(ws, originals)
            args = [a.replace("{ORIG}", str(originals)) if isinstance(a, str) else a for a in case.args]
            before = (entries(*plugin_dirs(ws)), entries(base, skip=(ws,)))
            proc = subprocess.Popen(
                [str(REME), "start", *args, *start_args(ws)],
                cwd=reme.cwd,
                env=reme.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            runs.append((case, ws, base, before, proc))
        results = {}
        for case, ws, base, before, proc in runs:
            stdout, stderr = proc.communicate(timeout=600)
            after = (entries(*plugin_dirs(ws)), entries(base, skip=(ws,)))
            # the answer goes to stdout on success, to stderr (exit 1) on failure
            answer = (stdout if proc.returncode == 0 else stderr).decode("utf-8", "replace").strip().splitlines()
            results[case.name] = (
                answer[-1] if answer else "",
                stderr.decode("utf-8", "replace")[-3000:],
                proc.returncode,
                ws,
                before,
                after,
            )
        return results


def changed_files(before: dict, after: dict) -> set[str]:
    """Paths of files and links that appeared, changed or vanished (new empty directories do not count)."""
    return {
        p
        for p in set(before) | set(after)
        if before.get(p) != after.get(p) and (before.get(p) or after.get(p))[0] != "dir"
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in ONE_SHOT if c.code], ids=lambda c: c.name)
def test_one_shot_cli_answers_hostile_input_cleanly(one_shot_results, case):
    stdout, stderr, returncode, ws, before, after = one_shot_results[case.name]
    answer = check_answer(stdout, returncode == 0, must_succeed=False)
    assert answer["error"]["code"] == case.code, (answer, stderr)
    assert after[1] == before[1]  # nothing outside the workspace
    changed = changed_files(*[state[0] for state in (before, after)]) - {str(ws / LOCK)}
    if case.code == "malformed_input":  # the expected destination: the kept copy and the import's own record
        assert changed == {str(ws / answer["path"]), *[p for p in changed if p.startswith(str(ws / IMPORTS))]}
        assert (ws / answer["path"]).is_file() and answer["status"] == "rejected"
    else:
        assert changed == set(), changed


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HAND_PLACED), ids=ascii)
def test_one_shot_reindex_reports_every_hand_placed_file_and_rewrites_none(one_shot_results, name):
    stdout, stderr, returncode, ws, before, after = one_shot_results["reindex-hand-placed"]
    answer = json.loads(stdout)
    assert returncode == 0 and answer["status"] == "complete" and answer["indexed"] == 2, (answer, stderr)
    invalid = {item["path"]: item["error"] for item in answer["invalid_files"]}
    assert invalid.get(f"procedures/{name}"), sorted(invalid)
    assert SECRET not in stdout
    assert changed_files(before[0], after[0]) <= {str(ws / LOCK)} and after[1] == before[1]


# -- agent tool calls and hand-placed files (in process, a scripted agent inside a real import) ---------------------

AGENT_TEXT_OK = lambda v: valid_text(v, numbers=False)  # noqa: E731 - the file fields take strings only
# The hostile filenames that have a canonical spelling (issue 6: case, spaces/underscores, a missing `.json` and the
# `procedures/` prefix are spelling slips the agent loop absorbs); every other hostile filename is refused.
CANONICAL_FILENAMES = {"bad-name": "hp-upper.json", "directory": "procedures.json", "number-text": "1e999.json"}
AGENT_KEY_OK = lambda v: valid_text(v, numbers=True) and len(str(v)) <= 200  # noqa: E731


def agent_cases() -> list[Case]:
    cases = []
    for label, value in VALUES:
        for argument, accepts in (
            ("filename", lambda v, label=label: label in CANONICAL_FILENAMES),
            ("description", AGENT_TEXT_OK),
            ("when_to_use", AGENT_TEXT_OK),
            ("content", AGENT_TEXT_OK),
            ("operation_key", lambda v: v is None or AGENT_KEY_OK(v)),
        ):
            cases.append(Case(f"create-{argument}-{label}", "procedure_create", {argument: value}, accepts(value)))
        # an update may rewrite no field (it adds the run's source); a key the create cases used already is
        # taken by a different write (operation_key_conflict); no key (null) is optional: one is derived
        for argument, accepts in (
            ("path", lambda v: False),
            ("expected_version", lambda v: False),
            ("content", lambda v: v is None or AGENT_TEXT_OK(v)),
            ("operation_key", lambda v: v is None),
        ):
            cases.append(Case(f"update-{argument}-{label}", "procedure_update", {argument: value}, accepts(value)))
    return cases


AGENT_CASES = agent_cases()


@pytest.fixture(scope="module")
def agent_results(tmp_path_factory):
    """One import whose agent makes every hostile tool call (and the hand-placed file checks) in a live run."""
    root = tmp_path_factory.mktemp("agent")
    ws = build_workspace(root)
    place_hostile_files(ws, root / "outside")
    original = root / "originals" / "run.jsonl"
    original.parent.mkdir()
    original.write_text('{"role": "user", "content": "the search index is stale"}\n')
    factory = app_factory(ws, write_word_tokenizer(root / "tok" / "tokenizer.json"))
    out: dict[str, Any] = {}

    def state():
        return entries(*plugin_dirs(ws)), entries(root, skip=(ws,))

    async def script(tools, prompt, kwargs):
        ok, target = await tools.call(
            "procedure_create",
            filename="update-target.json",
            operation_key="target",
            description="d",
            when_to_use="when updating",
            content="c",
        )
        assert ok, target
        for i, case in enumerate(AGENT_CASES):
            if case.job == "procedure_create":
                args = {
                    "filename": f"hostile-{i}.json",
                    "description": "d",
                    "when_to_use": "w",
                    "content": "c",
                    "operation_key": f"k-{i}",
                    **{k: concrete(v, ws) for k, v in case.args.items()},
                }
                name = CANONICAL_FILENAMES.get(case.name.removeprefix("create-filename-"), f"hostile-{i}.json")
                destination = str(ws / "procedures" / name)
            else:
                ok, current = await tools.call("procedure_read", path=target["path"])
                args = {
                    "path": target["path"],
                    "expected_version": current["version"],
                    "content": f"c{i}",
                    "operation_key": f"k-{i}",
                    **{k: concrete(v, ws) for k, v in case.args.items()},
                }
                destination = str(ws / target["path"])
            before = state()
            ok, answer = await tools.call(case.job, **{k: v for k, v in args.items() if v is not None})
            after = state()
            changed = {p for p in set(before[0]) | set(after[0]) if before[0].get(p) != after[0].get(p)}
            journal = str(ws / "metadata/procedure/default/operations")
            out[case.name] = (
                ok,
                json.dumps(answer),
                {p for p in changed if not p.startswith(journal)},
                destination,
                after[1] == before[1],
            )
        for name in HAND_PLACED:  # the agent's view of every hand-placed file: read and update refuse it
            path = f"procedures/{name}"
            before = state()
            out[f"read:{name}"] = await tools.call("procedure_read", path=path)
            out[f"update:{name}"] = await tools.call(
                "procedure_update", path=path, expected_version="any", content="fixed", operation_key=f"fix-{name}"
            )
            out[f"unchanged:{name}"] = state() == before
        return summary("Tried every hostile call.")

    async def run():
        async with factory(scripts=[script]) as app:
            before = entries(ws / "procedures")
            for view in ("when_to_use", "when_to_use_content"):
                response = await app.run_job("procedure_search", query="search results stale", index=view, limit=50)
                out[f"search:{view}"] = json.loads(response.answer)
            out["hand-placed-unchanged-by-search"] = entries(ws / "procedures") == before
            response = await app.run_job(
                "procedure_auto_memory", file=str(original), filename="run.jsonl", request_id="hostile"
            )
            out["import"] = (response.success, json.loads(response.answer))
            out["pending"] = {p: memory_of(app).workspace.pending.error(p) for p in memory_of(app).workspace.pending}

    asyncio.run(run())
    return out


@pytest.mark.slow
def test_agent_import_survives_every_hostile_call(agent_results):
    ok, answer = agent_results["import"]
    assert ok and answer["status"] == "complete", answer


@pytest.mark.slow
@pytest.mark.parametrize("case", AGENT_CASES, ids=lambda c: c.name)
def test_agent_tool_calls_answer_every_hostile_input_cleanly(agent_results, case):
    ok, text, changed, destination, outside_unchanged = agent_results[case.name]
    answer = json.loads(text)
    assert isinstance(answer, dict) and SECRET not in text
    if case.must_succeed:
        assert ok and answer["status"] in ("created", "updated"), answer
        assert changed == {destination}, changed
    else:
        assert not ok and answer["error"]["code"] in KNOWN_CODES, answer
        assert changed == set(), changed
    assert outside_unchanged


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HAND_PLACED), ids=ascii)
def test_hand_placed_files_are_excluded_reported_and_never_rewritten(agent_results, name):
    path = f"procedures/{name}"
    for view in ("when_to_use", "when_to_use_content"):
        found = agent_results[f"search:{view}"]
        assert path not in {r["path"] for r in found["results"]}
        pending = {p["path"]: p["error"] for p in found["pending_indexes"]}
        assert pending.get(path), (path, sorted(pending))
        assert SECRET not in json.dumps(found)
    for tool in ("read", "update"):
        ok, answer = agent_results[f"{tool}:{name}"]
        assert not ok and answer["error"]["code"] == "invalid_experience", (tool, answer)
        assert SECRET not in json.dumps(answer)
    assert agent_results[f"unchanged:{name}"] and agent_results["hand-placed-unchanged-by-search"]
    assert agent_results["pending"].get(path)


# -- procedure_export's dest (issue 22 item 2; in process, one Application for every case) ------------------------

EXPORTED = {"inspect-logs-before-rebuilding", "rebuild-search-after-config-change"}  # the valid experiences


def export_code(value: Any) -> str:
    """A hostile value as ``dest``: an absolute path names a file or a place in the workspace here, anything else is
    not an absolute path (or not text)."""
    return (
        "destination_not_allowed" if isinstance(value, str) and value.startswith(("/", "{WS}")) else "invalid_argument"
    )


# (name, dest with {WS} / {ROOT}, expected code or "" for success, what the case prepares)
EXPORT_CASES: list[tuple[str, Any, str, Callable[[Path, Path], None]]] = [
    *((f"value-{label}", value, export_code(value), lambda ws, root: None) for label, value in VALUES),
    ("workspace", "{WS}", "destination_not_allowed", lambda ws, root: None),
    ("experience-directory", "{WS}/procedures", "destination_not_allowed", lambda ws, root: None),
    ("plugin-state", "{WS}/metadata/procedure/default", "destination_not_allowed", lambda ws, root: None),
    ("new-inside", "{WS}/exports/skills", "destination_not_allowed", lambda ws, root: None),
    ("dotdot-into-workspace", "{ROOT}/outside/../ws/skills", "destination_not_allowed", lambda ws, root: None),
    (
        "link-into-workspace",
        "{ROOT}/links/skills",
        "destination_not_allowed",
        lambda ws, root: (root / "links/skills").symlink_to(ws / "procedures", target_is_directory=True),
    ),
    (
        "below-a-link-to-the-workspace",
        "{ROOT}/links/ws/skills",
        "destination_not_allowed",
        lambda ws, root: (root / "links/ws").symlink_to(ws, target_is_directory=True),
    ),
    ("a-file", "{ROOT}/outside/secret.log", "destination_not_allowed", lambda ws, root: None),
    ("below-a-file", "{ROOT}/outside/secret.log/skills", "destination_not_allowed", lambda ws, root: None),
    (
        "skill-folder-is-a-link-into-the-workspace",
        "{ROOT}/exports/linked",
        "export_conflict",
        lambda ws, root: (root / "exports/linked/rebuild-search-after-config-change").symlink_to(
            ws / "procedures", target_is_directory=True
        ),
    ),
    (
        "index-is-a-link-outside",
        "{ROOT}/exports/index-link",
        "export_conflict",
        lambda ws, root: (root / "exports/index-link/INDEX.md").symlink_to(root / "outside/secret.log"),
    ),
    ("no-permission", "{ROOT}/exports/read-only", "storage_error", lambda ws, root: None),
    ("outside", "{ROOT}/exports/fine", "", lambda ws, root: None),
]


@pytest.fixture(scope="module")
def export_results(tmp_path_factory):
    """Every export case against the hostile workspace (hand-placed invalid files, a link to an outside secret):
    (answer text, success, changes in the plugin's directories, changes around the workspace)."""
    root = tmp_path_factory.mktemp("export")
    ws = build_workspace(root)
    for directory in ("links", "exports/linked", "exports/index-link", "exports/read-only"):
        (root / directory).mkdir(parents=True)
    factory = app_factory(ws, write_word_tokenizer(root / "tok" / "tokenizer.json"))
    out: dict[str, Any] = {}

    async def run():
        async with factory() as app:
            for name, dest, _, prepare in EXPORT_CASES:
                prepare(ws, root)
                before = (entries(*plugin_dirs(ws)), entries(root, skip=(ws,)))
                with pytest.MonkeyPatch.context() as patch:
                    if name == "no-permission":  # the tests run as root, where permissions deny nothing
                        Faults(patch).denied = {root / "exports/read-only"}
                    args = (
                        {}
                        if dest is None
                        else {
                            "dest": concrete(dest, ws).replace("{ROOT}", str(root)) if isinstance(dest, str) else dest
                        }
                    )
                    response = await app.run_job("procedure_export", **args)
                after = (entries(*plugin_dirs(ws)), entries(root, skip=(ws,)))
                out[name] = (
                    response.answer,
                    response.success,
                    changed_files(before[0], after[0]) - {str(ws / LOCK)},
                    changed_files(before[1], after[1]),
                )

    asyncio.run(run())
    return out, root


@pytest.mark.parametrize("case", EXPORT_CASES, ids=lambda c: c[0])
def test_export_refuses_every_hostile_destination_and_writes_nothing(export_results, case):
    results, root = export_results
    name, _, code, _ = case
    text, success, plugin_changes, around = results[name]
    answer = json.loads(text)
    assert isinstance(answer, dict) and SECRET not in text, text
    assert plugin_changes == set()  # the workspace is never written
    if not code:
        assert success and answer["status"] == "ok", answer
        assert sorted(i["path"] for i in answer["invalid"]) == ["procedures/HP-Upper.json", "procedures/escape.json"]
        written = {
            str(root / "exports/fine" / p)
            for p in ["INDEX.md", ".reme-procedure-export.json", *(f"{n}/SKILL.md" for n in EXPORTED)]
        }
        assert around == written
        assert all(SECRET not in Path(p).read_text() for p in written)  # the link to a secret is never followed
    else:
        assert not success and answer["error"]["code"] == code and answer["error"]["message"], answer
        assert around == set(), around


# -- the guard itself: ReMe's transfer jobs, and only this application's registry ------------------------------------

TRANSFER_JOBS = {name: {"backend": "base", "steps": [{"backend": f"{name}_step"}]} for name in ("upload", "download")}


async def test_transfer_jobs_cannot_reach_the_plugin_directories_and_still_work_elsewhere(make_app, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "upload.json").write_text(json.dumps(REBUILD))
    async with make_app(jobs=TRANSFER_JOBS, components=PLAIN_FILE_STORE) as app:
        ws = memory_of(app).workspace_path
        place_trajectory(ws)
        (ws / EXPERIENCE).write_text(json.dumps(REBUILD))
        (ws / "notes").mkdir()
        (ws / "notes/note.md").write_text("a note\n")
        before = (entries(*plugin_dirs(ws)), entries(outside))
        refused = [
            ("upload", {"src_path": str(outside / "upload.json"), "dst_path": "procedures/uploaded.json"}),
            ("upload", {"src_path": str(outside / "upload.json"), "dst_path": "session/trajectories/up.jsonl"}),
            ("upload", {"src_path": str(ws / LOCK), "dst_path": "notes/lock.txt"}),
            ("download", {"src_path": LOCK, "dst_path": str(outside / "lock.txt")}),
            ("download", {"src_path": "notes/note.md", "dst_path": str(ws / "procedures/downloaded.json")}),
            ("download", {"src_path": "notes/note.md", "dst_path": str(ws / TRAJECTORY), "overwrite": True}),
        ]
        for job, args in refused:
            response = await app.run_job(job, **args)
            answer = check_answer(response.answer, response.success, must_succeed=False)
            assert answer["error"]["code"] == "protected_path", (job, args, answer)
        assert (entries(*plugin_dirs(ws)), entries(outside)) == before
        allowed = [
            ("upload", {"src_path": str(outside / "upload.json"), "dst_path": "notes/uploaded.json"}),
            ("download", {"src_path": EXPERIENCE, "dst_path": str(outside / "experience.json")}),
        ]
        for job, args in allowed:
            response = await app.run_job(job, **args)
            assert response.success, (job, response.answer)
        assert json.loads((ws / "notes/uploaded.json").read_text()) == REBUILD
        assert json.loads((outside / "experience.json").read_text()) == REBUILD


async def test_the_guard_changes_only_this_applications_registry(make_app):
    from reme.components import R
    from reme.enumeration import ComponentEnum
    from reme_procedure_memory.storage.guard import PATH_ARGUMENTS, STORE_STEPS

    async with make_app() as app:
        registry = app.context.registry
        for backend in [*PATH_ARGUMENTS, *STORE_STEPS]:
            original = R.get(ComponentEnum.STEP, backend)
            if original is None:
                continue
            guarded = registry.get(ComponentEnum.STEP, backend)
            assert getattr(guarded, "procedure_guarded", False), backend
            assert issubclass(guarded, original) and guarded.__name__ == original.__name__
            assert not getattr(original, "procedure_guarded", False)  # ReMe's global registry is untouched
        assert registry.get(ComponentEnum.STEP, "search_step") is R.get(ComponentEnum.STEP, "search_step")

"""A rule's evidence count may not exceed the trajectories the experience cites (``operations/evidence.py``).

- the pure check: the new lines of a write whose "(N trajectories)" exceeds the cited number, a line left as it was
  never judged;
- on the real jobs: a create from one trajectory that counts two is refused (``evidence_overstated``, nothing is
  written); a second trajectory's update may raise the count to two, a second segment of the same one may not; a
  line an update leaves as it was (a hand edit) does not stop it.
"""

from __future__ import annotations

import json

from reme_procedure_memory.operations.evidence import EVIDENCE, overstated

from conftest import add_trajectory, call_tool, memory_of

PROCEDURE = "Procedure:\n1. create_ticket(title=<title>, priority=<1-5>)\n\nRules:\n"
ONE = '- "High priority" means priority=5 (1 trajectory).'
TWO = '- "High priority" means priority=5 (2 trajectories).'


def fields(rule: str) -> dict[str, str]:
    return {"description": "Open a ticket", "when-to-use": "A user asks for a ticket.", "content": PROCEDURE + rule}


def test_the_pattern_reads_a_count_as_the_prompt_writes_it():
    counts = [int(m.group(1)) for m in EVIDENCE.finditer("a (1 trajectory). b (3 trajectories; both). c (2 runs)")]
    assert counts == [1, 3]


def test_only_new_lines_counting_more_than_the_cited_trajectories_are_overstated():
    assert overstated({}, fields(TWO), 1) == [TWO]
    assert overstated({}, fields(TWO), 2) == []
    assert overstated({}, fields(ONE), 1) == []
    # a line the write leaves as it was is not judged; a changed one is
    assert overstated(fields(TWO), fields(TWO), 1) == []
    changed = TWO.replace("priority=5", "priority=5, verbatim")
    assert overstated(fields(TWO), fields(changed), 1) == [changed]
    # any field, each line once
    twice = {"description": "x (4 trajectories)", "when-to-use": "x (4 trajectories)", "content": "y"}
    assert overstated({}, twice, 3) == ["x (4 trajectories)"]


async def test_a_write_may_count_only_the_trajectories_its_experience_cites(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        first = memory.grants.begin_attempt("req", [add_trajectory(app)], segment=0)
        create = {"filename": "open-ticket.json", "description": "Open a ticket", "when_to_use": "A ticket."}
        ok, refused = await call_tool(app, first, "procedure_create", **create, content=PROCEDURE + TWO)
        assert not ok and refused["error"]["code"] == "evidence_overstated", refused
        assert refused["cited"] == 1 and refused["lines"] == [TWO]
        assert "cites 1 trajectory (this one included)" in refused["error"]["message"]
        assert memory.workspace.files.read("procedures/open-ticket.json") is None  # nothing was written
        ok, created = await call_tool(app, first, "procedure_create", **create, content=PROCEDURE + ONE)
        assert ok, created
        at = {"path": created["path"], "expected_version": created["version"]}
        # a later segment of the same trajectory: still one trajectory
        again = memory.grants.begin_attempt("req", [created["sources"][0]], segment=1)
        ok, refused = await call_tool(app, again, "procedure_update", **at, content=PROCEDURE + TWO)
        assert not ok and refused["error"]["code"] == "evidence_overstated", refused
        # a second trajectory's revision raises the count to two
        second = memory.grants.begin_attempt("req-2", [add_trajectory(app, "run-2.jsonl")], segment=0)
        ok, raised = await call_tool(app, second, "procedure_update", **at, content=PROCEDURE + TWO)
        assert ok and raised["status"] == "updated", raised
        stored = memory.reads.experience(created["path"])["experience"]
        assert TWO in stored["content"] and len(stored["sources"]) == 2


async def test_a_line_an_update_leaves_as_it_was_is_not_judged(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)], segment=0)
        ok, created = await call_tool(
            app,
            run,
            "procedure_create",
            filename="open-ticket.json",
            description="Open a ticket",
            when_to_use="A ticket.",
            content=PROCEDURE + ONE,
        )
        assert ok, created
        # an operator's hand edit claims more evidence than the file cites
        path = memory.workspace_path / created["path"]
        edited = {**json.loads(path.read_text(encoding="utf-8")), "content": PROCEDURE + TWO}
        path.write_text(json.dumps(edited), encoding="utf-8")
        ok, read = await call_tool(app, run, "procedure_read", path=created["path"])
        assert ok, read
        ok, updated = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            expected_version=read["version"],
            when_to_use="A user asks for a support ticket.",
        )
        assert ok and updated["status"] == "updated", updated

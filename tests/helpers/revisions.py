"""An extraction agent that revises one experience twice (the history tests: ``procedure_history``)."""

from __future__ import annotations

from helpers import summary

NAME = "rebuild-search-after-config-change.json"
PATH = f"procedures/{NAME}"
FIELDS = {
    "description": "Rebuild search after a configuration change",
    "when_to_use": "After changing search configuration when results appear stale",
    "content": "Rebuild the affected indexes.",
}
CONTENTS = [
    FIELDS["content"],
    "Rebuild the affected indexes.\nThen verify a known query.",
    "Rebuild the affected indexes.\nThen verify a known query.\nResume traffic only after it matches.",
]


def revising_agent():
    """Segment 1 creates the experience and revises it; segment 2 revises it again (its expected version read)."""

    async def segment_1(tools, prompt, kwargs):
        ok, created = await tools.call("procedure_create", filename=NAME, **FIELDS)
        assert ok, created
        ok, updated = await tools.call(
            "procedure_update", path=PATH, expected_version=created["version"], content=CONTENTS[1]
        )
        assert ok, updated
        return summary("Created and revised the rebuild experience in segment 1.")

    async def segment_2(tools, prompt, kwargs):
        ok, read = await tools.call("procedure_read", path=PATH)
        assert ok, read
        ok, updated = await tools.call(
            "procedure_update", path=PATH, expected_version=read["version"], content=CONTENTS[2]
        )
        assert ok, updated
        return "Revised it once more."

    return [segment_1, segment_2]

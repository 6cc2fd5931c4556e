"""The extraction agent of the fault matrix and the fault sweep: two segments of rollout steps (two creates and the
revision of an experience placed by hand)."""

from __future__ import annotations

import json

from reme_procedure_memory.schema import version_of

from helpers import summary
from helpers.corpus import corpus

REVISED = corpus()[0][0]  # the experience the import revises
CREATED = ["canary-rollout.json", "drain-queue.json"]


def agent() -> list:
    """The extraction agent of every run, clean or resumed: the same calls with the same operation keys (a resumed
    segment sends them again; the journal answers the ones already done). The revision names the version the file
    had before the import (as ``test_views.write_corpus`` placed it)."""
    original = version_of(json.dumps(corpus()[0][1], indent=2).encode())

    async def segment(tools, prompt, kwargs):
        number = int(prompt.split("segment ", 1)[1].split(" of", 1)[0])
        if number == 1:
            ok, ans = await tools.call(
                "procedure_create",
                filename=CREATED[0],
                operation_key="s1-1",
                description="Roll out behind a canary",
                when_to_use="Before a risky deployment of the rollout service",
                content="Rotate the canary deployment, watch errors, then promote.",
            )
            assert ok, ans
        elif number == 2:
            ok, ans = await tools.call(
                "procedure_update",
                path=f"procedures/{REVISED}",
                expected_version=original,
                operation_key="s2-1",
                content="Drain the rollout queue first, then proceed.",
            )
            assert ok, ans
            ok, ans = await tools.call(
                "procedure_create",
                filename=CREATED[1],
                operation_key="s2-2",
                description="Drain a queue",
                when_to_use="When the rollout queue backs up",
                content="Drain the rollout queue first, then restart its workers.",
            )
            assert ok, ans
        return summary(f"Read up to segment {number}: rollout steps.")

    return [segment] * 20

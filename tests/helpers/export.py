"""Two versions of a small library for export tests: v1 (alpha, beta, gamma), then v2 (alpha changed, beta deleted,
delta new, gamma unchanged) — every kind of write and removal an export rerun makes."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import experience_record, place_trajectory


def library_v1(ws: Path) -> None:
    place_trajectory(ws)
    (ws / "procedures").mkdir(parents=True, exist_ok=True)
    for name in ("alpha", "beta", "gamma"):
        (ws / f"procedures/{name}.json").write_text(json.dumps(experience_record(name, f"When {name}", "Do v1.")))


def library_v2(ws: Path) -> None:
    (ws / "procedures/alpha.json").write_text(json.dumps(experience_record("alpha", "When alpha", "Do v2.")))
    (ws / "procedures/beta.json").unlink()
    (ws / "procedures/delta.json").write_text(json.dumps(experience_record("delta", "When delta", "Do v2.")))

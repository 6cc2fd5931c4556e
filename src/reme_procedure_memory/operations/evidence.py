"""A rule's evidence: the count of trajectories a write says showed it may not exceed the trajectories the experience
cites.

The extraction prompt asks for each rule with its evidence, "(2 trajectories)": how many trajectories showed it. The
experience's ``sources`` are exactly the trajectories its writes came from (the runtime adds each run's), so a count
above their number is evidence that is not there, and a solver handed the rule weighs it. In the relay runs of
issue 31, 10 of 801 counts were such (two tickets of one trajectory written "(2 trajectories)", a count raised past
the sources on a revision of the same trajectory): ``benchmarks/RUNS.md``, eleventh session.

Contract:

* ``EVIDENCE`` finds a count as the prompt writes it: ``(N trajectory)`` / ``(N trajectories)``, also opening a
  longer parenthesis ("(3 trajectories; ...)").
* ``overstated(before, after, cited)`` (pure): the lines of ``after`` (the text fields as the write would leave them)
  that are not lines of ``before`` (as they are; nothing for a create) and carry a count above ``cited``, each once,
  in order. A line the write leaves as it was is not judged: a file edited by hand keeps what it says.
* ``check_evidence`` raises ``evidence_overstated`` for them (nothing is written), naming the lines and ``cited``.
"""

from __future__ import annotations

import re

from ..errors import ErrorCode, ProcedureError
from ..schema import TEXT_FIELDS

EVIDENCE = re.compile(r"\((\d+) trajector(?:y|ies)\b")


def lines_of(fields: dict[str, str]) -> list[str]:
    """The non-empty lines of the text fields (keyed as in the file), stripped, each once, in field order."""
    lines = (line.strip() for name in TEXT_FIELDS for line in fields.get(name, "").splitlines())
    return list(dict.fromkeys(line for line in lines if line))


def overstated(before: dict[str, str], after: dict[str, str], cited: int) -> list[str]:
    """The new lines of ``after`` whose evidence count exceeds ``cited`` (see the module docstring)."""
    kept = set(lines_of(before))
    return [
        line
        for line in lines_of(after)
        if line not in kept and any(int(m.group(1)) > cited for m in EVIDENCE.finditer(line))
    ]


def check_evidence(before: dict[str, str], after: dict[str, str], cited: int, rel: str) -> None:
    """Refuse a write whose new lines count more trajectories than the ``cited`` ones of ``rel``."""
    lines = overstated(before, after, cited)
    if not lines:
        return
    plural = "trajectory" if cited == 1 else "trajectories"
    shown = "; ".join(repr(line) for line in lines)
    raise ProcedureError(
        ErrorCode.EVIDENCE_OVERSTATED,
        f"Nothing was written: {rel} cites {cited} {plural} (this one included), and a rule's count is of "
        f"trajectories that showed it, not of cases within one: {shown}. Give each such rule the number of cited "
        f"trajectories that showed it (at most {cited}) and call again.",
        path=rel,
        cited=cited,
        lines=lines,
    )

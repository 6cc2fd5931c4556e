"""The secret guard of writes: no experience the agent writes may carry a credential (docs/decisions.md#secret-guard).

Contract: ``refuse_secrets(arguments)`` raises ``secret_detected`` when any text of the arguments (strings, also
inside lists and objects) holds a credential by the rules of ``credentials.py``; the answer names each field, the kind,
where it starts and the placeholder to write instead, and never repeats the secret or a part of it. The write steps
call it on every argument the agent wrote before validating them (so that no other answer echoes a secret); the write
path calls it on what would be stored: the fields it would write, the filename in its canonical spelling,
the fields an update keeps from the file (a hand edit), each field as an addition would leave it (``added``), and
``refuse_assembled`` on the fields read one after the other (an export and the search view join them). The rules
judge each text as a reader sees it (``credentials.find_secrets`` folds Unicode look-alikes first).
"""

from __future__ import annotations

from collections import deque
from itertools import permutations
from typing import Any

from ..errors import ErrorCode, ProcedureError
from ..credentials import KINDS, find_secrets


def secrets_in(arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """``{field, kind, offset}`` of every secret in the text of ``arguments`` (strings, also inside lists and
    objects: ``offset`` counts characters of the string that holds it)."""
    found = []
    queue = deque(arguments.items())  # in argument order, for the message
    while queue:
        name, value = queue.popleft()
        if isinstance(value, str):
            found += [{"field": name, "kind": f.kind, "offset": f.start} for f in find_secrets(value)]
        elif isinstance(value, (list, tuple)):
            queue.extend((name, item) for item in value)
        elif isinstance(value, dict):
            queue.extend((name, item) for item in value.values())
    return found


def refuse_secrets(arguments: dict[str, Any], already_in: str = "", added: bool = False) -> None:
    """``secret_detected`` if any text of ``arguments`` holds a credential: the answer names each field, the kind of
    secret, where it starts and the placeholder to write instead, and never repeats the secret. ``already_in``: the
    fields come from that experience file (an update keeps them), not from the call; ``added``: each is a field as
    an addition (named ``<field>_append``) would leave it."""
    where = (
        f" (kept from {already_in}: rewrite it in this update)"
        if already_in
        else " (the field with this addition)"
        if added
        else ""
    )
    refuse(secrets_in(arguments), where)


def refuse_assembled(fields: dict[str, str]) -> None:
    """``secret_detected`` if fields that hold no credential each hold one read one after the other (a key's BEGIN
    line ending one field and its body starting the next; a name ending one and its value starting the next): the
    field is named ``<first> + <second>`` and the offset counts characters of the two joined by a newline."""
    found = []
    for (first, text), (second, following) in permutations(fields.items(), 2):
        found += [
            {"field": f"{first} + {second}", "kind": f.kind, "offset": f.start}
            for f in find_secrets(f"{text}\n{following}")
        ]
    refuse(found, " (the fields read one after the other)")


def refuse(found: list[dict[str, Any]], where: str = "") -> None:
    """``secret_detected`` for ``found`` (``secrets_in``'s entries), if any."""
    if not found:
        return
    parts = "; ".join(f"`{s['field']}`{where} holds {KINDS[s['kind']].what} at character {s['offset']}" for s in found)
    placeholders = ", ".join(dict.fromkeys(KINDS[s["kind"]].placeholder for s in found))
    for secret in found:
        secret["placeholder"] = KINDS[secret["kind"]].placeholder
    raise ProcedureError(
        ErrorCode.SECRET_DETECTED,
        f"Nothing was written: {parts}. Experiences are served to every caller and agent, so they never hold "
        f"credentials: write a placeholder such as {placeholders} in its place and call again.",
        secrets=found,
    )

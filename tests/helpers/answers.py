"""Every answer a test gets is checked against what the package declares (conftest's ``run_job``): a failed answer is
``error_answer``'s envelope with a declared code, a successful one the shape ``answers.ANSWERS`` gives its job."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from reme_procedure_memory.answers import ANSWERS
from reme_procedure_memory.errors import ErrorCode


def shape_problems(value: Any, hint: Any, where: str = "answer") -> list[str]:
    """What in ``value`` does not fit ``hint``: a TypedDict's missing or undeclared keys (nested ones too), a
    ``Literal`` it is not one of, list items; other types are not checked."""
    if is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        hints = get_type_hints(hint)
        problems = [f"{where}: {key} missing" for key in sorted(hint.__required_keys__ - value.keys())]
        problems += [f"{where}: {key} not declared by {hint.__name__}" for key in sorted(value.keys() - hints.keys())]
        for key in sorted(value.keys() & hints.keys()):
            problems += shape_problems(value[key], hints[key], f"{where}.{key}")
        return problems
    origin = get_origin(hint)
    if origin is Literal:
        return [] if value in get_args(hint) else [f"{where}: {value!r} is not one of {get_args(hint)}"]
    if origin in (Union, types.UnionType):
        return min((shape_problems(value, option, where) for option in get_args(hint)), key=len)
    if origin is list and isinstance(value, list) and get_args(hint):
        return [p for n, item in enumerate(value) for p in shape_problems(item, get_args(hint)[0], f"{where}[{n}]")]
    return []


def answer_problems(job: str, answer: Any) -> list[str]:
    """What in a job's answer does not fit its declared shape (jobs the plugin does not define: only an error)."""
    if not isinstance(answer, dict):
        return []
    error = answer.get("error")
    if isinstance(error, dict) and "code" in error:
        problems = [] if error["code"] in set(ErrorCode) else [f"error code {error['code']!r} is not in ErrorCode"]
        if (
            list(error) != ["code", "message"]
            or next(iter(answer)) != "status"
            or list(answer)[-1] not in ("error", "repeated_call", "note")
        ):
            problems.append(f"not error_answer's envelope: {list(answer)} / {list(error)}")
        return problems
    shapes = ANSWERS.get(job)
    if shapes is None:
        return []
    return min((shape_problems(answer, shape) for shape in shapes), key=len)

"""Every answer code is declared once (``errors.ErrorCode``) and documented once (``docs/reference.md``); the code
never answers a code it does not declare."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import reme_procedure_memory
from reme_procedure_memory.errors import ErrorCode

from helpers import REPO

REFERENCE = REPO / "docs" / "reference.md"
PACKAGE = Path(reme_procedure_memory.__file__).parent


def section(title: str) -> str:
    """The reference's text under ``## <title>``, up to the next ``## `` heading."""
    parts = re.split(r"^## ", REFERENCE.read_text(), flags=re.MULTILINE)
    return next(p for p in parts[1:] if p.startswith(title + "\n"))


def documented() -> set[str]:
    """The codes of the reference's answer-code table."""
    return set(re.findall(r"^\| `([a-z_]+)` \|", section("Answer codes"), re.MULTILINE))


def test_the_reference_lists_exactly_the_declared_codes():
    assert documented() == ErrorCode.all()


def test_the_reference_lists_exactly_the_kinds_of_secrets_with_their_placeholders():
    from reme_procedure_memory.secrets import KINDS

    rows = re.findall(r"^\| `([a-z_]+)` \| .+ \| `(<[A-Z_]+>)` \|$", section("Secrets"), re.MULTILINE)
    assert rows == [(kind.name, kind.placeholder) for kind in KINDS.values()]


def test_no_code_is_a_string_literal_outside_errors_py():
    """An answer code is always ``ErrorCode.X``: a literal could drift from the table."""
    codes = ErrorCode.all()
    literals = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value in codes:
                literals.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.args[0].value}")
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value == "code" and isinstance(value, ast.Constant):
                        literals.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {value.value}")
    assert literals == []


def test_every_exception_class_is_declared_in_errors_py():
    classes = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(base, ast.Name) and (base.id.endswith(("Error", "Exception")) or base.id in (
                        "ProcedureError", "StartupError", "IndexFailure")) for base in node.bases):
                classes.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert classes == []

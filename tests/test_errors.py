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


DECLARED = frozenset(ErrorCode)


def test_the_reference_lists_exactly_the_declared_codes():
    assert documented() == DECLARED


def test_the_reference_lists_exactly_the_kinds_of_secrets_with_their_placeholders():
    from reme_procedure_memory.credentials import KINDS

    rows = re.findall(r"^\| `([a-z_]+)` \| .+ \| `(<[A-Z_]+>)` \|$", section("Secrets"), re.MULTILINE)
    assert rows == [(kind.name, kind.placeholder) for kind in KINDS.values()]


# Where the package hands over an answer code: the value of a ``"code"`` / ``"error_code"`` key (also assigned by
# subscript), an assignment to a name or attribute ``code``, an argument for a parameter annotated ``ErrorCode`` (of
# ``ProcedureError``, ``error_answer``, ``ExtractionStopped``, ...), a value returned by a function annotated to return
# one (``storage_failure``), and every ``ErrorCode.<NAME>``.
CODE_KEYS = ("code", "error_code")


def code_parameters(trees: list[ast.Module]) -> dict[str, list[tuple[int, str]]]:
    """callable name -> (positional index, name) of each of its parameters annotated ``ErrorCode`` (a class's
    ``__init__`` under the class's name, ``self`` not counted)."""
    found: dict[str, list[tuple[int, str]]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                named = [
                    (node.name, fn) for fn in node.body if isinstance(fn, ast.FunctionDef) and fn.name == "__init__"
                ]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
                named = [(node.name, node)]
            else:
                continue
            for name, fn in named:
                params = fn.args.posonlyargs + fn.args.args
                if params and params[0].arg in ("self", "cls"):
                    params = params[1:]
                coded = [
                    (i if i < len(params) else -1, p.arg)
                    for i, p in enumerate(params + fn.args.kwonlyargs)
                    if p.annotation is not None and "ErrorCode" in ast.unparse(p.annotation)
                ]
                if coded:
                    found.setdefault(name, []).extend(coded)
    return found


def target_name(target: ast.expr) -> str | None:
    """The name an assignment binds: ``code``, ``x.code``, ``x["code"]``."""
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
        return target.slice.value
    return None


def code_sites(tree: ast.Module, parameters: dict[str, list[tuple[int, str]]]) -> list[ast.expr]:
    """Every expression of ``tree`` that hands over an answer code (see ``CODE_KEYS`` above)."""
    sites: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            sites += [v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value in CODE_KEYS]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if target_name(target) in CODE_KEYS:
                    sites.append(node.value)
        elif isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            for index, name in parameters.get(callee, []):
                if 0 <= index < len(node.args) and not any(isinstance(a, ast.Starred) for a in node.args[: index + 1]):
                    sites.append(node.args[index])
                sites += [k.value for k in node.keywords if k.arg == name]
        elif (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.returns is not None
            and "ErrorCode" in ast.unparse(node.returns)
        ):
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and ret.value is not None:
                    sites.append(ret.value.elts[0] if isinstance(ret.value, ast.Tuple) else ret.value)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ErrorCode":
            sites.append(node)
    return sites


def answered_codes(source: str, parameters: dict[str, list[tuple[int, str]]] | None = None) -> list[tuple[int, str]]:
    """(line, code) of every code ``source`` hands over that can be read from the code itself: ``ErrorCode.<NAME>``
    (as ``ErrorCode.<NAME>`` when ``NAME`` is not a member), a string literal, or a name the module assigns a string
    literal or an ``ErrorCode`` member (``REFUSED = "protected_path"``). A code passed through (``exc.code``, a
    parameter) was read where it was made."""
    tree = ast.parse(source)
    if parameters is None:
        parameters = code_parameters([tree])
    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)

    def values(expr: ast.expr, seen: frozenset[str] = frozenset()) -> list[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "ErrorCode":
            member = ErrorCode.__members__.get(expr.attr)
            return [member.value if member is not None else f"ErrorCode.{expr.attr}"]
        if isinstance(expr, ast.IfExp):
            return values(expr.body, seen) + values(expr.orelse, seen)
        if isinstance(expr, ast.Name) and expr.id not in seen:
            return [v for value in assigned.get(expr.id, []) for v in values(value, seen | {expr.id})]
        return []

    return sorted({(site.lineno, code) for site in code_sites(tree, parameters) for code in values(site)})


def package_sources() -> dict[str, str]:
    return {str(path.relative_to(PACKAGE)): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_code_the_package_answers_is_declared():
    """Found by reading the code: a code answered anywhere (storage/guard.py and operator_errors.py too) must be a member of
    ``ErrorCode``, and so in the reference's table."""
    sources = package_sources()
    parameters = code_parameters([ast.parse(source) for source in sources.values()])
    assert {"ProcedureError", "ExtractionStopped", "error_answer"} <= set(parameters)  # the ways a code is handed over
    answered = {
        f"{path}:{line} {code}"
        for path, source in sources.items()
        for line, code in answered_codes(source, parameters)
        if code not in DECLARED
    }
    assert answered == set()


def test_the_scan_finds_a_code_that_is_not_declared():
    """The refusal of storage/guard.py as it was before ``protected_path`` was declared: the scan names it."""
    before = (
        'REFUSED = "protected_path"\n'
        "async def execute(self):\n"
        '    answer = {"status": "error", "error": {"code": REFUSED, "message": refusal}}\n'
    )
    assert [code for _, code in answered_codes(before)] == ["protected_path"]
    through_the_helper = "def refuse():\n    return error_answer(ErrorCode.PROTECTED_PATHS, 'no')\n"
    parameters = code_parameters([ast.parse(package_sources()["errors.py"])])
    assert [code for _, code in answered_codes(through_the_helper, parameters)] == ["ErrorCode.PROTECTED_PATHS"]
    assert "protected_path" in DECLARED  # declared now: the package's own scan passes


def test_no_code_is_a_string_literal_outside_errors_py():
    """An answer code is always ``ErrorCode.X``: a literal could drift from the table."""
    sources = package_sources()
    parameters = code_parameters([ast.parse(source) for source in sources.values()])
    literals = []
    for path, source in sources.items():
        if path == "errors.py":
            continue
        for node in code_sites(ast.parse(source), parameters):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                literals.append(f"{path}:{node.lineno} {node.value}")
        literals += [
            f"{path}:{node.lineno} {node.args[0].value}"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in DECLARED
        ]
    assert literals == []


def test_every_exception_class_is_declared_in_errors_py():
    classes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name)
                and (
                    base.id.endswith(("Error", "Exception"))
                    or base.id in ("ProcedureError", "StartupError", "IndexFailure")
                )
                for base in node.bases
            ):
                classes.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert classes == []

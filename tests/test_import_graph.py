"""The shape of the package: subpackages by concept, dependencies one way, no cycle, no private name
crossing a module. Every import of the package's own modules counts, also those under ``TYPE_CHECKING`` and inside
functions."""

from __future__ import annotations

import ast
from pathlib import Path

import reme_procedure_memory

PACKAGE = Path(reme_procedure_memory.__file__).parent
NAME = "reme_procedure_memory"
# Lower layers never import higher ones; modules of one layer (or one subpackage) may import each other, without cycle.
LAYERS = [
    ["", "errors"],  # the package itself holds only ``__version__`` and imports nothing
    [
        "schema",
        "answers",
        "credentials",
        "textfold",
        "reme_internals",
    ],  # reme_internals: ReMe's private names, for every floor
    ["settings", "tokens", "operator_errors", "interrupts"],
    ["storage"],
    ["search"],
    ["workspace"],
    ["operations"],
    ["extraction"],
    ["export"],
    ["component"],
    ["jobs"],
    ["store"],  # the face of the storage contracts
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(p for p in parts if p != "__init__")] = path
    return out


def imports(module: str, path: Path) -> list[tuple[str, list[str], int]]:
    """``(imported module, names, line)`` of every import of the package's own modules in ``module``."""
    is_package = path.name == "__init__.py"
    here = module.split(".") if module else []
    package = here if is_package else here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module == NAME or (node.module or "").startswith(NAME + "."):
                target = node.module[len(NAME) + 1 :]
            else:
                continue
            names = [alias.name for alias in node.names]
            submodules = [n for n in names if f"{target}.{n}".strip(".") in modules()]
            for sub in submodules:
                found.append((f"{target}.{sub}".strip("."), [], node.lineno))
            rest = [n for n in names if n not in submodules]
            if rest:
                found.append((target, rest, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(NAME + "."):
                    found.append((alias.name[len(NAME) + 1 :], [], node.lineno))
    return found


def graph() -> dict[str, set[str]]:
    return {m: {target for target, _, _ in imports(m, p) if target != m} for m, p in modules().items()}


def layer(module: str) -> int:
    return RANK[module.split(".")[0]]


def test_every_module_belongs_to_a_layer():
    assert [m for m in modules() if m.split(".")[0] not in RANK] == []
    assert graph()[""] == set()  # the package's __init__ imports none of its modules


def test_imports_go_down_the_layers_only():
    upward = [f"{m} -> {t}" for m, targets in graph().items() for t in targets if layer(t) > layer(m)]
    assert upward == []


def test_no_import_cycle_between_modules():
    edges = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(trail[trail.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_only_the_steps_import_the_component():
    importers = sorted(m for m, targets in graph().items() if "component" in targets)
    assert importers == ["jobs.steps"]


def test_no_module_imports_a_private_name_of_another():
    private = [
        f"{m}:{line} {target}.{name}"
        for m, path in modules().items()
        for target, names, line in imports(m, path)
        for name in names
        if name.startswith("_") and name != "__version__"
    ]
    assert private == []


def test_the_graph_sees_every_kind_of_import():
    """The checks above are only as good as the parser: it must see relative, absolute, module, TYPE_CHECKING and
    function-local imports."""
    edges = graph()
    assert "operations.reads" in edges["jobs.steps"]  # relative, from a sibling package
    assert "workspace" in edges["operations.writes"]  # under TYPE_CHECKING
    assert "extraction.prompt" in edges["extraction.loop"]  # ``from . import prompt``
    assert "storage.atomic" in edges["search.view_store.state"]  # ``from ...storage import atomic``

"""The seam to ReMe's private internals (``reme_internals.py``): every private ReMe name the plugin relies on still
holds in the installed ReMe, the check says what moved, and no other module reaches a private ReMe name past it."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

import reme_procedure_memory
from reme_procedure_memory import reme_internals
from reme_procedure_memory.reme_internals import PRIVATE, Private, problem
from test_import_graph import modules  # the package's modules by dotted name, as the layer check names them

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SEAM = "reme_internals"
FOREIGN = ("reme", "agentscope")
NAMES = {entry.name for entry in PRIVATE}


def test_every_private_reme_name_still_holds_in_the_installed_reme():
    moved = reme_internals.moved()
    assert moved == [], (
        f"{len(moved)} private name(s) of ReMe that the plugin relies on changed in the installed reme-ai "
        f"{version('reme-ai')}; adapt src/reme_procedure_memory/reme_internals.py (and the modules its table names "
        "as users) to:\n  " + "\n  ".join(moved)
    )


def _entry(owner: str, name: str) -> Private:
    return next(e for e in PRIVATE if e.owner == owner and e.name == name)


@pytest.mark.parametrize(
    "change, says",
    [
        ({"name": "_score_query_gone"}, "missing"),
        (
            {"expects": "(self, query_ids)"},
            "parameters (self, query_ids, candidate_idxs=None), expected (self, query_ids)",
        ),
        ({"kind": "staticmethod"}, "a function, expected a staticmethod"),
        ({"owner": "reme.components.keyword_index.bm25_index:BM25IndexGone"}, "its owner is gone"),
        ({"owner": "reme.components.no_such_module:BM25Index"}, "its owner is gone"),
    ],
)
def test_the_check_names_a_moved_method(change, says):
    entry = dataclasses.replace(_entry(reme_internals.BM25, "_score_query"), **change)
    found = problem(entry)
    assert found is not None and says in found and entry.name in found


def test_the_check_names_a_moved_attribute_or_global():
    doc_lens = _entry(reme_internals.BM25, "_doc_lens")
    assert problem(doc_lens) is None
    assert "no longer set by BM25Index.__init__" in problem(dataclasses.replace(doc_lens, name="_doc_lengths"))
    assert "holds a ndarray, expected dict" in problem(dataclasses.replace(doc_lens, expects=dict))
    batch = _entry("reme.components.file_store.local_file_store", "_VECTOR_SEARCH_BATCH_SIZE")
    assert problem(batch) is None
    assert "a int, not" in problem(dataclasses.replace(batch, expects=np.ndarray))
    assert problem(dataclasses.replace(batch, name="_VECTOR_BATCH")).endswith("_VECTOR_BATCH: missing")


def test_the_table_names_each_private_name_once_with_where_it_is():
    keys = [(e.owner, e.name) for e in PRIVATE]
    assert len(keys) == len(set(keys))
    kinds = {"method", "staticmethod", "classmethod", "function", "attribute", "global"}
    assert [e for e in PRIVATE if e.kind not in kinds or not e.at or not e.why] == []
    # a callable's parameters are as ``shape`` renders them; an attribute's or global's expectation is a type
    assert [e for e in PRIVATE if isinstance(e.expects, str) != (e.kind not in ("attribute", "global"))] == []


def test_placeholders_reading_fills_reme_placeholders_from_the_given_environment_only(monkeypatch):
    from reme.config import config_parser

    monkeypatch.setenv("PROCEDURE_SEAM_PROBE", "from the process")
    real_os = config_parser.os
    with reme_internals.placeholders_reading({"PROCEDURE_SEAM_PROBE": "given"}):
        assert config_parser.expand_env_vars({"a": "${PROCEDURE_SEAM_PROBE}"}) == {"a": "given"}
    assert config_parser.os is real_os
    with pytest.raises(RuntimeError), reme_internals.placeholders_reading({}):
        raise RuntimeError("restored on the way out too")
    assert config_parser.os is real_os
    assert config_parser.expand_env_vars({"a": "${PROCEDURE_SEAM_PROBE}"}) == {"a": "from the process"}


# -- nothing but the seam reaches a private ReMe name ------------------------------------------------------------------


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _foreign_reaches(where: str, tree: ast.AST) -> list[str]:
    """Private ReMe names this file reaches other than on its own (inherited) object: imports of a private name or
    module of ReMe or AgentScope, a table name read on another object, a table name spelled as a string."""
    found = []
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FOREIGN:
            private = [a.name for a in node.names if a.name.startswith("_")]
            if private or any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"{where}:{node.lineno} imports {node.module}.{', '.join(a.name for a in node.names)}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in NAMES
            and ast.unparse(node.value) not in ("self", "super()", "cls")
        ):
            found.append(f"{where}:{node.lineno} reaches {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in docs:
            found.append(f"{where}:{node.lineno} spells {node.value!r}")
    return found


def test_no_module_but_the_seam_reaches_a_private_reme_name_on_another_object():
    files = {m: p for m, p in modules().items() if m != SEAM}
    files.update({f"benchmarks/{p.relative_to(BENCHMARKS)}": p for p in BENCHMARKS.rglob("*.py")})
    found = [hit for where, path in files.items() for hit in _foreign_reaches(where, ast.parse(path.read_text()))]
    assert found == [], "route these through src/reme_procedure_memory/reme_internals.py:\n  " + "\n  ".join(found)


def test_the_static_scan_sees_each_kind_of_reach():
    source = textwrap.dedent("""
        from reme.steps.evolve._evolve import agent_reply_result_text
        from reme.components.file_store.local_file_store import _VECTOR_SEARCH_BATCH_SIZE
        tools = wrapper._make_tool(job)
        render = getattr(cls, "_format_relative")
        own = self._doc_lens
    """)
    found = _foreign_reaches("probe", ast.parse(source))
    assert [hit.split(" ", 1)[1] for hit in found] == [
        "imports reme.steps.evolve._evolve.agent_reply_result_text",
        "imports reme.components.file_store.local_file_store._VECTOR_SEARCH_BATCH_SIZE",
        "reaches wrapper._make_tool",
        "spells '_format_relative'",
    ]


def _inherited_private(cls: type) -> dict[str, str]:
    """Private names ``cls`` inherits from ReMe or AgentScope classes (class members and the attributes their code
    sets on ``self``), each with the ``module:Class`` that defines it first."""
    out: dict[str, str] = {}
    for base in cls.__mro__:
        if base.__module__.split(".")[0] not in FOREIGN:
            continue
        owner = f"{base.__module__}:{base.__qualname__}"
        names = [n for n in vars(base) if n.startswith("_") and not n.startswith("__")]
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(base)))
        except (OSError, TypeError):
            tree = ast.Module(body=[], type_ignores=[])
        names += [
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            and n.attr.startswith("_")
            and not n.attr.startswith("__")
        ]
        for name in names:
            out.setdefault(name, owner)
    return out


def _plugin_classes() -> dict[str, list[tuple[type, ast.ClassDef]]]:
    out: dict[str, list[tuple[type, ast.ClassDef]]] = {}
    for module, path in modules().items():
        loaded = importlib.import_module(f"{reme_procedure_memory.__name__}.{module}".rstrip("."))
        for node in ast.parse(path.read_text()).body:
            cls = getattr(loaded, node.name, None) if isinstance(node, ast.ClassDef) else None
            if inspect.isclass(cls):
                out.setdefault(module, []).append((cls, node))
    return out


def test_every_private_name_a_subclass_of_reme_names_is_in_the_table_with_its_module():
    """A plugin class that derives from a ReMe class (or is mixed into one) may name what it inherits, but each such
    private name must be declared in the seam's table for that module, so an upgrade check covers it."""
    classes = _plugin_classes()
    inherited: dict[type, dict[str, str]] = {}
    for cls, _ in (pair for pairs in classes.values() for pair in pairs):
        names = _inherited_private(cls)
        for part in cls.__mro__:  # a mixin of a ReMe subclass sees the ReMe object's private names too
            inherited.setdefault(part, {}).update(names)
    declared = {(e.name, user) for e in PRIVATE for user in e.users}
    undeclared, named = [], set()
    for module, pairs in classes.items():
        for cls, node in pairs:
            foreign = inherited.get(cls, {})
            used = {n.attr: n.lineno for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in foreign}
            used.update(
                {
                    n.name: n.lineno
                    for n in ast.walk(node)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in foreign
                }
            )
            for name, line in sorted(used.items()):
                named.add((name, module))
                if (name, module) not in declared:
                    undeclared.append(f"{module}:{line} {cls.__name__} names {foreign[name]}.{name}")
    assert undeclared == [], "declare these in reme_internals.PRIVATE:\n  " + "\n  ".join(undeclared)
    assert sorted(declared - named) == []  # a module the table lists as a user does name it

"""Every file path and module the project's prose cites exists: a description that names a moved or deleted
module fails here, naming the citing file and line and what is missing.

What is read (``sources``, ``prose``): the docstrings (every string that stands alone as a statement) and comments of
the Python files under ``src``, ``benchmarks``, ``tests`` and ``examples``, the Markdown of the root and ``docs``, every
``README.md``, ``pyproject.toml`` and ``plugin.yaml``.

What counts as a citation (``citations``), and where it must exist (``exists``):

* ``repo``: a token with a slash whose first segment is a top-level directory of the repository (``src/``,
  ``tests/``, ``docs/``, ``benchmarks/``, ``.ci/``, ...). It must exist under the root or under a directory that
  holds the citing file.
* ``inner``: a token with a slash whose first segment is the package or one of its directories, or a directory of
  Python files under ``tests`` or ``benchmarks`` (``search/``, ``storage/``, ``hostile/``, ``benchlib/``, ...), and
  whose last segment is a file name (``search/view_store/file_store.py``). It must exist under ``src``, the package, ``tests/``
  or ``benchmarks/``, or under a directory that holds the citing file (so a module of ``search`` may cite its
  ``view_store`` subpackage's ``record_codec.py`` by the path from ``search``).
* ``reme``: a token with a slash whose first segment is ``reme``: a path of the installed ReMe, which must exist there.
* ``name``: a bare module file name (``views.py``). Some file of the repository or of the installed ReMe must have it.
* ``module``: a dotted name under ``reme_procedure_memory`` (``reme_procedure_memory.jobs.steps:ProcedureReadStep``):
  the module must exist and have the attributes named after it.

A ``repo`` or ``inner`` path whose last segment reads as module and attribute (``tests/helpers.ScriptedAgent``) exists
when the module does and its source names the attribute.

Not citations of the repository, never checked: a token right after ``/``, ``.``, ``~``, ``:``, ``$``, ``<`` or ``>``
(absolute paths, ``../shared/...``, URLs, ``f3e7950:benchmarks/...`` git revisions, a placeholder's tail); a token
running into a placeholder or glob (``procedures/<name>.json``, ``tests/test_*.py``); a token whose first segment is
anything else (``procedures/...``, ``session/trajectories/...`` and ``metadata/...`` are paths in a workspace;
``FileStorage/format.py`` is another project's); a bare name of another kind (``SKILL.md``, ``default.yaml``, a
trajectory ``x.md``: files of a workspace, an export or another project as often as of this repository); the few
paths of other projects listed in ``ELSEWHERE``, and the directories removed on purpose listed in ``REMOVED``.
"""

from __future__ import annotations

import ast
import importlib
import io
import os
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest
import reme

import reme_procedure_memory

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(reme_procedure_memory.__file__).resolve().parent
REME = Path(reme.__file__).resolve().parent
# directories a relative citation may start from besides those that hold the citing file
BASES = (ROOT, PACKAGE.parent, PACKAGE, ROOT / "tests", ROOT / "benchmarks")
FILE_SUFFIXES = {".py", ".md", ".yaml", ".toml", ".json", ".jsonl", ".txt"}
SKIPPED_DIRS = {".venv", ".git", "__pycache__", "build", "dist", ".pytest_cache"}
# paths of other projects that look like this repository's
ELSEWHERE = {
    "docs/specification.mdx",  # the Agent Skills specification's source, in github agentskills/agentskills
}
# directories removed on purpose that the run log benchmarks/RUNS.md cites, saying where git keeps them
REMOVED = (
    "benchmarks/profile/",  # the profiling scripts of issue 9, kept at f3e7950
)

# A path-like token, never right after a character that makes it the tail of something else.
TOKEN = re.compile(r"(?<![\w./~:$<>{}@\\-])(?:[\w.-]+/)*[\w.-]+/?")
PLACEHOLDER_OR_GLOB = re.compile(r"[<{*\[]")
MODULE = re.compile(r"(?<![\w.])reme_procedure_memory(?:\.\w+)+(?::\w+)?")


def files(base: Path) -> list[Path]:
    """Every file under ``base``, outside ``SKIPPED_DIRS`` (never entered: a CI checkout holds its ``.venv``)."""
    found = []
    for directory, subdirs, names in os.walk(base):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS)
        found.extend(Path(directory) / name for name in sorted(names))
    return found


def sources() -> list[Path]:
    """The files whose prose is checked."""
    found = [ROOT / "pyproject.toml", ROOT / "plugin.yaml"]
    for path in files(ROOT):
        parts = path.relative_to(ROOT).parts
        documentation = path.suffix == ".md" and (len(parts) == 1 or parts[0] == "docs" or path.name == "README.md")
        if documentation or (path.suffix == ".py" and parts[0] in {"src", "benchmarks", "tests", "examples"}):
            found.append(path)
    return found


def prose(path: Path) -> list[tuple[int, str]]:
    """``(first line, text)`` of each piece of prose in ``path``: docstrings and comments of Python, else the file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return [(1, text)]
    lines = text.splitlines(keepends=True)
    out = [
        (node.lineno, "".join(lines[node.lineno - 1 : node.end_lineno]))  # the source, so lines count as in the file
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    ]
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    return out


@cache
def top_dirs() -> frozenset[str]:
    return frozenset(p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in SKIPPED_DIRS)


@cache
def inner_dirs() -> frozenset[str]:
    """Names of the package's directories and of the directories of Python files under tests and benchmarks (not
    their data: a fixture workspace's ``session`` or ``metadata`` is no directory of the code)."""
    package = {p.parent for p in files(PACKAGE)}
    code = {p.parent for base in (ROOT / "tests", ROOT / "benchmarks") for p in files(base) if p.suffix == ".py"}
    return frozenset(p.name for p in (package | code) - {ROOT / "tests", ROOT / "benchmarks"})


@cache
def file_names(base: Path) -> frozenset[str]:
    return frozenset(p.name for p in files(base) if p.suffix == ".py")


def citations(text: str) -> list[tuple[int, str, str]]:
    """``(line offset, token, kind)`` of every citation in ``text`` (the kinds are the module's docstring's)."""
    out = [(text.count("\n", 0, m.start()), m.group(), "module") for m in MODULE.finditer(text)]
    for match in TOKEN.finditer(text):
        token = match.group().rstrip(".-")
        if not token or token in ELSEWHERE or token.startswith(REMOVED) or PLACEHOLDER_OR_GLOB.match(text, match.end()):
            continue
        segments = token.rstrip("/").split("/")
        kind = None
        if len(segments) == 1:
            kind = "name" if token.endswith(".py") and len(token) > 3 else None
        elif segments[0] == "reme":
            kind = "reme"
        elif segments[0] in top_dirs():
            kind = "repo"
        elif segments[0] in inner_dirs() and Path(segments[-1]).suffix in FILE_SUFFIXES:
            kind = "inner"
        if kind:
            out.append((text.count("\n", 0, match.start()), token, kind))
    return sorted(out)


def _names(module: Path, attribute: str) -> bool:
    """Whether the module at ``module`` (a ``.py`` file or a package directory) exists and its source names
    ``attribute``."""
    sources = [module.with_suffix(".py")] if module.with_suffix(".py").is_file() else sorted(module.glob("*.py"))
    return any(re.search(rf"\b{re.escape(attribute)}\b", f.read_text(encoding="utf-8")) for f in sources)


def _module_exists(dotted: str) -> bool:
    name, _, attribute = dotted.partition(":")
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:] + ([attribute] if attribute else []):
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def exists(token: str, kind: str, citing: Path) -> bool:
    """Whether the citation ``token`` (of ``kind``) names something that exists, as cited from the file ``citing``."""
    if kind == "module":
        return _module_exists(token)
    relative = token.rstrip("/")
    if kind == "reme":
        return (REME.parent / relative).exists()
    if kind == "name":
        return token in file_names(ROOT) or token in file_names(REME)
    head, _, last = relative.rpartition("/")
    module, _, attribute = last.partition(".")
    as_attribute = bool(attribute) and f".{attribute}" not in FILE_SUFFIXES and "." not in attribute
    for base in (*BASES, *(p for p in citing.parents if ROOT in (p, *p.parents))):
        target = base / relative
        if target.is_dir() if token.endswith("/") else target.exists():
            return True
        if as_attribute and _names(base / head / module, attribute):
            return True
    return False


def missing(path: Path) -> list[str]:
    """``file:line: citation`` of each citation in ``path`` that names nothing."""
    where = path.relative_to(ROOT) if ROOT in path.parents else path
    return [
        f"{where}:{first_line + offset}: {token}"
        for first_line, text in prose(path)
        for offset, token, kind in citations(text)
        if not exists(token, kind, path)
    ]


def test_every_cited_path_exists():
    problems = [line for path in sources() for line in missing(path)]
    assert not problems, "cited but missing:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "text, cited",
    [
        ("the tokenizer (see keyword_tokenizer.py).", [("keyword_tokenizer.py", "name")]),
        (
            "search/view_store/file_store.py, view_store/record_codec.py",
            [("search/view_store/file_store.py", "inner"), ("view_store/record_codec.py", "inner")],
        ),
        ("reme_procedure_memory/jobs/steps.py", [("reme_procedure_memory/jobs/steps.py", "inner")]),
        ("run `python benchmarks/search.py --n 10000`", [("benchmarks/search.py", "repo")]),
        ("tests/helpers/cli.py::run\ndocs/guide.md#x.", [("tests/helpers/cli.py", "repo"), ("docs/guide.md", "repo")]),
        ("ReMe's reme/components/file_store/", [("reme/components/file_store/", "reme")]),
        ("``reme_procedure_memory.jobs.steps:ReadStep``", [("reme_procedure_memory.jobs.steps:ReadStep", "module")]),
        # not citations of the repository
        ("/tmp/tests/a.py ../shared/x.md https://github.com/a/b/blob/main/docs/x.md ~/src/y.py f3e7950:tests/z.py", []),
        ("procedures/<name>.json, session/trajectories/run.jsonl, tests/test_*.py, metadata/procedure/default/", []),
        ("search/read jobs; when_to_use/content; FileStorage/format.py; SKILL.md; default.yaml; e.g.; 1.5", []),
    ],
)
def test_citations_are_paths_and_only_paths(text, cited):
    assert [(token, kind) for _, token, kind in citations(text)] == cited


def test_a_missing_module_is_caught(tmp_path):
    views = PACKAGE / "search" / "views.py"
    assert exists("view_store/record_codec.py", "inner", views)  # from the citing file's directory
    assert exists("search/view_store/file_store.py", "inner", ROOT / "docs" / "guide.md")  # from the package
    assert exists("tests/helpers.ScriptedAgent", "repo", ROOT / "README.md")  # module and attribute
    assert exists("benchlib/corpus.py", "inner", ROOT / "tests" / "benchmarks" / "test_smokes.py")
    assert exists("reme_procedure_memory.search.view_store.file_store:ProcedureFileStore", "module", views)
    assert not exists("keyword_tokenizer.py", "name", views)
    assert not exists("search/view_store/viewsearch.py", "inner", views)
    assert exists("reme_procedure_memory/jobs/steps.py", "inner", views)
    assert not exists("reme_procedure_memory/steps.py", "inner", views)
    assert not exists("tests/helpers.py", "repo", views)
    assert not exists("tests/helpers.NoSuchDouble", "repo", views)
    assert exists("reme/components/file_store/local_file_store.py", "reme", views)
    assert not exists("reme/components/file_store/no_such_store.py", "reme", views)
    assert not exists("reme_procedure_memory.segmenter.segment", "module", views)
    assert not exists("reme_procedure_memory.search.view_store.file_store:NoSuchStore", "module", views)
    source = tmp_path / "cites.py"
    source.write_text(
        '"""Built by viewvectors.py\nfor search/view_store/."""\n\nX = "viewsearch.py"  # view_store/nowhere.py\n'
    )
    assert [line.split(":", 1)[1] for line in missing(source)] == ["1: viewvectors.py", "4: view_store/nowhere.py"]

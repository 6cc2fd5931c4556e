"""The seam between the plugin and ReMe's private internals: every private (underscore) name of ReMe 0.4.2.0 the
plugin relies on, in one table (``PRIVATE``), and the only code that reaches them on another object.

Contract:

* ``PRIVATE`` lists each private name with its owner (a class or module of the installed ``reme``), its kind, the
  parameters it is expected to take (or, for an attribute, the type of its value), where it is in ReMe 0.4.2.0, and
  which plugin modules name it themselves. ``moved()`` answers, against the installed ReMe, which entries no longer
  hold (``tests/test_reme_internals.py`` fails with that list): on a ReMe upgrade, this file is the one place to read.
* Private names reached on another object (a wrapper's job tools, a private module's function, a module global the
  resume patches, ReMe's stock fusion for the benchmark) are reached only through the accessors below; other modules
  import the accessor, never the name (the test scans ``src/`` and ``benchmarks/`` for it).
* A subclass of a ReMe class (``ProcedureBM25Index``, ``ProcedureFileGraph``, ``ProcedureFileStore``,
  ``SnowballTokenizer``, ``EmbeddedEmbedding``, the component) overrides ReMe's hooks under ReMe's names and
  reads the state it inherits directly: a Python override must carry ReMe's name, and the BM25 index is ReMe's code
  on ReMe's arrays, bit for bit, on the search hot path. Those names are in the table with the module that names them
  (``users``); the test refuses any other private name such a class inherits from ReMe and names.
* Accessors that return a bound method (``embedding_fits``) are fetched once per call by their users, never per
  document.
* Importing this module reads no private name and imports no private module of ReMe (the accessors do, when
  called), so ``moved()`` always runs and reports every change of an upgrade at once.

File:line references are to the installed package, ``site-packages/reme/`` of ReMe 0.4.2.0.
"""

from __future__ import annotations

import importlib
import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Iterator

import numpy as np
from reme.components.agent_wrapper.base_agent_wrapper import BaseAgentWrapper
from reme.components.file_store import local_file_store
from reme.config import config_parser
from reme.schema import FileChunk
from reme.steps.index.search import SearchStep

BM25 = "reme.components.keyword_index.bm25_index:BM25Index"
GRAPH = "reme.components.file_graph.local_file_graph:LocalFileGraph"
STORE = "reme.components.file_store.local_file_store:LocalFileStore"
TOKENIZER = "reme.components.tokenizer.base_tokenizer:BaseTokenizer"
COMPONENT = "reme.components.base_component:BaseComponent"
AS_EMBEDDING = "reme.components.as_embedding:BaseAsEmbedding"


@dataclass(frozen=True)
class Private:
    """One private ReMe name the plugin relies on.

    ``owner`` is ``module:Class`` or a module; ``kind`` one of ``method``, ``staticmethod``, ``classmethod``,
    ``function`` (a module's), ``attribute`` (set on every instance by the owner's ``__init__``) or ``global`` (a
    module's); ``expects`` the parameters as ``shape`` renders them (callables) or the value's type (the others);
    ``at`` where ReMe 0.4.2.0 defines it; ``users`` the plugin modules that name it (empty: only this module)."""

    owner: str
    name: str
    kind: str
    expects: str | type
    at: str
    why: str
    users: tuple[str, ...] = ()


def _bm25(name: str, kind: str, expects: str | type, line: int, why: str) -> Private:
    return Private(
        BM25, name, kind, expects, f"components/keyword_index/bm25_index.py:{line}", why, ("search.keyword.bm25",)
    )


def _graph(name: str, kind: str, expects: str | type, line: int, why: str) -> Private:
    return Private(
        GRAPH,
        name,
        kind,
        expects,
        f"components/file_graph/local_file_graph.py:{line}",
        why,
        ("search.view_store.graph",),
    )


PRIVATE: tuple[Private, ...] = (
    # -- ProcedureBM25Index: ReMe's BM25 on growable arrays (search/keyword/bm25.py) --------------------------------
    _bm25("_doc_ids", "attribute", list, 47, "slot -> document id; read by search, extended by add, set by restore"),
    _bm25("_doc_id_to_idx", "attribute", dict, 48, "live document id -> slot; rebuilt by restore"),
    _bm25("_doc_lens", "attribute", np.ndarray, 49, "tokens per slot; kept as a prefix view of a capacity buffer"),
    _bm25("_total_len", "attribute", int, 50, "sum of live lengths (avg_len); kept by the array hook and restore"),
    _bm25("_deleted", "attribute", np.ndarray, 51, "lazy-delete flag per slot; a prefix view of a capacity buffer"),
    _bm25("_doc_token_ids", "attribute", list, 52, "ReMe's per-document token arrays; the subclass keeps none"),
    _bm25("_posting_doc_idxs", "attribute", dict, 54, "token id -> slots; grown in place, snapshotted, restored"),
    _bm25("_posting_tfs", "attribute", dict, 55, "token id -> term frequencies, aligned with the slots"),
    _bm25("_idf_cache", "attribute", dict, 58, "ReMe's IDF memo; emptied when a snapshot is restored"),
    _bm25(
        "_tokenizer_fingerprint",
        "method",
        "(self)",
        97,
        "the tokenizer-settings digest a snapshot records, so a snapshot of other settings is rebuilt",
    ),
    _bm25("_get_idf", "method", "(self, token_id, n_docs=None)", 173, "ReMe's IDF, used by the scoring override"),
    _bm25(
        "_append_doc_arrays",
        "method",
        "(self, new_doc_ids, new_doc_lens, new_doc_token_ids)",
        202,
        "the hook add_docs calls (line 279) to append slots: overridden to append into capacity buffers",
    ),
    _bm25(
        "_extend_postings",
        "method",
        "(self, pending)",
        217,
        "the hook add_docs calls (line 280) to extend posting lists: overridden to append in place",
    ),
    Private(
        "reme.components.keyword_index.base_keyword_index:BaseKeywordIndex",
        "_tokenize",
        "method",
        "(self, text)",
        "components/keyword_index/base_keyword_index.py:35",
        "one text's tokens; the relevance self-score counts the query's distinct terms (relevance.py)",
        ("search.keyword.bm25",),
    ),
    _bm25(
        "_top_k",
        "method",
        "(self, scores, limit)",
        235,
        "the top-k retrieve calls (line 358): overridden to partition only the positive scores",
    ),
    _bm25(
        "_score_query",
        "method",
        "(self, query_ids, candidate_idxs=None)",
        289,
        "the scoring retrieve calls (line 357): overridden to cache long posting lists' contributions; the "
        "filtered case is ReMe's (super)",
    ),
    _bm25(
        "_compact_docs",
        "method",
        "(self, active_mask, old_tid_to_new)",
        526,
        "the hook optimize_index calls (line 559): overridden because the subclass keeps no per-document tokens",
    ),
    # -- ProcedureFileGraph: ReMe's local graph with packed nodes (search/view_store/graph.py) -------------------------
    _graph("_nodes", "attribute", dict, 18, "path -> node; holds packed tuples (ReMe's edges only test membership)"),
    _graph("_inverse", "attribute", dict, 19, "real link target -> sources; ReMe's edge bookkeeping"),
    _graph("_pending", "attribute", dict, 20, "virtual link target -> sources; ReMe's edge bookkeeping"),
    _graph("_graph_file", "attribute", Path, 21, "where ReMe's graph kept its file (an earlier version's leftover)"),
    _graph("_targets", "staticmethod", "(node)", 51, "a node's link targets"),
    _graph("_add_edge", "method", "(self, src, target)", 55, "ReMe's edge insertion (real or pending)"),
    _graph("_remove_edge", "method", "(self, src, target)", 59, "ReMe's edge removal"),
    _graph("_normalize_scope", "staticmethod", "(scope)", 67, "a link scope given as text, as the enum"),
    _graph("_scope_match", "method", "(self, target, scope)", 71, "whether a link target is in a scope"),
    # -- ProcedureFileStore: ReMe's local store (search/view_store/file_store.py, vectors.py, searches.py) ---
    Private(
        "reme.components.file_store.local_file_store",
        "_VECTOR_SEARCH_BATCH_SIZE",
        "global",
        int,
        "components/file_store/local_file_store.py:30",
        "the batch of ReMe's stock vector scan, which the filtered fallback repeats (vector_search_batch)",
    ),
    Private(
        STORE,
        "_embedding_dim_matches",
        "method",
        "(self, embedding)",
        "components/file_store/local_file_store.py:200",
        "whether a vector fits the active embedding model (embedding_fits)",
    ),
    Private(
        STORE,
        "_get_query_embedding",
        "method",
        "(self, query)",
        "components/file_store/local_file_store.py:236",
        "a query's vector, None while the provider or vector space is not current (query_embedding)",
    ),
    Private(
        STORE,
        "_start_embedding_backfill",
        "method",
        "(self, *, skip_health_check=False)",
        "components/file_store/local_file_store.py:370",
        "ReMe's background re-embedding: overridden to do nothing (the plugin embeds before it upserts)",
        ("search.view_store.file_store",),
    ),
    Private(
        STORE,
        "_delete_nodes",
        "method",
        "(self, nodes)",
        "components/file_store/local_file_store.py:914",
        "the hook delete calls with the resolved nodes: extended to drop their vectors",
        ("search.view_store.file_store",),
    ),
    Private(
        STORE,
        "_prepare_search_filter",
        "method",
        "(self, search_filter)",
        "components/file_store/local_file_store.py:1060",
        "a search filter as a chunk predicate (chunk_filter)",
    ),
    # -- component lifecycle hooks (ReMe's documented override points, underscore-named) ---------------------------
    Private(
        COMPONENT,
        "_start",
        "method",
        "(self)",
        "components/base_component.py:211",
        "the start hook: the component opens its workspace",
        ("component",),
    ),
    Private(
        COMPONENT,
        "_close",
        "method",
        "(self)",
        "components/base_component.py:214",
        "the close hook: the component flushes and releases its workspace",
        ("component",),
    ),
    Private(
        TOKENIZER,
        "_start",
        "method",
        "(self)",
        "components/tokenizer/base_tokenizer.py:33",
        "loads the stopwords; extended to reset the stem cache",
        ("search.keyword.tokenizer",),
    ),
    Private(
        TOKENIZER,
        "_close",
        "method",
        "(self)",
        "components/tokenizer/base_tokenizer.py:43",
        "clears the stopwords; extended to reset the stem cache",
        ("search.keyword.tokenizer",),
    ),
    Private(
        TOKENIZER,
        "_postprocess",
        "method",
        "(self, tokens, lower)",
        "components/tokenizer/base_tokenizer.py:55",
        "lowercase and stopword filter after splitting: overridden to stem",
        ("search.keyword.tokenizer",),
    ),
    Private(
        AS_EMBEDDING,
        "_start",
        "method",
        "(self)",
        "components/as_embedding/__init__.py:133",
        "defers the provider: overridden to load the embedded model in its thread",
        ("search.embedded_model",),
    ),
    Private(
        AS_EMBEDDING,
        "_ensure_model",
        "method",
        "(self)",
        "components/as_embedding/__init__.py:137",
        "builds the provider on first use: overridden to load the embedded model",
        ("search.embedded_model",),
    ),
    # -- reached on other objects, through the accessors below -------------------------------------------------------
    Private(
        "reme.steps.evolve._evolve",
        "agent_reply_result_text",
        "function",
        "(reply_result)",
        "steps/evolve/_evolve.py:34",
        "a reply's final text, as ReMe's evolve steps read it (reply_result_text)",
    ),
    Private(
        "reme.components.agent_wrapper.base_agent_wrapper:BaseAgentWrapper",
        "_resolve_job_tools",
        "method",
        "(self, job_tools)",
        "components/agent_wrapper/base_agent_wrapper.py:200",
        "job names to the application's jobs, as the wrapper resolves job_tools (resolve_jobs)",
    ),
    Private(
        "reme.components.agent_wrapper.as_agent_wrapper:AsAgentWrapper",
        "_make_tool",
        "classmethod",
        "(cls, job, tool_context_id=None, injected_job_kwargs=None)",
        "components/agent_wrapper/as_agent_wrapper.py:162",
        "a job as the AgentScope tool the wrapper would build, injected arguments hidden (job_tool)",
    ),
    Private(
        "reme.components.agent_wrapper.as_agent_wrapper:AsAgentWrapper",
        "_build_agent",
        "method",
        "(self, inputs, **kwargs)",
        "components/agent_wrapper/as_agent_wrapper.py:302",
        "builds the AgentScope agent of a reply from the reply's merged kwargs (:346-348) with AgentScope's default "
        "injection config (:330-339); quiet_agents wraps it so an extraction reply's agent injects no runtime state",
    ),
    Private(
        "reme.config.config_parser",
        "os",
        "global",
        ModuleType,
        "config/config_parser.py:5 (read at :34)",
        "the os module whose environ fills ${VAR} placeholders; patched by placeholders_reading",
    ),
    Private(
        "reme.steps.file_io.list:ListStep",
        "_format_relative",
        "staticmethod",
        "(files, workspace_dir)",
        "steps/file_io/list.py:88",
        "how the list step renders the files it walked; storage/guard.py overrides it (LISTED_FILES_HOOK) to "
        "leave the plugin's private files out",
    ),
    Private(
        "reme.steps.index.search:SearchStep",
        "_rrf_merge",
        "staticmethod",
        "(vector, keyword, vector_weight)",
        "steps/index/search.py:54",
        "ReMe's stock hybrid fusion, measured beside the plugin's by benchmarks/search.py (stock_rrf_merge)",
    ),
)


# -- accessors ------------------------------------------------------------------------------------------------------


LISTED_FILES_HOOK = "_format_relative"
"""The name of ``ListStep``'s static renderer of the files it walked (steps/file_io/list.py:88, called at :114);
``storage/guard.py`` overrides it in its guarded subclass to leave private files out of a listing."""


def vector_search_batch() -> int:
    """Chunks per batch of ReMe's stock ``vector_search`` scan (local_file_store.py:30, used at :1012), which the
    view's filtered vector search repeats so that its scores are ReMe's, batch for batch."""
    return local_file_store._VECTOR_SEARCH_BATCH_SIZE


def reply_result_text(result: dict) -> str:
    """The final text block of an agent reply result, as ReMe's evolve steps read it (steps/evolve/_evolve.py:34):
    the plugin reads an extraction reply exactly as ReMe's own agent jobs do, for every wrapper backend."""
    from reme.steps.evolve import _evolve  # a private module: imported when called (see the module docstring)

    return _evolve.agent_reply_result_text(result)


def resolve_jobs(wrapper: BaseAgentWrapper, names: list[str]) -> list:
    """The application's jobs named ``names``, resolved as the wrapper resolves its ``job_tools``
    (base_agent_wrapper.py:200; KeyError for an unknown name): the plugin builds the AgentScope toolkit itself when
    it adds ``finish_segment``, and must offer the same jobs."""
    return wrapper._resolve_job_tools(names)


def job_tool(wrapper, job, context_id: str | None, injected: dict[str, Any] | None):
    """``job`` as the AgentScope tool ``wrapper`` builds for it (as_agent_wrapper.py:162: the injected arguments are
    bound and hidden from the schema), so a toolkit the plugin assembles offers the job tools as ReMe would."""
    return wrapper._make_tool(job, context_id, injected)


QUIET_REPLY = "procedure_memory_quiet"
"""A reply kwarg (True) asking a wrapper ``quiet_agents`` prepared to build that reply's agent without runtime-state
reminders; ReMe hands a reply's merged kwargs to ``_build_agent`` (as_agent_wrapper.py:346-348), and that method
reads only the names it knows."""


def quiet_agents(wrapper) -> None:
    """Let ``wrapper`` (ReMe's AgentScope backend) build the agent of a reply given ``QUIET_REPLY`` without
    AgentScope's runtime-state reminders (``InjectionConfig.inject_runtime_state``, agentscope/agent/_agent.py:1415,
    on by default: ReMe passes no injection config, as_agent_wrapper.py:330-339): the current time, a context-length
    or a repeated-failure hint, re-sent with every later request of the reply. An extraction reads none of them (its
    budgets and its answers to repeated calls are the plugin's), and the time alone is ~80 tokens a request. Replies
    without the kwarg are built exactly as before; preparing a wrapper twice changes nothing."""
    if getattr(wrapper, "_procedure_memory_quiet", False):
        return
    build = wrapper._build_agent

    async def build_agent(inputs, **kwargs):
        agent, inputs = await build(inputs, **kwargs)
        if kwargs.get(QUIET_REPLY):
            agent.injection_config = agent.injection_config.model_copy(update={"inject_runtime_state": False})
        return agent, inputs

    wrapper._build_agent = build_agent
    wrapper._procedure_memory_quiet = True


async def query_embedding(store, query: str) -> np.ndarray | None:
    """``store``'s vector of ``query`` (local_file_store.py:236): None without an embedding store, while a rebuild
    of the vector space is pending, or when the provider fails (ReMe then marks it unhealthy). The view searches
    embed a query exactly as ReMe's ``vector_search`` does."""
    return await store._get_query_embedding(query)


def chunk_filter(store, search_filter: dict | None) -> Callable[[FileChunk], bool]:
    """``search_filter`` as ReMe's chunk predicate (local_file_store.py:1060), for the stock scan the filtered
    vector search falls back to."""
    return store._prepare_search_filter(search_filter)


def embedding_fits(store) -> Callable[[np.ndarray | None], bool]:
    """``store``'s test of whether a vector has the active embedding model's dimensions (local_file_store.py:200;
    False without an embedding store). A bound method: fetch it once per call, not per chunk."""
    return store._embedding_dim_matches


@contextmanager
def placeholders_reading(environ: dict[str, str]) -> Iterator[None]:
    """While inside, ReMe's configuration parser fills ``${VAR}`` placeholders from ``environ`` instead of the
    process environment (config_parser.py:34 reads the module global ``os``, line 5): the resume command resolves
    the configuration a clean shell would see without changing the process's environment. Not thread-safe: the
    caller runs it where nothing else parses a configuration."""
    real_os = config_parser.os
    config_parser.os = SimpleNamespace(environ=environ)  # only ``os.environ`` is read there
    try:
        yield
    finally:
        config_parser.os = real_os


def stock_rrf_merge(vector: list[FileChunk], keyword: list[FileChunk], vector_weight: float) -> list[FileChunk]:
    """ReMe's stock hybrid fusion of the ``search`` step (steps/index/search.py:54), which ``benchmarks/search.py``
    times beside the plugin's."""
    return SearchStep._rrf_merge(vector, keyword, vector_weight)


# -- the check against the installed ReMe ---------------------------------------------------------------------------


def shape(func: Callable) -> str:
    """A callable's parameters without annotations: ``(self, query_ids, candidate_idxs=None)``."""
    signature = inspect.signature(func)
    bare = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))


def owner_of(entry: Private) -> Any:
    """The installed class or module ``entry.owner`` names (ImportError or AttributeError when it is gone)."""
    module_name, _, qualname = entry.owner.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in filter(None, qualname.split(".")):
        found = getattr(found, part)
    return found


def problem(entry: Private) -> str | None:
    """What no longer holds of ``entry`` in the installed ReMe, or None. An ``attribute`` is looked up on an instance
    of its owner built without arguments (ReMe's components need none, and their ``__init__`` writes nothing)."""
    label = f"{entry.owner}.{entry.name}"
    try:
        owner = owner_of(entry)
    except (ImportError, AttributeError) as exc:
        return f"{label}: its owner is gone ({type(exc).__name__}: {exc})"
    if entry.kind == "attribute":
        return _attribute_problem(label, owner, entry)
    try:
        found = inspect.getattr_static(owner, entry.name)
    except AttributeError:
        return f"{label}: missing"
    if entry.kind == "global":
        return None if isinstance(found, entry.expects) else f"{label}: a {type(found).__name__}, not {entry.expects}"
    wanted = {
        "method": "function",
        "function": "function",
        "staticmethod": "staticmethod",
        "classmethod": "classmethod",
    }[entry.kind]
    if type(found).__name__ != wanted:
        return f"{label}: a {type(found).__name__}, expected a {wanted}"
    actual = shape(getattr(found, "__func__", found))
    return None if actual == entry.expects else f"{label}: parameters {actual}, expected {entry.expects}"


def _attribute_problem(label: str, owner: type, entry: Private) -> str | None:
    instance = owner()
    if entry.name not in vars(instance):
        return f"{label}: no longer set by {owner.__name__}.__init__"
    value = vars(instance)[entry.name]
    return (
        None
        if isinstance(value, entry.expects)
        else f"{label}: holds a {type(value).__name__}, expected {entry.expects.__name__}"
    )


def moved() -> list[str]:
    """One line per ``PRIVATE`` entry that the installed ReMe no longer matches (empty: every name holds)."""
    return [found for entry in PRIVATE if (found := problem(entry)) is not None]

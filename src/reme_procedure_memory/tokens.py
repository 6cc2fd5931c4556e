"""Exact token counting with a Hugging Face tokenizer: a hub name, a ``tokenizer.json`` file, or a directory.

There is no estimate anywhere: a tokenizer that cannot be loaded raises TokenizerUnavailable naming the source
and the fix. Loading and encoding are blocking; async callers run them in a thread (``acount``).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Protocol


class TokenizerUnavailable(RuntimeError):
    """The configured tokenizer could not be loaded; the message names the source and how to fix it."""


class Encoder(Protocol):
    """What the counter needs from a tokenizer: the number of tokens, and ids and character offsets of a text."""

    def count(self, text: str) -> int: ...

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]: ...


class _HFTokenizers:
    """A ``tokenizers.Tokenizer`` without truncation, padding or special tokens."""

    def __init__(self, tokenizer) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))  # no id/offset lists: the hot path

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets


class _Transformers:
    """A slow/fast ``transformers`` tokenizer, for directories that have no ``tokenizer.json``."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        if getattr(self._tokenizer, "is_fast", False):
            out = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            return list(out["input_ids"]), [tuple(o) for o in out["offset_mapping"]]
        ids = self._tokenizer.encode(text, add_special_tokens=False)
        return list(ids), []


def load_encoder(source: str) -> Encoder:
    """Load the tokenizer named by ``source``; raise TokenizerUnavailable on any failure."""
    path = Path(source).expanduser()
    try:
        if path.is_file():
            from tokenizers import Tokenizer

            return _HFTokenizers(Tokenizer.from_file(str(path)))
        if path.is_dir():
            if (path / "tokenizer.json").is_file():
                from tokenizers import Tokenizer

                return _HFTokenizers(Tokenizer.from_file(str(path / "tokenizer.json")))
            from transformers import AutoTokenizer  # only for directories without tokenizer.json

            return _Transformers(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
        if source.startswith(("/", ".", "~")) or "\\" in source:
            raise FileNotFoundError(f"no such file or directory: {source}")
        from tokenizers import Tokenizer

        return _HFTokenizers(Tokenizer.from_pretrained(source))
    except Exception as exc:  # any loader failure is the same actionable error
        raise TokenizerUnavailable(
            f"Tokenizer {source!r} is unavailable ({type(exc).__name__}: {exc}). Set PROCEDURE_TOKENIZER_SOURCE "
            "(components.procedure_memory.default.tokenizer_source) to a local tokenizer.json file or directory, "
            "or make the Hugging Face hub reachable, then run the same command again.",
        ) from exc


class TokenCounter:
    """Counts tokens exactly with one lazily loaded tokenizer; a failed load is retried on the next call."""

    def __init__(self, source: str, encoder: Encoder | None = None) -> None:
        self.source = source
        self._encoder = encoder
        self._lock = threading.Lock()

    @property
    def encoder(self) -> Encoder:
        """The loaded tokenizer (loads on first use; raises TokenizerUnavailable)."""
        with self._lock:
            if self._encoder is None:
                self._encoder = load_encoder(self.source)
            return self._encoder

    def count(self, text: str) -> int:
        """Exact number of tokens of ``text`` (no special tokens)."""
        if not text:
            return 0
        return self.encoder.count(text)

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and character offsets of ``text``."""
        return self.encoder.encode(text)

    def prefix_within(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` (cut at a token boundary) whose exact count is at most ``max_tokens``."""
        ids, offsets = self.encode(text)
        if len(ids) <= max_tokens:
            return text
        if offsets:
            prefix = text[:offsets[max_tokens][0]]
            while prefix and self.count(prefix) > max_tokens:  # counts are not additive at cut points
                prefix = prefix[: max(0, len(prefix) - max(1, len(prefix) // 50))]
            return prefix
        low, high = 0, len(text)  # no offsets (slow tokenizers): the longest prefix by binary search on characters
        while low < high:
            mid = (low + high + 1) // 2
            if self.count(text[:mid]) <= max_tokens:
                low = mid
            else:
                high = mid - 1
        return text[:low]

    async def acount(self, text: str) -> int:
        """``count`` off the event loop."""
        return await asyncio.to_thread(self.count, text)

    async def acount_many(self, texts: list[str]) -> list[int]:
        """Counts of several texts, off the event loop."""
        return await asyncio.to_thread(lambda: [self.count(t) for t in texts])

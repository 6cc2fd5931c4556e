"""The BM25 tokenizer of both views: ReMe's ``regex`` tokenizer and stopwords, then Snowball English stems.

``SnowballTokenizer`` (backend ``procedure_snowball``, registered through ``plugin.yaml``) keeps ReMe's
``RegexTokenizer`` rules unchanged — each CJK character is a token; other words match ``\\b\\w\\w+\\b`` (so
``snake_case`` and ``camelCase`` identifiers stay one token, dotted names split at the dots, numbers of two or more
characters are kept); tokens are lowercased and ReMe's stopwords dropped — and then replaces every remaining token by
its Snowball English stem (``deploying``, ``deployed``, ``deployment`` -> ``deploy``). BM25 tokenizes documents and
queries with the same component, so both sides are stemmed alike.

Stems come from PyStemmer (the Snowball project's C implementation). Each distinct raw token is lowercased, filtered
and stemmed once and remembered (``TERM_CACHE_SIZE`` entries, then the memo starts over): the vocabulary of a corpus
is small against its token count, so tokenizing runs at about the speed of the plain regex tokenizer.

``identity`` names what decides the tokens (rules version, algorithm, stemmer library version). The views stamp it
on every record, and a workspace indexed by another tokenizer is rebuilt from the experience files at start.
"""

from __future__ import annotations

from importlib.metadata import version

import Stemmer
from reme.components.tokenizer import BaseTokenizer, RegexTokenizer

from ...storage.format import TOKENIZER_RULES

ALGORITHM = "english"
TERM_CACHE_SIZE = 1 << 18  # distinct raw tokens remembered (~40 MB at most); identifiers and ids make it unbounded
IDENTITY = f"procedure_snowball/{TOKENIZER_RULES} snowball-{ALGORITHM} PyStemmer-{version('PyStemmer')}"


class _Terms(dict):
    """raw token -> its term ("" for a stopword); computed on first sight by ``make``."""

    __slots__ = ("make",)

    def __missing__(self, raw: str) -> str:
        if len(self) >= TERM_CACHE_SIZE:
            self.clear()
        term = self[raw] = self.make(raw)
        return term


class SnowballTokenizer(RegexTokenizer):
    """ReMe's regex tokenizer and stopword filter, then Snowball English stemming (see the module docstring)."""

    identity = IDENTITY  # what decides the tokens; part of every view record's metadata

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._stemmer = Stemmer.Stemmer(ALGORITHM, 0)  # 0: no internal cache, ``_Terms`` memoises whole terms
        self._terms = _Terms()
        self._terms.make = self._term

    def stem(self, word: str) -> str:
        """The Snowball English stem of one lowercase word."""
        return self._stemmer.stemWord(word)

    def _term(self, raw: str) -> str:
        token = raw.lower()
        if self.filter_stopwords and token in self.stopwords:
            return ""
        return self.stem(token)

    async def _start(self) -> None:
        await super()._start()
        self._terms.clear()  # the stopwords may have changed

    async def _close(self) -> None:
        await super()._close()
        self._terms.clear()

    def _postprocess(self, tokens: list[str], lower: bool) -> list[str]:
        """Lowercase, drop stopwords, stem. ``lower=False`` keeps ReMe's case-sensitive filter and stems the rest
        as they are (BM25 always lowercases)."""
        if not lower:
            return [self.stem(t) for t in super()._postprocess(tokens, lower)]
        terms = self._terms
        return [term for term in map(terms.__getitem__, tokens) if term]


def tokenizer_identity(tokenizer: BaseTokenizer | None, fingerprint: str) -> str:
    """A view's tokenizer identity: the tokenizer's own ``identity`` (else its class) and ReMe's BM25 fingerprint
    of its settings (class, stopword filter, stopwords file)."""
    if tokenizer is None:
        return "none"
    own = getattr(tokenizer, "identity", None) or type(tokenizer).__qualname__
    return f"{own} bm25-{fingerprint}"

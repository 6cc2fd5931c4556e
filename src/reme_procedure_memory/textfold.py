"""Text as a reader sees it: ``fold(text)`` undoes the spellings that hide a word from a rule but not from a reader.

Contract: a pure function of one string, no state beyond a per-character cache, no I/O. The folded text is each
character's NFKC form (fullwidth ``ｐａｓｓ`` → ``pass``, a ligature ``ﬁ`` → ``fi``, a no-break space → a space), with
format and combining characters removed (zero-width spaces and joiners, soft hyphens, bidirectional controls,
variation selectors) and letters that look like Latin ones folded to them (Cyrillic ``а``, Greek ``ο``, dashes,
typographic quotes: ``CONFUSABLES``). A JSON escape ``\\uXXXX`` of such a character counts as the character (a
JSONL line written with ``ensure_ascii`` shows a zero-width space as ``\\u200b``); other escapes stay as they are.

The folded text is only ever judged, never stored or served: ``Folded.start`` and ``Folded.end`` map a span of it back
to the original characters (a span that starts or ends inside a character's expansion covers that whole character;
characters removed inside a span are inside the original span too). ASCII text without ``\\u`` escapes is its own
folding (``fold`` answers None), at the cost of two C-speed scans.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

# Letters and signs of other scripts that a reader takes for ASCII (the common subset of Unicode's confusables.txt
# for Latin letters, digits and the punctuation the rules use)
CONFUSABLES = str.maketrans(
    {
        **dict(zip("аеорсухѕіјԁһӏԛԝӀ", "aeopcyxsijdhlqwl")),  # Cyrillic lowercase
        **dict(zip("АВЕКМНОРСТХУЅІЈԚԜ", "ABEKMHOPCTXYSIJQW")),  # Cyrillic uppercase
        **dict(zip("αβεικνορτυχ", "abeikvoptux")),  # Greek lowercase
        **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX")),  # Greek uppercase
        **dict(zip("ɑɡıȷօսլ", "agijoul")),  # Latin and Armenian look-alikes
        **dict.fromkeys("‐‑‒–—―−⁃", "-"),
        **dict.fromkeys("‘’‚‛′", "'"),
        **dict.fromkeys("“”„‟″", '"'),
        **dict.fromkeys("∶꞉ː", ":"),
        "⁄": "/",
        "∕": "/",
    }
)
_DROPPED = frozenset({"Cf", "Mn", "Me"})  # format characters (zero-width, bidi, tags), combining marks


class _Cache(dict):
    """code point -> its folding (computed once per character)."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if code < 0x80:
            folded = char
        else:
            nfkc = unicodedata.normalize("NFKC", char)
            folded = "".join(c for c in nfkc if unicodedata.category(c) not in _DROPPED).translate(CONFUSABLES)
            if len(folded) != 1:
                _UNEVEN.add(char)
        self[code] = folded
        return folded


_FOLDING = _Cache()
_UNEVEN: set[str] = set()  # characters whose folding is not exactly one character
# (two scans: a single character class scans fastest, and an escape starts with a literal)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}")


@dataclass(frozen=True)
class Folded:
    """The folded ``text`` and where its characters come from: from ``norm[i]`` on (up to ``norm[i + 1]``), folded
    position ``n`` is original position ``orig[i] + n - norm[i]``, never reaching ``orig[i + 1]`` (before
    ``norm[0]`` the positions are the same). ``norm`` never decreases: a removed character repeats a position."""

    text: str
    length: int  # of the original
    norm: list[int]
    orig: list[int]

    def _segment(self, position: int) -> tuple[int, int, int, float]:
        """(folded start, original start, original limit, folded limit) of the segment holding ``position``."""
        i = bisect.bisect_right(self.norm, position) - 1
        nxt = i + 1 < len(self.norm)
        limit, next_norm = (self.orig[i + 1], self.norm[i + 1]) if nxt else (self.length, float("inf"))
        if i < 0:  # before the first change: the same positions
            return 0, 0, limit, next_norm
        return self.norm[i], self.orig[i], limit, next_norm

    def start(self, position: int) -> int:
        """The original position of folded position ``position`` (a span's start)."""
        norm, orig, limit, _ = self._segment(position)
        return min(orig + position - norm, max(orig, limit - 1))

    def end(self, position: int) -> int:
        """The original end of a span that ends at folded position ``position``: after the original of its last
        character (and of the characters removed right after it)."""
        if position <= 0:
            return 0
        norm, orig, limit, next_norm = self._segment(position - 1)
        return limit if position >= next_norm else min(orig + position - norm, limit)


def fold(text: str) -> Folded | None:
    """``text`` folded (see the module docstring), or None when that is ``text`` itself."""
    if text.isascii() and "\\u" not in text:
        return None
    pieces: list[str] = []
    norm: list[int] = []
    orig: list[int] = []
    position = shift = 0  # original position copied up to; folded length minus original length so far

    def mark(n: int, o: int) -> None:  # a removed character marks the same folded position twice: both are kept
        norm.append(n)
        orig.append(o)

    escapes = _ESCAPE.finditer(text) if "\\u" in text else ()
    runs = () if text.isascii() else _NON_ASCII.finditer(text)
    for match in sorted([*escapes, *runs], key=lambda m: m.start()):
        run, at = match.group(), match.start()
        if run.startswith("\\u"):
            char = chr(int(run[2:], 16))
            folded = _FOLDING[ord(char)]
            if folded == char:
                continue  # an escape of an ordinary character stays as written
            replaced = [(at, len(run), folded)]
        else:
            folded = run.translate(_FOLDING)
            if folded == run:
                continue
            if len(folded) == len(run) and _UNEVEN.isdisjoint(run):
                pieces += [text[position:at], folded]  # one character for one: positions do not move
                position = match.end()
                continue
            replaced = [(at + i, 1, _FOLDING[ord(c)]) for i, c in enumerate(run)]
        for where, size, value in replaced:
            if value == text[where : where + size]:
                continue
            pieces += [text[position:where], value]
            position = where + size
            if size != 1 or len(value) != 1:  # the positions after it move
                mark(where + shift, where)
                shift += len(value) - size
                mark(where + size + shift, where + size)
    if not pieces:
        return None
    pieces.append(text[position:])
    folded_text = "".join(pieces)
    return Folded(folded_text, len(text), norm, orig)

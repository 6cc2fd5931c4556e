"""The segmenter (property tests: lossless, within budget, line boundaries) and exact token counting."""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from reme_procedure_memory.errors import SegmentationError, TokenizerUnavailable
from reme_procedure_memory.extraction.segmenter import segment
from reme_procedure_memory.storage.format import SEGMENTER_VERSION
from reme_procedure_memory.tokens import TokenCounter, load_encoder

from helpers import FIXTURES


class CountingCounter:
    """A fake token counter (allowed where speed matters): one token per 1-3 characters, deterministic."""

    def __init__(self):
        self.calls = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        # multi-byte characters cost more, like real byte-level BPE
        return sum(1 if ch.isascii() else 2 for ch in text) // 2 + (1 if text else 0)


def check(text, bounds, budget, count):
    assert "".join(text[s:e] for s, e in bounds) == text
    assert all(s < e for s, e in bounds)
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(len(bounds) - 1))
    assert all(count(text[s:e]) <= budget for s, e in bounds)


texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from(["\n", "\n", " ", "é", "部", "🙂"]),
    max_size=3000,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, st.integers(min_value=4, max_value=400))
def test_segments_are_lossless_and_within_budget(text, budget):
    count = CountingCounter()
    bounds = segment(text, budget, count)
    check(text, bounds, budget, count)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=20), st.integers(min_value=50, max_value=3000), st.integers(8, 200))
def test_single_lines_longer_than_a_segment_are_split(lines, width, budget):
    text = "\n".join("x" * width for _ in range(lines))
    count = CountingCounter()
    check(text, segment(text, budget, count), budget, count)


def test_whole_lines_are_preferred_in_the_latter_half():
    lines = [json.dumps({"turn": i, "text": "word " * (i % 7 + 3)}) + "\n" for i in range(300)]
    text = "".join(lines)
    count = CountingCounter()
    bounds = segment(text, 200, count)
    assert len(bounds) > 5
    assert all(text[e - 1] == "\n" for _, e in bounds)  # every cut falls after a whole record here
    fills = [count(text[s:e]) / 200 for s, e in bounds[:-1]]
    assert min(fills) > 0.45 and max(fills) <= 1.0  # bounded candidates that need not fill the budget


def test_density_prediction_keeps_counting_close_to_one_pass():
    text = "".join(f"line {i}: " + "abc " * 20 + "\n" for i in range(5000))
    count = CountingCounter()
    bounds = segment(text, 1000, count)
    assert count.calls <= len(bounds) * 2 + 2  # mostly one exact check per emitted segment


def test_a_character_over_the_budget_is_an_explicit_error():
    with pytest.raises(SegmentationError, match="offset 0"):
        segment("🙂🙂", 1, lambda t: 5 * len(t))
    with pytest.raises(ValueError):
        segment("abc", 0, len)
    assert segment("", 10, len) == []


def test_version_is_part_of_the_contract():
    assert SEGMENTER_VERSION == "1"


def test_word_tokenizer_counts_exactly(word_tokenizer):
    counter = TokenCounter(str(word_tokenizer))
    assert counter.count("Rebuild the index, then verify.") == 7
    assert counter.count("") == 0
    assert counter.prefix_within("a b c d e f", 3) == "a b c "  # cut where the 4th token starts


def test_tokenizer_sources_file_directory_and_failures(word_tokenizer, tmp_path):
    assert TokenCounter(str(word_tokenizer.parent)).count("a b") == 2  # directory with tokenizer.json
    with pytest.raises(TokenizerUnavailable, match="PROCEDURE_TOKENIZER_SOURCE"):
        load_encoder(str(tmp_path / "missing.json"))
    with pytest.raises(TokenizerUnavailable, match="no-such/tokenizer"):
        load_encoder("no-such/tokenizer")  # HF_HUB_OFFLINE=1: no wait on the network, no estimate
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(TokenizerUnavailable):
        load_encoder(str(empty_dir))


def test_exact_counts_with_the_real_qwen3_tokenizer(qwen3_tokenizer):
    counter = TokenCounter(str(qwen3_tokenizer))
    ids, _ = counter.encode("Hello world")
    assert ids == [9707, 1879]
    assert counter.count("<|im_start|>") == 1  # added tokens count as one token
    text = (FIXTURES / "experiences.jsonl").read_text() * 3
    bounds = segment(text, 2000, counter.count)
    check(text, bounds, 2000, counter.count)
    assert sum(counter.count(text[s:e]) for s, e in bounds) >= counter.count(text) - len(bounds)
    assert all(counter.count(text[s:e]) > 1000 for s, e in bounds[:-1])


def test_directory_without_tokenizer_json_loads_through_transformers(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n")
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer", "do_lower_case": true}')
    counter = TokenCounter(str(tmp_path))
    assert counter.count("hello world hello") == 3
    assert counter.encode("hello world")[0] == [4, 5]


# -- counts that add up at line starts (tokens.separates_lines), reused instead of re-encoding ----------------------

TRAJECTORIES = FIXTURES / "trajectories"


@pytest.fixture(scope="module")
def qwen(qwen3_tokenizer):
    return TokenCounter(str(qwen3_tokenizer))


def qwen_variant(qwen3_tokenizer, change) -> TokenCounter:
    """The real Qwen3 tokenizer with one component changed by ``change(tokenizer_json_dict)``."""
    from reme_procedure_memory.tokens import _HFTokenizers
    from tokenizers import Tokenizer

    data = json.loads(qwen3_tokenizer.read_text(encoding="utf-8"))
    change(data)
    return TokenCounter("variant", encoder=_HFTokenizers(Tokenizer.from_str(json.dumps(data))))


@pytest.mark.slow
def test_only_tokenizers_built_like_qwen_separate_lines(qwen, qwen3_tokenizer, word_tokenizer):
    from reme_procedure_memory.tokens import separates_lines

    assert qwen.separates_lines
    assert not TokenCounter(str(word_tokenizer)).separates_lines  # another pre-tokenizer: always encoded whole

    def other_regex(d):
        d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\S+"

    def newline_token(d):
        d["added_tokens"].append(
            {
                "id": 151700,
                "content": "}\n{",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )

    def stripping_token(d):
        d["added_tokens"][0]["lstrip"] = True

    def nfkc(d):
        d["normalizer"] = {"type": "NFKC"}

    for change in (other_regex, newline_token, stripping_token, nfkc):
        assert not qwen_variant(qwen3_tokenizer, change).separates_lines, change.__name__
    assert separates_lines(object()) is False  # anything that cannot be inspected


# Pieces that exercise every alternative of the pre-tokenizer regex, NFC and added tokens around a line start.
PIECES = [
    "\n",
    "\n",
    "\r\n",
    " ",
    "  ",
    "\t",
    "'s",
    "'ll",
    "abc",
    "Zw",
    "é",
    "e\u0301",
    "\u0301",
    "部署",
    "🙂",
    "42",
    "7",
    "{",
    "}",
    '"',
    ":",
    ",",
    "...",
    "<think>",
    "</tool_call>",
    "<|im_end|>",
    "\\n",
    "#",
    "-",
    "x_y",
]
left_texts = st.lists(st.sampled_from(PIECES), max_size=12).map(lambda p: "".join(p) + "\n")
right_texts = st.tuples(
    st.sampled_from([chr(c) for c in range(0x21, 0x7F)]), st.lists(st.sampled_from(PIECES), max_size=12)
).map(lambda t: t[0] + "".join(t[1]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(left_texts, right_texts)
def test_qwen3_tokens_of_a_line_start_join_are_the_tokens_of_both_sides(qwen, left, right):
    from reme_procedure_memory.tokens import is_line_start

    assert is_line_start(left + right, len(left))
    assert qwen.encode(left + right)[0] == qwen.encode(left)[0] + qwen.encode(right)[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=60), st.data())
def test_count_around_known_spans_is_exact(qwen, pieces, data):
    text = "".join(pieces)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), min_size=2, max_size=6))))
    spans = [(a, b) for a, b in zip(cuts[::2], cuts[1::2]) if a < b]  # disjoint spans
    known = [(a, b, qwen.count(text[a:b])) for a, b in spans]
    assert qwen.count_around(text, known) == qwen.count(text)


@pytest.mark.parametrize("name", sorted(p.name for p in TRAJECTORIES.iterdir()))
def test_span_counter_segments_exactly_like_direct_counts_and_encodes_each_character_about_once(qwen, name):
    from reme_procedure_memory.extraction.segmenter import segment_counted
    from reme_procedure_memory.tokens import SpanCounter

    text = (TRAJECTORIES / name).read_text(encoding="utf-8") * 8
    budget = 3000  # longer than the longest line, as segments of 98,304 tokens are in practice
    spans = SpanCounter(qwen, text)
    counted = segment_counted(text, budget, spans.count)
    assert [(s, e) for s, e, _ in counted] == segment(text, budget, qwen.count)  # the same boundaries
    assert [t for _, _, t in counted] == [qwen.count(text[s:e]) for s, e, _ in counted]  # the exact counts
    # the sample, then about once per character (1.66x with one encode per count call)
    assert spans.encoded_chars <= min(len(text), 65536) + 1.1 * len(text), spans.encoded_chars / len(text)


def test_span_counter_counts_any_span_exactly(qwen):
    import random

    from reme_procedure_memory.tokens import SpanCounter, is_line_start

    text = "".join((TRAJECTORIES / name).read_text(encoding="utf-8") for name in sorted(os.listdir(TRAJECTORIES)))
    spans = SpanCounter(qwen, text)
    cuts = [0, len(text)] + [i for i in range(len(text)) if is_line_start(text, i)]
    rng = random.Random(7)
    for _ in range(60):  # line starts, arbitrary offsets, repeated and overlapping spans
        a, b = sorted(rng.sample(cuts, 2) if rng.random() < 0.7 else rng.sample(range(len(text) + 1), 2))
        assert spans.count(a, b) == qwen.count(text[a:b])


def test_span_counter_without_a_line_separating_tokenizer_encodes_each_span(word_tokenizer):
    from reme_procedure_memory.tokens import SpanCounter

    counter = TokenCounter(str(word_tokenizer))
    text = "alpha beta\ngamma, delta\nepsilon\n"
    spans = SpanCounter(counter, text)
    assert [spans.count(0, 11), spans.count(11, len(text))] == [counter.count(text[:11]), counter.count(text[11:])]
    assert spans.encoded_chars == len(text)

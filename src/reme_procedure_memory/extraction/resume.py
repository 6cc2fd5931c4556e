"""The command that resumes an import: ``reme start job=procedure_auto_memory`` naming what makes it the same import,
and the names of the settings it reads from the environment (docs/decisions.md#resume-environment).

Contract of ``resume_fields`` (``resume``: one shell-quoted line to paste into a shell, from any directory;
``resume_environment``: names only):

* the command names the import: the workspace (absolute), the plugins, the application paths that move the plugin's
  files, ``file``, ``filename``, ``request_id``, and the settings of the checkpoint's fingerprint (``tokenizer_source``,
  ``token_limits.segment``) whenever a clean shell (no environment variables, no ``.env``) would resolve another
  value, wherever this process took them from; ``changes`` (a raised budget) are applied;
* a setting given on this process's command line or ``config=`` file (one that differs from what the environment
  alone resolves to) is repeated too, except where the models are and who pays: an ``as_llm``, ``agent_wrapper`` or
  ``as_embedding`` component's ``backend``, ``model``, ``credential``, ``base_url``, ``api_key`` ... (``ENDPOINT_KEYS``)
  and every secret key (ReMe's own redaction rule: ``api_key``, ``*_token``, ...): those are never printed;
* everything else comes from the environment (or ``.env``) at resume time, so a resume follows a fixed
  ``LLM_BASE_URL``: ``resume_environment`` lists the environment variables whose values this run used for a setting
  that the command does not repeat, and the dotted keys of command-line endpoint or secret settings that must be
  given again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
from pathlib import Path
from typing import Any

from reme.config import resolve_app_config
from reme.plugin import resolve_plugin_runtime

from ..reme_internals import placeholders_reading

_SECRET_KEYS = {"api_key", "app_secret", "authorization", "cookie", "password", "private_key", "secret", "token"}
_SECRET_SUFFIXES = ("_access_key", "_api_key", "_password", "_private_key", "_secret", "_token")
_PATH_KEYS = ("metadata_dir", "session_dir")  # application settings that move the plugin's files
MODEL_COMPONENTS = ("as_llm", "agent_wrapper", "as_embedding")
# keys of the model components that say where a model is and who pays: never pinned by a resume
ENDPOINT_KEYS = {
    "backend",
    "model",
    "model_name",
    "credential",
    "base_url",
    "api_key",
    "auth_mode",
    "as_llm",
    "codex_home",
    "codex_bin",
}
FINGERPRINT_KEYS = (("tokenizer_source",), ("token_limits", "segment"))  # of components.procedure_memory.<name>


def _is_secret(key: str) -> bool:
    """ReMe's own rule for secret config keys (``app_config`` redaction)."""
    normalized = key.lower().replace("-", "_")
    return normalized in _SECRET_KEYS or normalized.endswith(_SECRET_SUFFIXES)


def _leaves(tree: Any, prefix: tuple[str, ...] = ()):
    """``(path, value)`` of every non-mapping value of a nested mapping."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, (*prefix, str(key)))
    else:
        yield prefix, tree


def _lookup(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return _MISSING
        tree = tree[key]
    return tree


_MISSING = object()


def _cli_value(value: Any) -> str:
    """A value as ReMe's CLI parses it back (``key=value``: JSON scalars, lists and objects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


_CLEAN_SHELL = threading.Lock()
_MARKER = re.compile("\x00([A-Za-z_][A-Za-z0-9_]*)\x00")


def _resolved(plugins: list[str], environ) -> dict:
    """The configuration a bare ``reme start plugins=...`` resolves to when ReMe's placeholders read ``environ``.

    ReMe expands placeholders from ``os.environ`` inside ``config_parser`` only (its one use of ``os``); that module
    alone sees ``environ`` while the configuration resolves, so no other code or thread is affected.
    """
    with _CLEAN_SHELL, placeholders_reading(environ):
        try:
            return resolve_plugin_runtime(resolve_app_config(log_config=False, plugins=plugins)).config
        except ValueError:  # a placeholder without a default: the bare command would not even start
            return resolve_plugin_runtime({"plugins": plugins}).config


def _baseline_config(plugins: list[str]) -> dict:
    """The configuration of a bare command in a clean shell (default.yaml + plugin defaults, every ``${VAR:-x}`` at
    its default)."""
    return _resolved(plugins, {})


class _Markers(dict):
    """An environment whose set variables read as ``\\x00NAME\\x00``: the resolved configuration then shows which
    variable each value came from."""

    def get(self, name, default=None):
        return f"\x00{name}\x00" if name in os.environ else default


def _is_endpoint(path: tuple[str, ...]) -> bool:
    """Whether ``path`` (from ``components``) says where a model is or who pays (``ENDPOINT_KEYS``)."""
    return len(path) >= 4 and path[1] in MODEL_COMPONENTS and path[3] in ENDPOINT_KEYS


def _is_fingerprint(path: tuple[str, ...]) -> bool:
    return len(path) >= 4 and path[1] == "procedure_memory" and path[3:] in FINGERPRINT_KEYS


def _plan(app_context, changes: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """``(key=value arguments, names the resume needs from the environment)`` (module docstring)."""
    config = app_context.app_config
    effective = config.model_dump()
    plugins = list(config.plugins)
    baseline, from_environment = _baseline_config(plugins), _resolved(plugins, os.environ)
    workspace = Path(config.workspace_dir).expanduser().absolute()
    args = [f"workspace_dir={workspace}", f"plugins={json.dumps(plugins)}"]
    args += [f"{key}={effective[key]}" for key in _PATH_KEYS if effective.get(key) != baseline.get(key, _MISSING)]
    needed: set[str] = set()
    unpinned_from_environment: list[tuple[str, ...]] = []
    for path, value in _leaves(effective.get("components") or {}, ("components",)):
        key = ".".join(path)
        value = (changes or {}).get(key, value)
        given_here = _lookup(from_environment, path) != value  # the command line, a config= file or a change
        if any("." in part or "=" in part for part in path) or value == {}:
            continue
        if any(_is_secret(part) for part in path) or _is_endpoint(path):
            if given_here:
                needed.add(key)
            elif _lookup(baseline, path) != value:
                unpinned_from_environment.append(path)
            continue
        if (_is_fingerprint(path) and _lookup(baseline, path) != value) or key in (changes or {}) or given_here:
            args.append(f"{key}={_cli_value(value)}")
        elif _lookup(baseline, path) != value:
            unpinned_from_environment.append(path)
    if unpinned_from_environment:
        try:
            marked = _resolved(plugins, _Markers())
        except Exception:  # unexpected: the names are a hint, the command is the contract
            marked = {}
        for path in unpinned_from_environment:
            needed.update(_MARKER.findall(str(_lookup(marked, path))))
    return args, sorted(needed)


def cli_overrides(app_context, changes: dict[str, Any] | None = None) -> list[str]:
    """``key=value`` arguments that make a resume the same import (module docstring); ``changes`` (dotted key ->
    value) replace effective values, e.g. a raised budget."""
    return _plan(app_context, changes)[0]


def resume_environment(app_context, changes: dict[str, Any] | None = None) -> list[str]:
    """The names of the environment variables (and command-line settings) the resume needs again (module
    docstring): never their values."""
    return _plan(app_context, changes)[1]


def resume_command(
    app_context, source: str, filename: str, request_id: str, changes: dict[str, Any] | None = None
) -> str:
    """The exact, shell-quoted command that resumes this import in this workspace (``changes``: dotted setting keys
    whose value the resume should change, see ``cli_overrides``)."""
    return resume_fields(app_context, source, filename, request_id, changes)["resume"]


def resume_fields(
    app_context, source: str, filename: str, request_id: str, changes: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``{"resume": command, "resume_environment": [names]}`` for an answer (module docstring)."""
    args, needed = _plan(app_context, changes)
    words = [
        "reme",
        "start",
        "job=procedure_auto_memory",
        *args,
        f"file={source}",
        f"filename={filename}",
        f"request_id={request_id}",
    ]
    return {"resume": " ".join(shlex.quote(word) for word in words), "resume_environment": needed}

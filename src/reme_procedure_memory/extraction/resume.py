"""The exact command that resumes an import: ``reme start job=procedure_auto_memory`` with this process's workspace,
plugins, application paths and every component setting that differs from what a bare command resolves to in a clean
shell (no environment variables, no ``.env``).

Contract: ``resume_command`` returns one shell-quoted line that a user can paste into a new shell, from any
directory: a value this process took from the command line, a ``config=`` file, ``.env`` or the environment (such as
``PROCEDURE_TOKENIZER_SOURCE`` or ``LLM_BASE_URL``) is repeated whenever a clean shell would resolve another one. Only
secret keys (ReMe's own redaction rule: ``api_key``, ``*_token``, ...) are never printed: they come from the
environment or ``.env`` again.
"""

from __future__ import annotations

import json
import shlex
import threading
import types
from pathlib import Path
from typing import Any

from reme.config import config_parser, resolve_app_config
from reme.plugin import resolve_plugin_runtime

_SECRET_KEYS = {"api_key", "app_secret", "authorization", "cookie", "password", "private_key", "secret", "token"}
_SECRET_SUFFIXES = ("_access_key", "_api_key", "_password", "_private_key", "_secret", "_token")
_PATH_KEYS = ("metadata_dir", "session_dir")  # application settings that move the plugin's files


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


def _baseline_config(plugins: list[str]) -> dict:
    """The configuration a bare ``reme start plugins=...`` resolves to in a clean shell (default.yaml + plugin
    defaults, every ``${VAR:-default}`` at its default).

    ReMe expands placeholders from ``os.environ`` inside ``config_parser`` only (its one use of ``os``); that module
    alone sees an empty environment while the baseline resolves, so no other code or thread is affected.
    """
    with _CLEAN_SHELL:
        real_os = config_parser.os
        config_parser.os = types.SimpleNamespace(environ={})
        try:
            try:
                return resolve_plugin_runtime(resolve_app_config(log_config=False, plugins=plugins)).config
            except ValueError:  # a placeholder without a default: the bare command would not even start
                return resolve_plugin_runtime({"plugins": plugins}).config
        finally:
            config_parser.os = real_os


def cli_overrides(app_context, changes: dict[str, Any] | None = None) -> list[str]:
    """``key=value`` arguments that reproduce this process's effective configuration for an import: the workspace
    (absolute), the plugins, the application paths and every ``components...`` value that differs from what a bare
    command resolves to in a clean shell (CLI overrides, ``config=`` files, ``.env`` and environment-derived values).
    ``changes`` (dotted key -> value) replace effective values, e.g. a raised budget. Secret keys are never printed
    (they come from the environment or ``.env`` as before)."""
    config = app_context.app_config
    effective = config.model_dump()
    baseline = _baseline_config(list(config.plugins))
    workspace = Path(config.workspace_dir).expanduser().absolute()
    args = [f"workspace_dir={workspace}", f"plugins={json.dumps(list(config.plugins))}"]
    args += [f"{key}={effective[key]}" for key in _PATH_KEYS if effective.get(key) != baseline.get(key, _MISSING)]
    for path, value in _leaves(effective.get("components") or {}, ("components",)):
        if any(_is_secret(key) or "." in key or "=" in key for key in path):
            continue
        key = ".".join(path)
        value = (changes or {}).get(key, value)
        if value == {} or _lookup(baseline, path) == value:
            continue
        args.append(f"{key}={_cli_value(value)}")
    return args


def resume_command(app_context, source: str, filename: str, request_id: str,
                   changes: dict[str, Any] | None = None) -> str:
    """The exact, shell-quoted command that resumes this import in this workspace with these settings (``changes``:
    dotted setting keys whose value the resume should change, see ``cli_overrides``)."""
    words = ["reme", "start", "job=procedure_auto_memory", *cli_overrides(app_context, changes), f"file={source}",
             f"filename={filename}", f"request_id={request_id}"]
    return " ".join(shlex.quote(word) for word in words)

"""The exact command that resumes an import: ``reme start job=procedure_auto_memory`` with this process's workspace,
plugins, application paths and every component setting that differs from what a bare command resolves to.

Contract: ``resume_command`` returns one shell-quoted line that a user can paste; secret keys (ReMe's own redaction
rule, plus credential blocks) are never printed, since they come from the environment or ``.env`` again.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from reme.config import resolve_app_config
from reme.plugin import resolve_plugin_runtime

_SECRET_KEYS = {"api_key", "app_secret", "authorization", "cookie", "password", "private_key", "secret", "token",
                "credential", "credentials"}
_SECRET_SUFFIXES = ("_access_key", "_api_key", "_password", "_private_key", "_secret", "_token")
_PATH_KEYS = ("metadata_dir", "session_dir")  # application settings that move the plugin's files


def _is_secret(key: str) -> bool:
    """ReMe's own rule for secret config keys (``app_config`` redaction), plus credential blocks."""
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


def _baseline_config(plugins: list[str]) -> dict:
    """The configuration a bare ``reme start plugins=...`` resolves to here (default.yaml + plugin defaults)."""
    try:
        return resolve_plugin_runtime(resolve_app_config(log_config=False, plugins=plugins)).config
    except ValueError:  # e.g. default.yaml references an undefined environment variable
        return resolve_plugin_runtime({"plugins": plugins}).config


def cli_overrides(app_context) -> list[str]:
    """``key=value`` arguments that reproduce this process's effective configuration for an import: the workspace,
    the plugins, the application paths and every ``components...`` value that differs from what a bare command
    resolves to (CLI overrides, ``config=`` files, environment-derived values). Secret keys are never printed (they
    come from the environment or ``.env`` as before)."""
    config = app_context.app_config
    effective = config.model_dump()
    baseline = _baseline_config(list(config.plugins))
    args = [f"workspace_dir={config.workspace_dir}", f"plugins={json.dumps(list(config.plugins))}"]
    args += [f"{key}={effective[key]}" for key in _PATH_KEYS if effective.get(key) != baseline.get(key, _MISSING)]
    for path, value in _leaves(effective.get("components") or {}, ("components",)):
        if any(_is_secret(key) or "." in key or "=" in key for key in path):
            continue
        if value == {} or _lookup(baseline, path) == value:
            continue
        args.append(f"{'.'.join(path)}={_cli_value(value)}")
    return args


def resume_command(app_context, source: str, filename: str, request_id: str) -> str:
    """The exact, shell-quoted command that resumes this import in this workspace with these settings."""
    words = ["reme", "start", "job=procedure_auto_memory", *cli_overrides(app_context), f"file={source}",
             f"filename={filename}", f"request_id={request_id}"]
    return " ".join(shlex.quote(word) for word in words)

"""ReMe's generic file jobs cannot reach the plugin's directories.

A service started with the plugin also serves ReMe's own file jobs (``write``, ``edit``, ``save``, ``move``,
``delete``, ``frontmatter_update``, ``read``, ``load``, ...) over HTTP and MCP. Their only path check is "inside the
workspace"; their optional ``_allowed_paths`` scope is an allow-list a caller can set itself, and ``move``/``delete``
ignore it. ReMe 0.4.2.0 offers a plugin no way to deny paths: plugin ``application_defaults`` sit below
``default.yaml`` (a plugin cannot change those jobs' steps) and a built-in step backend cannot be registered twice.

So the component, when it starts (components start before any job resolves its step classes), replaces these
built-in step classes in the application's own registry (``app_context.registry``, a per-Application copy; ReMe's
global ``R`` and other Applications are untouched) by subclasses that check the call's path arguments first:

* a change (write, edit, save, move's source and destination, delete, frontmatter update/delete, upload's and
  download's destination) of a path in — or a parent of — ``procedure_dir``, the trajectory directory,
  ``metadata/procedure/`` or an agent session directory is refused: experiences change only through an extraction
  run;
* any read or listing (read, load, read_image, frontmatter_read, upload's and download's source; stat, list) inside
  ``metadata/procedure/`` or an agent wrapper's session directory (``<mem_session_dir>/``) is refused: the journal,
  import records and checkpoints hold summaries, saved replies and the absolute paths of originals; a session file
  holds a whole agent conversation (an extraction's: its segment's text, unmasked);
* a read of a trajectory copy's content (read, load, read_image, frontmatter_read, a transfer's source) is refused
  and points to ``procedure_read kind=trajectory``, which masks credentials; stat and list of the copies still work.
  Experiences stay readable (``procedure_read`` serves them as they are);
* any of these steps and ReMe's index maintenance steps refuse a caller-chosen ``file_store`` that is one of the
  plugin's views (ReMe's reindex or link rewriting would change them behind the plugin).

A listing of a parent (``list`` of the workspace, recursive) leaves out the files of private directories (it may
then show fewer than ``limit``). Paths resolve as the built-in steps resolve them (symlinks followed), so a link
elsewhere cannot reach in. Every other call runs the built-in step unchanged. A refusal answers the plugin's JSON
error (code ``protected_path``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reme.enumeration import ComponentEnum

from ..errors import ErrorCode, error_answer
from ..reme_internals import LISTED_FILES_HOOK
from .layout import NAMES, PRIVATE

READ, LOOK, WRITE = "read", "look", "write"  # the content is returned (or copied); only names and sizes; a change
WORKSPACE, CWD = "workspace", "cwd"  # what a relative path argument is relative to, as the built-in step reads it
ANY_PATH = {"path": (WRITE, WORKSPACE), "src_path": (WRITE, WORKSPACE), "dst_path": (WRITE, WORKSPACE)}

# The path arguments of ReMe's generic steps (reme/steps/file_io, reme/steps/transfer) and what the step does to them.
PATH_ARGUMENTS: dict[str, dict[str, tuple[str, str]]] = {
    "read_step": {"path": (READ, WORKSPACE)},
    "load_step": {"path": (READ, WORKSPACE)},
    "read_image_step": {"path": (READ, WORKSPACE)},
    "stat_step": {"path": (LOOK, WORKSPACE)},
    "list_step": {"path": (LOOK, WORKSPACE)},
    "frontmatter_read_step": {"path": (READ, WORKSPACE)},
    "write_step": {"path": (WRITE, WORKSPACE)},
    "edit_step": {"path": (WRITE, WORKSPACE)},
    "save_step": {"path": (WRITE, WORKSPACE)},
    "delete_step": {"path": (WRITE, WORKSPACE)},
    "frontmatter_update_step": {"path": (WRITE, WORKSPACE)},
    "frontmatter_delete_step": {"path": (WRITE, WORKSPACE)},
    "move_step": {"src_path": (WRITE, WORKSPACE), "dst_path": (WRITE, WORKSPACE)},
    "upload_step": {"src_path": (READ, CWD), "dst_path": (WRITE, WORKSPACE)},
    "download_step": {"src_path": (READ, WORKSPACE), "dst_path": (WRITE, CWD)},
    # daily notes: paths come from daily_dir and a date, never from the caller
    "daily_list_step": {},
    "daily_write_step": {},
    "daily_reindex_step": {},
}
GUARDED_MODULES = ("reme.steps.file_io", "reme.steps.transfer")  # an unknown step there: every path is a change
STORE_STEPS = ("reindex_step", "optimize_index_step", "clear_store_step", "update_index_step")


def step_rules(backend: str, cls: type) -> dict[str, tuple[str, str]] | None:
    """The path arguments a built-in step must have checked, or None when the step is not guarded."""
    if backend in PATH_ARGUMENTS:
        return PATH_ARGUMENTS[backend]
    if backend in STORE_STEPS:
        return {}
    if cls.__module__.startswith(GUARDED_MODULES):
        return ANY_PATH
    return None


def install_guard(app_context) -> None:
    """Replace the guarded built-in steps of this application's registry by checking subclasses (idempotent)."""
    registry = app_context.registry
    for backend, cls in registry.get_all(ComponentEnum.STEP).items():
        rules = step_rules(backend, cls)
        if rules is None or getattr(cls, "procedure_guarded", False):
            continue
        registry.unregister(ComponentEnum.STEP, backend)
        registry.add(backend, guarded_step(cls, rules), owner="procedure-memory")


def guarded_step(cls: type, rules: dict[str, tuple[str, str]]) -> type:
    """A subclass of the built-in step ``cls`` (same name, prompts and behaviour) that first refuses a call reaching
    the plugin's directories or views with the plugin's JSON error."""
    builtin = cls.execute

    async def execute(self):
        refusal = refusal_of(self.app_context, self.context, rules)
        if refusal is None:
            return await builtin(self)
        answer = error_answer(ErrorCode.PROTECTED_PATH, refusal)
        self.context.response.success = False
        self.context.response.answer = json.dumps(answer, ensure_ascii=False)
        self.context.response.metadata["error"] = answer["error"]
        return None

    members = {
        "procedure_guarded": True,
        "execute": execute,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    if callable(getattr(cls, LISTED_FILES_HOOK, None)):  # list: a parent's listing (recursive) leaves private files out
        render = getattr(cls, LISTED_FILES_HOOK)

        def listed(self, files, workspace_dir):
            private = [
                p.directory
                for m in _memories(self.app_context)
                for p in m.protected_directories()
                if p.access == PRIVATE
            ]
            return render([f for f in files if not _inside_any(f, private)], workspace_dir)

        members[LISTED_FILES_HOOK] = listed
    return type(cls.__name__, (cls,), members)


def _memories(app_context) -> list:
    """The application's procedure-memory components. (Recognised by their ``protected_directories``: this module
    cannot import component.py, which imports it.)"""
    return [
        m
        for m in (app_context.components.get("procedure_memory") or {}).values()
        if hasattr(m, "protected_directories")
    ]


def _inside_any(path: Path, directories: list[Path]) -> bool:
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return True  # a path that cannot be resolved is not listed
    return any(real == d or real.is_relative_to(d) for d in directories)


def refusal_of(app_context, context, rules: dict[str, tuple[str, str]]) -> str | None:
    """Why this call may not run (a sentence), or None."""
    memories = _memories(app_context)
    if not memories:
        return None
    chosen = context.get("file_store")
    for memory in memories:
        views = memory.settings.views.values()
        if chosen in views or any(
            chosen is getattr(memory, attr, None) for attr in ("view_when_to_use", "view_when_to_use_content")
        ):
            return (
                f"file_store={chosen if isinstance(chosen, str) else chosen.name} is a search view of the "
                "procedure-memory plugin; ReMe's generic jobs cannot change it. Use procedure_reindex "
                "(one-shot CLI) to rebuild it."
            )
    workspace = memories[0].workspace_path.resolve()
    for argument, (mode, base) in rules.items():
        target = _resolve(context.get(argument), workspace if base == WORKSPACE else None)
        if target is None:
            continue
        shown = _shown(target, workspace)
        for memory in memories:
            for place in memory.protected_directories():
                inside = target == place.directory or target.is_relative_to(place.directory)
                if inside and place.access == PRIVATE:
                    return (
                        f"`{argument}` {shown} is inside {place.label}, {place.why}; ReMe's generic file jobs "
                        "cannot read, list or change it while the procedure-memory plugin is enabled."
                    )
                if inside and place.access == NAMES and mode == READ:
                    return (
                        f"`{argument}` {shown} is inside {place.label}, {place.why}, which may hold "
                        "credentials; ReMe's generic file jobs cannot read their content. Read an excerpt with "
                        f"procedure_read kind=trajectory path={shown} (credentials masked); stat and list "
                        "still work here."
                    )
                if mode == WRITE and (inside or place.directory.is_relative_to(target)):
                    return (
                        f"`{argument}` {shown} would change {place.label}, which the "
                        "procedure-memory plugin manages; ReMe's generic file jobs cannot modify it. Only an "
                        "import (procedure_auto_memory) writes there, procedure_delete (one-shot CLI) removes an "
                        "experience; procedure_read reads experiences and trajectory excerpts."
                    )
    return None


def _resolve(raw: Any, base: Path | None) -> Path | None:
    """The absolute path a built-in step would act on (symlinks followed; ``base`` None: the process's working
    directory), or None when it names none."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        path = Path(raw.strip()).expanduser()
        return (path if path.is_absolute() else (base or Path.cwd()) / path).resolve()
    except (OSError, ValueError, RuntimeError):  # a name the OS refuses: the built-in step answers it
        return None


def _shown(target: Path, workspace: Path) -> str:
    return target.relative_to(workspace).as_posix() if target.is_relative_to(workspace) else str(target)

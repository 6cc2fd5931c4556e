"""Whether a workspace holds the plugin's state, and taking back the empty directories a refused process created.

A workspace holds plugin state when its experience directory, its trajectory directory or the component's metadata
directory exists (a start, an import, a reindex or a user's own ``procedures/`` made it). ReMe creates the workspace and its standard
subdirectories while it builds the application, before any plugin code can look at them; a process that then
refuses because there was nothing to read takes them back: each of those subdirectories that is an empty directory
created (status change time) after the plugin was loaded, then the workspace directory itself if that left it
empty. Parents ReMe created for the workspace are left (their status change time cannot tell whether they are
new), as is anything older or non-empty; an empty workspace directory the user made is removed with the rest.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# When ReMe loaded the plugin, which it does before it creates the workspace: a directory changed later is new. (Not
# the process start time: psutil's is only accurate to the second.) A coarse file-system clock can only make a new
# directory look older, so the error is on the side of leaving it.
LOADED_AT = time.time()


def holds_plugin_state(*directories: Path) -> bool:
    """Whether any of the plugin's own directories (experiences, trajectory copies, the component's metadata)
    exists (any file type)."""
    return any(os.path.lexists(directory) for directory in directories)


def remove_created_here(root: Path, subdirs: list[str], since: float = LOADED_AT) -> list[Path]:
    """Remove each ``root/<subdir>`` that is an empty real directory changed at or after ``since``, then ``root``
    when that left it empty; the removed paths."""
    removed = []

    def take_back(directory: Path, *, fresh: bool) -> None:
        try:
            if directory.is_symlink() or not directory.is_dir() or any(directory.iterdir()):
                return
            if fresh and os.lstat(directory).st_ctime < since:
                return
            directory.rmdir()
        except OSError:
            return
        removed.append(directory)

    for subdir in subdirs:
        if root in (root / subdir).parents:
            take_back(root / subdir, fresh=True)
    take_back(root, fresh=False)
    return removed

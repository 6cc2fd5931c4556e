"""Durable user data and the modules that write it: atomic files, metadata records, the workspace lock, containment,
the experience files, the operation journal, imports and checkpoints, the plugin's directories. ``store.py`` is the
face that states these contracts; ``format.py`` is the one description of the durable format (the directory tree,
file names, record shapes, every format and version constant, the path functions) and ``dump.py`` the read-only dump
of a workspace's metadata in its terms (``procedure_dump``).

The workspace's durable files are written only by modules of this package: ``experiences.py`` (experience files),
``imports.py`` (trajectory copies and import records), ``journal.py`` and ``path_index.py`` (the journal and its index
by path), ``checkpoints.py``, ``records.py`` (setting a damaged record aside) and ``lock.py`` (the lock file). Every
file with content goes through ``atomic.py``'s atomic writer, except the lock file (rewritten in place under its
``flock``); the path index's markers are empty files. Outside this package only derived or exported files are
written, also through ``atomic.py``: the views' state (``search/view_store/state.py``) and an export
(``export/exporter.py``)."""

"""Durable user data and its only writer: atomic files, metadata records, the workspace lock, containment, the
experience files, the operation journal, imports and checkpoints, the plugin's directories. ``store.py`` is the face
that states these contracts; nothing outside this package writes a durable file."""

"""The storage and recovery contracts, in one place (the code is in ``storage/``; this module re-exports it).

What is durable: the experience files (the only truth for search), the byte-exact trajectory copies and the
plugin's metadata (imports, the operation journal, checkpoints, the lock). Everything else (the views) is derived and
rebuildable. Where each file is, how it is named, each record's shape and every format version:
``storage/format.py``.

* **One writer.** Only modules of ``storage/`` write durable files (which ones: ``storage/__init__.py``); each file
  with content, the lock file aside, is written by ``storage.atomic.atomic_write``: a temporary file in the same
  directory (the process umask, or the replaced file's mode), fsync, ``os.replace``, fsync of the directory. A reader sees the old bytes or the new ones, never a mix. A failed write
  raises ``StorageError`` naming the destination (answered ``disk_full`` / ``storage_error``) and leaves no
  temporary file; a kill may leave one, which every start removes.
* **Damaged records.** A metadata record that cannot be parsed raises ``DamagedRecord`` naming the file; the import
  that owns it sets it aside as ``<file>.damaged`` (kept, never deleted) and stops once with ``metadata_damaged``;
  every other reader skips it and reports it (start log, ``procedure_reindex``'s ``damaged_metadata``).
* **The journal** is a write-ahead log: before an experience is published its record (scoped operation key,
  destination, target bytes, expected version) is durable; after a crash ``recover_intent`` rolls the publish
  forward when its precondition still holds, else drops it. An identical retry of a write that never became durable
  publishes it. Open records are all a start reads.
* **Imports** are keyed by request id: a reservation record holds the copy's name and checksum before the copy
  exists; the same request id reuses the verified copy and its checkpoint.
* **Checkpoints** save the segment position, the bounded summary, the processing fingerprint and the final reply of
  the segment being processed; they are replaced atomically at every step.
* **One process per workspace**: ``WorkspaceLock`` holds an exclusive ``flock`` from the moment the component is
  built until its stores have persisted themselves at close.
* **Recovery** (``operations/recovery.py``): a start rolls intents forward or drops them, then reconciles both views
  with the files; a rebuild never deletes or rewrites an experience or trajectory file.
"""

from .errors import DamagedRecord, StorageError, storage_failure
from .storage.atomic import atomic_write
from .storage.checkpoints import CheckpointStore
from .storage.experiences import ExperienceFiles
from .storage.imports import ImportRecord, ImportRegistry
from .storage.journal import (
    ABANDONED,
    INDEX_PENDING,
    INDEXED,
    INTENT,
    PUBLISHED,
    SUPERSEDED,
    Operation,
    OperationJournal,
    recover_intent,
)
from .storage.lock import WorkspaceLock

__all__ = [
    "ABANDONED",
    "INDEX_PENDING",
    "INDEXED",
    "INTENT",
    "PUBLISHED",
    "SUPERSEDED",
    "CheckpointStore",
    "DamagedRecord",
    "ExperienceFiles",
    "ImportRecord",
    "ImportRegistry",
    "Operation",
    "OperationJournal",
    "StorageError",
    "WorkspaceLock",
    "atomic_write",
    "recover_intent",
    "storage_failure",
]

"""The workspace's durable format, written down once: the directory tree, file naming, record shapes, every format
and version constant, and the path functions every other module uses to name a file.

Other modules state what they do with these files (contracts, fsync discipline, recovery); where a file is and how
it is named is said here, and only here. ``procedure_dump`` (``dump.py``) prints a workspace's metadata in these
terms.

Tree (defaults shown; ``<...>`` is a setting or a computed name)::

    <workspace>/
      procedures/<name>.json                  experience files (``procedure_dir``): the only truth for search
      session/trajectories/<file>             byte-exact trajectory copies (``session_dir`` + ``trajectory_subdir``)
      metadata/                               ReMe's ``metadata_dir``
        procedure/<component>/                the plugin's private state, ``state_dir`` (``STATE_PARENT``)
          workspace.lock                      ``LOCK_FILE``: ``pid=<pid> since=<time>``, flock-ed while a process runs
          imports/<sha256 of request id>.json       an ``ImportRecord`` (imports.py)
          processing/<sha256 of request id>.json    a ``Checkpoint`` (checkpoints.py)
          operations/                         the operation journal (journal.py)
            <scope digest>.v2/                one per scope: an import's request id, or ``""`` (changes by hand)
              <record digest>.open.json       an open record (intent, published, index_pending)
              <record digest>.json            a final record (indexed, superseded, abandoned, recorded)
            paths/<path digest>/              the journal's index by experience path (path_index.py)
              <scope digest>.<record digest>.<created µs>.<version>            a confirmed marker (empty)
              <scope digest>.<record digest>.<created µs>.<version>.pending    a pending marker (empty)
              compacted.json                  a ``Compacted`` summary (what the retention bound removed)
            paths.building/                   ``paths/`` while the first start indexes a journal written without it
            compacted/<path digest>.json      the second copy of each compaction summary
        file_store/<store>_<store version>.view/   one view's state (search/view_store/state.py has its byte format):
                                              MANIFEST.json, <g>.records.json.zst, <g>.vectors.<a>.npy,
                                              <g>.bm25.<a>.npy, <g>.log
        embedding_store/<name>_<version>_<space>.npz   ReMe's embedding cache (ReMe's format)

Anywhere the plugin writes: ``.<name>.<8 hex>.tmp`` is the atomic writer's temporary file (``TEMP_FILE``; a kill
may leave one, every start removes them), and ``<record>.damaged`` (``-2``, ``-3``, ...) a damaged metadata record
set aside by the import that owns it (kept, never read again).

Naming: a *request id file* is ``sha256(request id)`` (64 hex) + ``.json``; a *scope digest* the first 32 hex of
``sha256(scope)``; a *record digest* ``sha256(scope + "\\0" + operation key)`` (64 hex); a *path digest* the first 32
hex of ``sha256(experience path)``; an experience's *version* the first 16 hex of ``sha256(its bytes)``
(``schema.version_of``; a deletion's marker says ``none``). All digests are of the UTF-8 text.

Record shapes: every metadata record is one JSON object, written as ``json.dumps(obj, ensure_ascii=False,
indent=1, sort_keys=True) + "\\n"`` through ``atomic.write_json``; its fields are its dataclass's, nothing else (a
record with unknown, missing or mistyped fields is damaged):

* ``ImportRecord`` (``imports/``): request_id, source (the original's absolute path), filename, path (the copy),
  sha256, size, status (``reserved`` until the copy is published and verified, then ``copied``), source_id,
  created_at, rejected (an answer code, or ``""``);
* ``Checkpoint`` (``processing/``): request_id, path, fingerprint {segmenter_version, tokenizer_source,
  segment_tokens, sha256}, plugin_version, segments [[start, end), ...], next_segment, summary, summary_tokens,
  memory_hint, segment_counts, saved_reply, status (``processing`` / ``complete``), attempts, failed_writes,
  format (``CHECKPOINT_FORMAT``);
* ``Operation`` (``operations/<scope>.v2/``): scope, key, tool (create, update; hand_edit, hand_delete), request (a
  digest of the arguments), path, target (the file's text), expected_version, status, error, created_at, segment,
  published_at, file_version;
* ``Compacted`` (``compacted.json``): path, versions, newest_at, removing (marker names being removed).

Format and version constants (each is written into, or compared with, what is on disk; change one only with the
consequence in the last column):

========================  =========  ==============================================  ===================================
constant                  value      where it is recorded                             another value found on disk
========================  =========  ==============================================  ===================================
``CHECKPOINT_FORMAT``     1          a checkpoint's ``format``                        the checkpoint is damaged
``JOURNAL_LAYOUT``        2          a scope directory's suffix ``.v2``               the start stops: unsupported_workspace
``VIEW_STATE_FORMAT``     3          a view's ``MANIFEST.json`` ``format``            the view is rebuilt from the files
``BM25_FORMAT``           2          the BM25 part of a view snapshot (``format``)    the keyword index is rebuilt
``TOKENIZER_RULES``       ``"1"``    every view record's tokenizer identity           the views are rebuilt at start
``SEGMENTER_VERSION``     ``"1"``    a checkpoint's ``fingerprint``                   resume refused:
                                                                                      incompatible_checkpoint
``EXPORT_MARKER_FORMAT``  1          ``<dest>/.reme-procedure-export.json``           the export refuses the destination
``schema.VERSION_CHARS``  16         an experience's version (hex characters)         (not recorded: computed)
========================  =========  ==============================================  ===================================
"""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path

# -- format and version constants (the table above) --------------------------------------------------------------

CHECKPOINT_FORMAT = 1
JOURNAL_LAYOUT = 2
VIEW_STATE_FORMAT = 3  # only released formats load (docs/decisions.md [released-formats]): no other is read
BM25_FORMAT = 2
TOKENIZER_RULES = "1"  # bump when the token rules change: workspaces indexed before are rebuilt at start
SEGMENTER_VERSION = "1"  # changes whenever the segmenter's output may change (a checkpoint resumes only under it)
EXPORT_MARKER_FORMAT = 1

# -- names ---------------------------------------------------------------------------------------------------------

STATE_PARENT = "procedure"  # <metadata_dir>/procedure/<component>/
LOCK_FILE = "workspace.lock"
IMPORTS_DIR = "imports"
PROCESSING_DIR = "processing"
OPERATIONS_DIR = "operations"
STATE_DIRS = (IMPORTS_DIR, OPERATIONS_DIR, PROCESSING_DIR)  # what a start creates under state_dir

RECORD_SUFFIX = ".json"
OPEN_SUFFIX = ".open.json"  # the file of an open journal record; its final record is ``<digest>.json``
SCOPE_SUFFIX = f".v{JOURNAL_LAYOUT}"  # a scope directory of this layout; another name stops a start (released-formats)
PATHS_DIR = "paths"  # under ``operations/``: not a scope directory
BUILDING_DIR = "paths.building"  # the index of an older journal while the first start builds it (nor this one)
SUMMARIES_DIR = "compacted"  # the second copy of every compaction summary, ``<path digest>.json`` (nor this one)
COMPACTED = "compacted.json"
MARKER = re.compile(r"^([0-9a-f]{32})\.([0-9a-f]{64})\.([0-9]{1,20})\.([0-9a-z]{1,64})$")
PENDING = ".pending"  # a marker made before its record was first written (path_index.py)
DELETED = "none"  # the version of a deletion's marker
DAMAGED = ".damaged"  # a damaged record set aside: ``<file>.damaged``, ``<file>.damaged-2``, ...

VIEW_MANIFEST = (
    "MANIFEST.json"  # a view state's manifest (search/view_store/state.py), under ``file_store/<store>.view/``
)

TEMP_SUFFIX = ".tmp"
# The atomic writer's temporary files (``.run.jsonl.1a2b3c4d.tmp``; older versions used mkstemp's 8 characters).
TEMP_FILE = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")


# -- path functions ------------------------------------------------------------------------------------------------


def state_dir(root: Path, metadata_dir: str, component: str) -> Path:
    """``<workspace>/<metadata_dir>/procedure/<component>``: the plugin's private state of one component."""
    return root / metadata_dir / STATE_PARENT / component


def state_rel_dir(metadata_dir: str, component: str) -> str:
    """``state_dir`` relative to the workspace (POSIX)."""
    return f"{metadata_dir}/{STATE_PARENT}/{component}"


def keyed_file(directory: Path, request_id: str) -> Path:
    """The record file of ``request_id`` in ``imports/`` or ``processing/``."""
    return directory / f"{hashlib.sha256(request_id.encode('utf-8')).hexdigest()}{RECORD_SUFFIX}"


def scope_digest(scope: str) -> str:
    """The digest naming a journal scope's directory."""
    return hashlib.sha256(scope.encode("utf-8")).hexdigest()[:32]


def scope_dir(operations: Path, scope: str) -> Path:
    """The directory of a scope's journal records (``operations/<scope digest>.v2``)."""
    return operations / (scope_digest(scope) + SCOPE_SUFFIX)


def record_digest(scope: str, key: str) -> str:
    """The stem of the record file of a scoped operation key."""
    return hashlib.sha256(f"{scope}\0{key}".encode("utf-8")).hexdigest()


def record_file(operations: Path, scope: str, key: str) -> Path:
    """The file of the record of a scoped key once final (``<scope dir>/<record digest>.json``)."""
    return scope_dir(operations, scope) / (record_digest(scope, key) + RECORD_SUFFIX)


def open_record_file(operations: Path, scope: str, key: str) -> Path:
    """The file of the record of a scoped key while it is open (``<scope dir>/<record digest>.open.json``)."""
    return scope_dir(operations, scope) / (record_digest(scope, key) + OPEN_SUFFIX)


def record_stem(name: str) -> str:
    """A record file's name without ``.open.json`` or ``.json``: the same for a record's open and final files."""
    return name[: -len(OPEN_SUFFIX)] if name.endswith(OPEN_SUFFIX) else name[: -len(RECORD_SUFFIX)]


def path_digest(path: str) -> str:
    """The name of an experience path's marker directory under ``paths/`` (and of its summary's second copy)."""
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:32]


def temp_name(path: Path) -> Path:
    """A new temporary file name for the atomic write of ``path``: ``.<name>.<8 hex>.tmp`` beside it."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def temp_files_of(*names: str) -> re.Pattern:
    """The atomic writer's temporary files of the files ``names`` only (e.g. an export's own files)."""
    alternatives = "|".join(re.escape(name) for name in names)
    return re.compile(rf"^\.({alternatives})\.[0-9a-f]{{8}}\.tmp$")


def damaged_name(path: Path, number: int) -> Path:
    """The name a damaged record is set aside under: ``<file>.damaged`` (``number`` 1), ``<file>.damaged-<n>``."""
    return path.with_name(f"{path.name}{DAMAGED}" + (f"-{number}" if number > 1 else ""))

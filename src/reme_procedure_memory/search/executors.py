"""The process-wide thread pools searches run in (never the event loop)."""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor


def _one_thread() -> None:
    """Scan threads run faiss on one OpenMP thread: concurrent searches are the parallelism."""
    from .vector.blocks import faiss_module

    faiss_module().omp_set_num_threads(1)


@functools.cache
def scan_executor() -> ThreadPoolExecutor:
    """The process-wide pool of vector-scan threads (one per core)."""
    return ThreadPoolExecutor(
        max_workers=os.cpu_count() or 2, thread_name_prefix="procedure-scan", initializer=_one_thread
    )


@functools.cache
def keyword_executor() -> ThreadPoolExecutor:
    """The process-wide pool of threads that score BM25 beside a large matrix scan (one per core; its tasks never
    wait on another task, so a scan thread may wait on them)."""
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="procedure-bm25")

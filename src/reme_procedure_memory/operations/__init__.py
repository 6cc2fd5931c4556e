"""What the jobs do to a workspace: extraction runs and their grants (``runs``), search answers and reads
(``reads``), the write path (``writes``: journal → publish → index) and its secret guard (``secret_guard``), and
recovery (``recovery``: reconcile, reindex, pending retries). Each works on the component's shared state through its public methods."""

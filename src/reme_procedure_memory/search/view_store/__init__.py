"""One view's ReMe file store (``ProcedureFileStore``): its records, vectors, searches, graph and persistence."""

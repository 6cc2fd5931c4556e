"""Derived, rebuildable search state: the two views over ReMe file stores (``views``), their fusion (``fusion``),
one view's store (``view_store/``: records, snapshot + log persistence, vectors, searches, graph), the vector index
(``vector/``), BM25 and its tokenizer (``keyword/``), and the threads searches run in. Everything here can be
rebuilt from the experience files (``storage``), which it never writes."""

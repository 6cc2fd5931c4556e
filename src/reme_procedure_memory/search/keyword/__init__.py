"""BM25 of the views (ReMe's scores, growable arrays) and their Snowball tokenizer."""

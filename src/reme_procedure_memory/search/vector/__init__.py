"""The exact vector index of a view: an int8-screened matrix whose top-k equals brute-force cosine."""

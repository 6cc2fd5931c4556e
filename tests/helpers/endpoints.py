"""Application settings for a real local embedding endpoint."""

from __future__ import annotations


def endpoint_components(endpoint):
    return {
        "as_embedding": {
            "procedure": {
                "backend": "openai",
                "model": "fake",
                "dimensions": 64,
                "max_retries": 0,
                "credential": {"api_key": "test", "base_url": endpoint.base_url},
            }
        },
        "procedure_memory": {"default": {"embedding_timeout_seconds": 20}},
    }

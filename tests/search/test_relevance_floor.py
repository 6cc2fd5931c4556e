"""The shipped relevance floor on the embedded model: on the example workspace (11 real experiences about
BFCL's file system, Twitter, messaging and math APIs), a search about an API no experience concerns answers 0
results by default, in both views, while an on-topic search answers its experience. The model is the real embedded
MiniLM, offline (no ``EMBEDDING_*``); the floor is the one ``plugin.yaml`` ships (``benchmarks/relevance.py``
calibrated it on other queries: BFCL user turns)."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import run_job
from helpers import REPO

pytestmark = pytest.mark.slow  # the real model embeds the workspace (about 20 s on 2 cores)

EXAMPLE = REPO / "examples" / "bfcl-workspace"
SHIPPED = yaml.safe_load((REPO / "plugin.yaml").read_text())["application_defaults"]["components"]["procedure_memory"][
    "default"
]["search"]["min_relevance"]
VIEWS = ["when_to_use", "when_to_use_content"]

OFF_TOPIC = [  # travel booking, trading, vehicles, tickets: no experience of the workspace concerns them
    "Book a flight from San Francisco to Los Angeles for next Friday and pay with my credit card",
    "Sell 50 shares of Nvidia stock at the market price",
    "Start the car engine after locking all doors and pressing the brake pedal",
    "Check the tire pressure and fill the fuel tank with 30 gallons",
]
ON_TOPIC = [
    ("log in to Twitter and post a tweet with hashtags", "post-file-content-as-tweet-with-tags-and-mentions.json"),
    ("sort the lines of a file", "inspect-and-compare-files-in-directory.json"),
    ("send a message to my new contact", "message-new-contact-after-login.json"),
]


@pytest.fixture
def no_provider(monkeypatch):
    for name in ("EMBEDDING_BACKEND", "EMBEDDING_MODEL_NAME", "EMBEDDING_API_KEY", "EMBEDDING_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


async def test_off_topic_searches_answer_nothing_and_on_topic_ones_their_experience(make_app, tmp_path, no_provider):
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE, ws)
    shipped = {"procedure_memory": {"default": {"search": {"min_relevance": SHIPPED}}}}  # conftest sets 0
    assert 0 < SHIPPED < 1
    async with make_app(workspace=ws, embedding=False, components=shipped) as app:
        for view in VIEWS:
            for query in OFF_TOPIC:
                ok, answer = await run_job(app, "procedure_search", query=query, index=view)
                assert ok and answer.get("vector_search") is None, answer  # the model answered
                assert answer["min_relevance"] == SHIPPED and answer["results"] == [], (view, query)
                ok, unfloored = await run_job(app, "procedure_search", query=query, index=view, min_relevance=0)
                assert len(unfloored["results"]) == 5  # there were candidates: the floor left them out
            for query, name in ON_TOPIC:
                ok, answer = await run_job(app, "procedure_search", query=query, index=view)
                assert ok and answer["results"], (view, query)
                assert answer["results"][0]["path"] == f"procedures/{name}"
                assert all(r["relevance"] >= SHIPPED for r in answer["results"])

"""The views' BM25 tokenizer (ReMe's regex + stopwords, then Snowball English stems) and the rebuild of workspaces
indexed by another tokenizer."""

import shutil
from pathlib import Path

import pytest
import Stemmer
from hypothesis import given, settings, strategies as st
from reme.components.tokenizer import RegexTokenizer
from reme_procedure_memory.search.keyword import tokenizer as keyword_tokenizer
from reme_procedure_memory.search.keyword.tokenizer import SnowballTokenizer

from conftest import memory_of, run_job
from helpers import FIXTURES

EXPERIENCES = FIXTURES / "four-experiences"  # experience files and the trajectory copy they cite


def copy_experiences(ws: Path) -> None:
    """Four experience files and the trajectory copy they cite."""
    for part in ("procedures", "session"):
        shutil.copytree(EXPERIENCES / part, ws / part)


REGEX = {"tokenizer": {"procedure": {"backend": "regex"}}}
BM25_ONLY = {"procedure_memory": {"default": {"vector_weight": 0.0}}}
STEM_QUERY = "deploying failed"  # regex tokens: deploying, failed; the experience says "deployment fails"
STEM_MATCH = "procedures/rollback-failed-deployment.json"
VIEW_NAMES = ("when_to_use", "when_to_use_content")


@pytest.fixture
async def tokenizers():
    """A started SnowballTokenizer and ReMe's RegexTokenizer (same default stopwords)."""
    snowball, regex = SnowballTokenizer(), RegexTokenizer()
    await snowball.start()
    await regex.start()
    yield snowball, regex
    await snowball.close()
    await regex.close()


def tokens(tokenizer, text: str) -> list[str]:
    return tokenizer.tokenize([text])[0]


async def test_words_are_stemmed(tokenizers):
    snowball, _ = tokenizers
    assert tokens(snowball, "deploying deployed deployment deploys") == ["deploy"] * 4
    assert tokens(snowball, "Configurations configured CONFIGURING") == ["configur"] * 3
    assert tokens(snowball, "retries retried retrying") == ["retri"] * 3
    assert tokens(snowball, "ran run") == ["ran", "run"]  # Snowball strips suffixes; no irregular forms


async def test_stopwords_are_reme_s_and_filtered_before_stemming(tokenizers):
    snowball, regex = tokenizers
    assert snowball.stopwords == regex.stopwords and {"when", "use", "using", "not"} <= snowball.stopwords
    assert tokens(snowball, "When NOT to use the cache, using cached deployments") == ["cach", "cach", "deploy"]
    # the filter sees the surface form: a stem that happens to be a stopword ("want", "need") stays a term
    assert {"want", "need"} <= snowball.stopwords and "wanting" not in snowball.stopwords
    assert tokens(snowball, "wanting needed") == ["want", "need"]
    unfiltered = SnowballTokenizer(filter_stopwords=False)
    await unfiltered.start()
    assert tokens(unfiltered, "When not to use it") == ["when", "not", "to", "use", "it"]


async def test_identifiers_numbers_and_non_ascii_follow_reme_s_regex(tokenizers):
    snowball, regex = tokenizers
    text = "Call get_user_ids, getUserIds and os.path.join on v2 port 8080 (x 7) 部署失败 Café naïve straße 🙂 ±"
    assert tokens(regex, text) == [
        "部",
        "署",
        "失",
        "败",
        "call",
        "get_user_ids",
        "getuserids",
        "os",
        "path",
        "join",
        "v2",
        "port",
        "8080",
        "café",
        "naïve",
        "straße",
    ]
    assert tokens(snowball, text) == [
        "部",
        "署",
        "失",
        "败",
        "call",
        "get_user_id",
        "getuserid",
        "os",
        "path",
        "join",
        "v2",
        "port",
        "8080",
        "café",
        "naïv",
        "straße",
    ]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "deploying",
                    "when",
                    "Use",
                    "get_user_ids",
                    "fooBar",
                    "os.path",
                    "v2",
                    "404",
                    "a",
                    "部署",
                    "naïve",
                    "running",
                    "RUNS",
                    "the",
                    "e.g.",
                    "x_1",
                    "connection's",
                ]
            ),
            st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
        ),
        max_size=30,
    )
)
def test_tokens_are_regex_tokens_then_stems(text_parts):
    """Property: for any text, the tokens are exactly ReMe's regex tokens (with its stopwords) stemmed by Snowball
    English, also across the memo being reset."""
    import asyncio

    async def check():
        snowball, regex = SnowballTokenizer(), RegexTokenizer()
        await snowball.start()
        await regex.start()
        stemmer = Stemmer.Stemmer("english")
        text = " ".join(text_parts)
        assert tokens(snowball, text) == [stemmer.stemWord(t) for t in tokens(regex, text)]

    asyncio.run(check())


async def test_the_term_memo_is_bounded_and_never_changes_tokens(tokenizers, monkeypatch):
    snowball, regex = tokenizers
    monkeypatch.setattr(keyword_tokenizer, "TERM_CACHE_SIZE", 8)
    stemmer = Stemmer.Stemmer("english")
    text = " ".join(f"word{i}s testing tested" for i in range(50))
    for _ in range(2):
        assert tokens(snowball, text) == [stemmer.stemWord(t) for t in tokens(regex, text)]
        assert len(snowball._terms) <= 8


async def test_identity_names_rules_algorithm_and_stemmer_version(tokenizers):
    from importlib.metadata import version

    snowball, _ = tokenizers
    assert snowball.identity == f"procedure_snowball/1 snowball-english PyStemmer-{version('PyStemmer')}"


async def test_shipped_views_use_the_snowball_tokenizer_for_documents_and_queries(make_app, tmp_path):
    ws = tmp_path / "ws"
    copy_experiences(ws)
    async with make_app(workspace=ws, components=BM25_ONLY) as app:
        memory = memory_of(app)
        for store in memory.workspace.views.stores.values():
            assert isinstance(store.keyword_index.tokenizer, SnowballTokenizer)
            assert "deploy" in store.keyword_index.vocab and "deployment" not in store.keyword_index.vocab
        for view in ("when_to_use", "when_to_use_content"):
            ok, ans = await run_job(app, "procedure_search", query=STEM_QUERY, index=view, limit=5)
            assert ok and ans["results"][0]["path"] == STEM_MATCH
            assert ans["results"][0]["scores"]["keyword_rank"] == 1


def chunk_stamps(memory) -> dict[str, set]:
    return {
        view: {c.metadata.get("tokenizer") for c in store.file_chunks.values()}
        for view, store in memory.workspace.views.stores.items()
    }


def count_clears(monkeypatch) -> list[int]:
    """Count Views.clear calls (observation only: the real method runs)."""
    from reme_procedure_memory.search.views import Views

    calls, real = [], Views.clear

    async def clear(self):
        calls.append(1)
        await real(self)

    monkeypatch.setattr(Views, "clear", clear)
    return calls


async def test_switching_tokenizers_either_way_rebuilds_both_views(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    copy_experiences(ws)
    clears = count_clears(monkeypatch)

    async def search(app):
        ok, ans = await run_job(app, "procedure_search", query=STEM_QUERY, index="when_to_use", limit=5)
        assert ok
        return [r["path"] for r in ans["results"]]

    async with make_app(workspace=ws, components={**REGEX, **BM25_ONLY}) as app:
        assert clears == [] and await search(app) == []  # plain regex: no word in common
        regex_identity = memory_of(app).workspace.views.tokenizers["when_to_use"]
        assert regex_identity.startswith("RegexTokenizer ")
    async with make_app(workspace=ws, components=BM25_ONLY) as app:
        assert clears == [1] and (await search(app))[0] == STEM_MATCH
    # back to regex: ReMe would load its old regex BM25 file (same ids); the stamps say stems, so it is rebuilt
    async with make_app(workspace=ws, components={**REGEX, **BM25_ONLY}) as app:
        assert clears == [1, 1] and await search(app) == []
        assert chunk_stamps(memory_of(app)) == {v: {regex_identity} for v in VIEW_NAMES}


async def test_a_new_rules_version_rebuilds_although_reme_s_bm25_file_name_is_unchanged(
    make_app, tmp_path, monkeypatch
):
    ws = tmp_path / "ws"
    copy_experiences(ws)
    clears = count_clears(monkeypatch)
    async with make_app(workspace=ws, components=BM25_ONLY):
        pass
    monkeypatch.setattr(SnowballTokenizer, "identity", SnowballTokenizer.identity.replace("/1 ", "/2 "))
    async with make_app(workspace=ws, components=BM25_ONLY) as app:
        assert clears == [1]
        assert all(
            stamp.startswith("procedure_snowball/2 ") for s in chunk_stamps(memory_of(app)).values() for stamp in s
        )

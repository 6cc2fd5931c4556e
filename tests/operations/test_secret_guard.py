"""The secret guard on the real Application: procedure_create / procedure_update refuse a credential
in any argument or field (``secret_detected``: nothing written, the field and kind named, the secret never repeated),
and procedure_read kind=trajectory masks credentials for service callers, not for the extraction agent, unless
``mask_trajectory_secrets`` is off; the copy stays byte-exact."""

from __future__ import annotations

import json

import pytest
from reme_procedure_memory.credentials import KINDS, mask_secrets, secrets_within

from conftest import add_trajectory, call_tool, memory_of, run_job
from helpers.cli import durable_state
from helpers.planted import fragments, planted

FIELDS = {
    "description": "Rebuild search after a configuration change",
    "when_to_use": "After changing search configuration when results appear stale",
    "content": "Rebuild the affected indexes, then verify a known query before resuming.",
}
SECRETS = {item.label: item for item in planted(7)}
AWS = SECRETS["akia"]


def assert_refused(ok: bool, answer: dict, item, field: str) -> None:
    """``secret_detected`` naming ``field`` and the item's kind, with its placeholder; no fragment of the secret."""
    assert not ok and answer["error"]["code"] == "secret_detected", answer
    assert {(s["field"], s["kind"]) for s in answer["secrets"]} >= {(field, item.kind)}, answer
    assert KINDS[item.kind].placeholder in answer["error"]["message"]
    assert f"`{field}`" in answer["error"]["message"] and "Nothing was written" in answer["error"]["message"]
    text = json.dumps(answer, ensure_ascii=False)
    assert not {f for f in fragments(item.secret) if f in text}, "the answer repeats part of the secret"


async def create(app, run, name="rebuild-search.json", **overrides):
    return await call_tool(app, run, "procedure_create", filename=name, **{**FIELDS, **overrides})


@pytest.mark.parametrize("item", planted(7), ids=lambda p: p.label)
async def test_create_refuses_every_kind_in_content_and_writes_nothing(make_app, item):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        before = durable_state(memory_of(app).workspace_path)
        ok, answer = await create(app, run, content=f"Log in first: {item.text}. Then rebuild the index.")
        assert_refused(ok, answer, item, "content")
        assert durable_state(memory_of(app).workspace_path) == before  # no file, no journal record
        # the retry with the placeholder the answer names is written
        placeholder = KINDS[item.kind].placeholder
        ok, answer = await create(app, run, content=f"Log in first with {placeholder}. Then rebuild the index.")
        assert ok and answer["status"] == "created", answer
        data = json.loads((memory_of(app).workspace_path / answer["path"]).read_text())
        assert placeholder in data["content"]


@pytest.mark.parametrize(
    "argument", ["filename", "description", "when_to_use", "when-to-use", "content", "operation_key"]
)
async def test_create_refuses_a_secret_in_every_argument_it_takes(make_app, argument):
    item = SECRETS["ghp"]
    value = {"filename": f"deploy-with-{item.secret}.json", "operation_key": f"key-{item.secret}"}.get(
        argument, f"Use {item.text} to push."
    )
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        before = durable_state(memory_of(app).workspace_path)
        arguments = {"filename": "push.json", **FIELDS, argument: value}
        if argument == "when-to-use":
            del arguments["when_to_use"]
        ok, answer = await call_tool(app, run, "procedure_create", **arguments)
        assert_refused(ok, answer, item, argument)
        assert durable_state(memory_of(app).workspace_path) == before
        assert search_finds_nothing_of(await run_job(app, "procedure_search", query="push deploy token"), item)


def search_finds_nothing_of(result, item) -> bool:
    ok, answer = result
    return ok and not {f for f in fragments(item.secret) if f in json.dumps(answer)}


@pytest.mark.parametrize(
    "argument", ["description", "when_to_use", "when-to-use", "content", "path", "expected_version", "operation_key"]
)
async def test_update_refuses_a_secret_in_every_argument_and_leaves_the_file(make_app, argument):
    item = SECRETS["postgres"]
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, created = await create(app, run)
        assert ok
        before = durable_state(memory.workspace_path)
        arguments = {"path": created["path"], "expected_version": created["version"], argument: item.text}
        ok, answer = await call_tool(app, run, "procedure_update", **arguments)
        assert_refused(ok, answer, item, argument)
        assert durable_state(memory.workspace_path) == before
        ok, read = await run_job(app, "procedure_read", path=created["path"])
        assert read["version"] == created["version"]


async def test_update_refuses_to_republish_a_secret_a_hand_edit_put_in_a_kept_field(make_app):
    item = SECRETS["sk-proj"]
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, created = await create(app, run)
        path = memory.workspace_path / created["path"]
        data = json.loads(path.read_text())
        data["description"] = f"Rebuild search ({item.text})"
        path.write_text(json.dumps(data, indent=2))  # edited by hand
        ok, read = await run_job(app, "procedure_read", path=created["path"])
        before = path.read_bytes()
        ok, answer = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            expected_version=read["version"],
            content="Rebuild, then verify a query.",
        )
        assert_refused(ok, answer, item, "description")
        assert f"kept from {created['path']}" in answer["error"]["message"]
        assert path.read_bytes() == before
        ok, answer = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            expected_version=read["version"],
            content="Rebuild, then verify a query.",
            description="Rebuild search with <API_KEY>",
        )
        assert ok and answer["status"] == "updated", answer
        assert item.secret not in path.read_text()


async def test_a_refused_write_outside_a_run_is_still_refused_for_the_missing_grant_first(make_app):
    async with make_app() as app:
        add_trajectory(app)
        ok, answer = await run_job(app, "procedure_create", filename="x.json", **{**FIELDS, "content": AWS.text})
        assert not ok and answer["error"]["code"] == "no_active_extraction_run"


async def test_the_identical_refused_call_again_gets_its_answer_with_a_nudge(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        first = await create(app, run, content=AWS.text)
        again = await create(app, run, content=AWS.text)
        assert_refused(*first, AWS, "content")
        assert_refused(*again, AWS, "content")
        assert again[1]["repeated_call"] is True and not first[1].get("repeated_call")


# -- masked trajectory excerpts -------------------------------------------------------------------------------------


def trajectory_with_secrets() -> tuple[bytes, list]:
    items = [SECRETS[label] for label in ("akia", "rsa-pem", "json-password", "jwt", "postgres")]
    lines = [json.dumps({"role": "user", "content": f"step {i}: {item.text}"}) for i, item in enumerate(items)]
    return ("\n".join(lines) + "\n").encode(), items


async def test_service_callers_get_masked_excerpts_and_the_copy_stays_byte_exact(make_app):
    data, items = trajectory_with_secrets()
    async with make_app() as app:
        rel = add_trajectory(app, "run.jsonl", data)
        ok, answer = await run_job(app, "procedure_read", kind="trajectory", path=rel)
        assert ok, answer
        assert answer["secrets_masked"] == len(items)
        assert answer["masked_kinds"] == {item.kind: 1 for item in items}
        assert "masked" in answer["note"] and "copy" in answer["note"]
        for item in items:
            assert f"[masked:{item.kind}]" in answer["text"]
            assert not {f for f in fragments(item.secret) if f in answer["text"]}
        assert answer["length"] == len(data.decode()) and answer["next_offset"] is None
        assert (memory_of(app).workspace_path / rel).read_bytes() == data
        # an excerpt without secrets says so
        ok, clean = await run_job(app, "procedure_read", kind="trajectory", path=rel, offset=0, length=8)
        assert clean["secrets_masked"] == 0 and clean["text"] == data.decode()[:8] and "note" not in clean


async def test_pages_that_cut_a_secret_mask_both_parts_and_cover_the_copy(make_app):
    data, items = trajectory_with_secrets()
    text = data.decode()
    key = json.dumps(SECRETS["rsa-pem"].secret)[1:-1]  # as the JSONL line holds it: newlines escaped
    cut = text.index(key) + 700  # a page boundary inside the key block, then a page wholly inside it
    label = "[masked:private_key]"
    async with make_app() as app:
        rel = add_trajectory(app, "run.jsonl", data)
        pages, offset = [], 0
        for length in (cut, 100, len(text)):
            ok, page = await run_job(app, "procedure_read", kind="trajectory", path=rel, offset=offset, length=length)
            assert ok and page["offset"] == offset and page["length"] == min(length, len(text) - offset)
            assert not {f for item in items for f in fragments(item.secret) if f in page["text"]}
            pages.append(page)
            offset = page["next_offset"]
        assert pages[0]["text"].endswith(label) and pages[1]["text"] == label and pages[2]["text"].startswith(label)
        assert "".join(text[p["offset"] : p["offset"] + p["length"]] for p in pages) == text


async def test_the_token_cap_applies_to_the_masked_text_and_never_cuts_a_label(make_app):
    data, items = trajectory_with_secrets()
    components = {"procedure_memory": {"default": {"read_max_tokens": 12}}}
    async with make_app(components=components) as app:
        rel = add_trajectory(app, "run.jsonl", data)
        text, offset, pages = data.decode(), 0, []
        while offset is not None:
            ok, page = await run_job(app, "procedure_read", kind="trajectory", path=rel, offset=offset, length=4000)
            assert ok and page["tokens"] <= 12 and page["length"] > 0, page
            # every label is whole: the text is the copy's covered characters with each secret's part masked
            covered = text[offset : offset + page["length"]]
            assert page["text"] == mask_secrets(covered, secrets_within(text, offset, offset + len(covered)))
            assert page["text"].count("[masked:") == page["secrets_masked"]
            pages.append(page)
            offset = page["next_offset"]
        assert len(pages) > len(items)  # the cap cut the file into many pages, around and between the labels
        assert "".join(text[p["offset"] : p["offset"] + p["length"]] for p in pages) == text
        assert not {f for item in items for f in fragments(item.secret) if f in "".join(p["text"] for p in pages)}


async def test_the_extraction_agent_reads_the_excerpt_unmasked(make_app):
    data, items = trajectory_with_secrets()
    async with make_app() as app:
        rel = add_trajectory(app, "run.jsonl", data)
        run = memory_of(app).grants.begin_attempt("req-1", [rel])
        ok, answer = await call_tool(app, run, "procedure_read", kind="trajectory", path=rel)
        assert ok and answer["text"] == data.decode()
        assert "secrets_masked" not in answer


async def test_masking_off_serves_excerpts_as_they_are(make_app):
    data, _ = trajectory_with_secrets()
    components = {"procedure_memory": {"default": {"mask_trajectory_secrets": False}}}
    async with make_app(components=components) as app:
        rel = add_trajectory(app, "run.jsonl", data)
        ok, answer = await run_job(app, "procedure_read", kind="trajectory", path=rel)
        assert ok and answer["text"] == data.decode() and "secrets_masked" not in answer


async def test_a_label_longer_than_the_token_cap_is_served_whole_so_paging_moves_on(make_app):
    item = SECRETS["akia"]
    data = f"key {item.secret} end\n".encode()
    components = {"procedure_memory": {"default": {"read_max_tokens": 2}}}
    async with make_app(components=components) as app:
        rel = add_trajectory(app, "run.txt", data)
        ok, page = await run_job(app, "procedure_read", kind="trajectory", path=rel, offset=4, length=100)
        assert ok and page["text"] == "[masked:aws_access_key]" and page["length"] == len(item.secret), page
        assert page["tokens"] > 2 and page["secrets_masked"] == 1
        assert page["next_offset"] == 4 + len(item.secret)


async def test_a_secret_in_an_argument_the_job_does_not_take_is_refused_as_a_secret(make_app):
    item = SECRETS["sk-proj"]
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        before = durable_state(memory_of(app).workspace_path)
        ok, answer = await create(app, run, api_key=item.secret)  # not an argument of procedure_create
        assert_refused(ok, answer, item, "api_key")
        assert durable_state(memory_of(app).workspace_path) == before
        ok, answer = await create(app, run, api_key="<API_KEY>")  # without a secret: the unknown name is refused
        assert not ok and answer["error"]["code"] == "invalid_argument" and "`api_key`" in answer["error"]["message"]


# -- issue 30: the guard judges what is stored ------------------------------------------------------------------------

KEY = SECRETS["rsa-pem"]
KEY_BEGIN, KEY_REST = KEY.secret.split("\n", 1)


async def assert_refused_and_unchanged(app, result, item, field: str, before, stored: str = "") -> None:
    """Refused (``assert_refused``), nothing written, and search serves no part of the secret (of ``stored``: the
    part that was not already stored)."""
    assert_refused(*result, item, field)
    assert durable_state(memory_of(app).workspace_path) == before
    ok, answer = await run_job(app, "procedure_search", query="rotate deploy key")
    assert ok and not {f for f in fragments(stored or item.secret) if f in json.dumps(answer)}


@pytest.mark.parametrize("field", ["content", "when_to_use"])
async def test_an_append_that_completes_a_key_block_is_refused(make_app, field):
    """A field ending in a BEGIN line alone is documentation; the addition of the body and END line would store a
    whole key: the grown field is judged, not the addition alone."""
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, created = await create(app, run, **{field: f"Rotate the deploy key; the file starts with\n{KEY_BEGIN}"})
        assert ok, created
        before = durable_state(memory.workspace_path)
        result = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            expected_version=created["version"],
            **{f"{field}_append": KEY_REST},
        )
        body = KEY_REST.rsplit("\n", 1)[0]
        await assert_refused_and_unchanged(app, result, KEY, f"{field}_append", before, stored=body)
        assert "with this addition" in result[1]["error"]["message"]
        # an addition that completes nothing is written
        ok, answer = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            expected_version=created["version"],
            **{f"{field}_append": "Then reload."},
        )
        assert ok and answer["status"] == "updated", answer


async def test_a_key_split_across_two_fields_is_refused(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        before = durable_state(memory.workspace_path)
        result = await create(
            app, run, when_to_use=f"When the deploy key must be rotated:\n{KEY_BEGIN}", content=KEY_REST
        )
        await assert_refused_and_unchanged(app, result, KEY, "when_to_use + content", before)


@pytest.mark.parametrize(
    "filename",
    [
        "SK-" + "9F3A6C1E5B2D8F4A6C0E7B9D1F3A5C7E" + ".json",
        "GLPAT_" + "Zx9K2mPq7Lr4Tw8YvB3nQ5" + ".json",
        "notes-DOP_V1_" + "0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e" + ".json",
    ],
)
async def test_a_filename_whose_canonical_spelling_is_a_key_is_refused(make_app, filename):
    """``SK-<HEX>`` passes as sent but is stored as ``sk-<hex>``: the canonical name is judged."""
    answer = await refused_create(make_app, name=filename)
    assert {s["field"] for s in answer["secrets"]} == {"filename"}


@pytest.mark.parametrize(
    "text",
    [
        "Log in with p\u0430ssword=Zx9K2mPq7Lr4Tw8Y first.",  # a Cyrillic а
        "Log in with pass\u200bword=Zx9K2mPq7Lr4Tw8Y first.",  # a zero-width space
        "Log in with \uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44\uff1dZx9K2mPq7Lr4Tw8Y first.",  # fullwidth
    ],
)
async def test_a_credential_spelled_with_look_alike_characters_is_refused(make_app, text):
    answer = await refused_create(make_app, content=text)
    assert answer["secrets"][0]["offset"] == text.index("Zx9K")  # in the characters as sent
    assert "Zx9K2mPq" not in json.dumps(answer, ensure_ascii=False)


async def refused_create(make_app, **overrides) -> dict:
    """The answer of a create that must be refused with ``secret_detected``; nothing written, nothing listed."""
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        before = durable_state(memory.workspace_path)
        ok, answer = await create(app, run, **overrides)
        assert not ok and answer["error"]["code"] == "secret_detected", answer
        assert durable_state(memory.workspace_path) == before
        ok, listed = await run_job(app, "procedure_list")
        assert ok and listed["experiences"] == [], listed
        return answer


@pytest.mark.parametrize("label", ["ghp-url-user", "url-user-token", "mysql-p", "sshpass", "curl-u", "pw"])
async def test_common_credential_forms_are_refused(make_app, label):
    item = SECRETS[label]
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        before = durable_state(memory.workspace_path)
        result = await create(app, run, content=f"Deploy: {item.text}")
        await assert_refused_and_unchanged(app, result, item, "content", before)


async def test_a_long_key_block_is_masked_in_an_excerpt_far_from_its_begin_line(make_app):
    """An excerpt that starts more than the scan margin after a key's BEGIN line is still the key's: masked."""
    import random
    import string

    rng = random.Random(9)
    body = "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(60_000))
    key = (
        "-----BEGIN RSA PRIVATE KEY-----\n"
        + "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
        + "\n-----END RSA PRIVATE KEY-----"
    )
    data = json.dumps({"role": "tool", "content": key}).encode() + b"\n" + b'{"role": "user", "content": "ok"}\n'
    async with make_app() as app:
        rel = add_trajectory(app, "long-key.jsonl", data)
        text = data.decode()
        for offset in (20_000, 40_000, 55_000):
            ok, page = await run_job(app, "procedure_read", kind="trajectory", path=rel, offset=offset, length=2000)
            assert ok and page["secrets_masked"] == 1 and page["text"] == "[masked:private_key]", page
        end = text.index("-----END RSA PRIVATE KEY-----")
        ok, page = await run_job(app, "procedure_read", kind="trajectory", path=rel, offset=end - 500, length=2000)
        assert ok and page["text"].startswith("[masked:private_key]") and '"role": "user"' in page["text"]
        assert not {f for f in fragments(key) if f in page["text"]}

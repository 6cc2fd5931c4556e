"""The public schema (exactly four fields, names, versions) and the typed settings with their token ceilings."""

import json

import pytest

from reme_procedure_memory.schema import Experience, check_name, parse_experience, version_of
from reme_procedure_memory.errors import InvalidExperience
from reme_procedure_memory.settings import ProcedureSettings, TokenLimits, load_settings

from helpers import experience_record


def test_experience_has_exactly_the_four_spec_fields_in_order():
    exp = Experience.model_validate(experience_record("d", "w", "c"))
    data = json.loads(exp.to_bytes())
    assert list(data) == ["description", "when-to-use", "content", "sources"]
    assert "id" not in data


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda r: r.update(id="x"), "Extra inputs"),
        (lambda r: r.pop("sources"), "sources"),
        (lambda r: r.update(sources=[]), "sources"),
        (lambda r: r.update(content="   "), "blank"),
        (lambda r: r.update(sources=["/etc/passwd"]), "workspace-relative"),
        (lambda r: r.update(sources=["a/../b"]), "workspace-relative"),
        (lambda r: r.update(sources=["s/t.jsonl", "s/t.jsonl"]), "repeat"),
        (lambda r: r.update(when_to_use="x"), "Extra inputs"),  # the file key is hyphenated
        (lambda r: r.update(when_to_use=r.pop("when-to-use")), "when-to-use"),
    ],
)
def test_invalid_experiences_are_rejected_with_a_reason(mutate, reason):
    record = experience_record("d", "w", "c")
    mutate(record)
    with pytest.raises(InvalidExperience, match=reason):
        parse_experience(json.dumps(record).encode())


def test_parse_rejects_non_json_and_non_objects():
    with pytest.raises(InvalidExperience, match="invalid JSON"):
        parse_experience(b"{not json")
    with pytest.raises(InvalidExperience, match="not an object"):
        parse_experience(b"[1, 2]")
    with pytest.raises(InvalidExperience, match="UTF-8"):
        parse_experience(b"\xff\xfe")


def test_version_is_derived_from_bytes():
    a = Experience.model_validate(experience_record("d", "w", "c")).to_bytes()
    b = Experience.model_validate(experience_record("d", "w", "c2")).to_bytes()
    assert version_of(a) == version_of(a) and version_of(a) != version_of(b)
    assert len(version_of(a)) == 16


@pytest.mark.parametrize("name", ["a.json", "rebuild-search-after-config-change.json", "v2-rollout.json"])
def test_valid_names(name):
    assert check_name(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "A.json",
        "a_b.json",
        "a--b.json",
        "-a.json",
        "a.txt",
        "a",
        "../a.json",
        "a/b.json",
        "a b.json",
        "x" * 200 + ".json",
        ".json",
    ],
)
def test_invalid_names(name):
    assert check_name(name) is not None


def test_default_token_targets_and_acceptance_ceilings():
    limits = TokenLimits()
    assert (limits.segment, limits.summary, limits.description, limits.when_to_use, limits.content) == (
        98_304,
        8_192,
        128,
        512,
        2_048,
    )
    assert (limits.context, limits.reserve) == (262_144, 4_096)
    assert [limits.ceiling(t) for t in (8_192, 128, 512, 2_048)] == [9_011, 140, 563, 2_252]


def test_default_settings():
    settings = ProcedureSettings()
    assert settings.procedure_dir == "procedures" and settings.trajectory_subdir == "trajectories"
    assert settings.max_file_bytes == 20 * 1024 * 1024
    assert settings.tokenizer_source == "Qwen/Qwen3.8-27B"
    assert settings.vector_weight == 0.7
    # an update may grow an experience to 250 tokens, the target the agent is told, accepted up to 300
    assert (settings.extraction.grow_limit, settings.extraction.grow_ceiling()) == (250, 300)


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"max_file_bytes": 0}, "max_file_bytes"),
        ({"procedure_dir": "../out"}, "procedure_dir"),
        ({"trajectory_subdir": "/abs"}, "trajectory_subdir"),
        ({"token_limits": {"segment": -1}}, "token_limits.segment"),
        ({"token_limits": {"reserve": 300000}}, "token_limits"),
        ({"token_limits": {"segmnt": 5}}, "token_limits.segmnt"),
        ({"vector_weight": 2}, "vector_weight"),
        ({"extraction": {"grow_slack": 1.5}}, "extraction.grow_slack"),
        ({"unknown_key": 1}, "unknown_key"),
    ],
)
def test_bad_settings_name_the_key(raw, key):
    with pytest.raises(ValueError, match=rf"components\.procedure_memory\.default\.{key}"):
        load_settings(raw, prefix="components.procedure_memory.default")

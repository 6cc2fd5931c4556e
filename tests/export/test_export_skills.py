"""Rendering an experience as an Agent Skills folder (issue 22 item 2; export/skills.py, export/plan.py): pure
functions, checked against the format's reference validator and the strict rules of ``helpers.agent_skills`` — and
those checks are shown to refuse malformed skills, so their acceptance means something."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
import strictyaml
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from reme_procedure_memory.export.marker import INDEX_FILE, Entry, Marker, parse_marker
from reme_procedure_memory.export.plan import Found, assign_names, plan_export, render, sha256
from reme_procedure_memory.export.skills import (
    MAX_DESCRIPTION_CHARS,
    code_span,
    render_skill,
    skill_description,
    skill_name,
    yaml_string,
)
from reme_procedure_memory.schema import NAME_PATTERN, Experience
from reme_procedure_memory.storage.experiences import StoredExperience

from helpers.agent_skills import skill_problems, strict_problems

SOURCE = "session/trajectories/run.jsonl"


def experience(
    description="Rebuild search after a configuration change",
    when_to_use="After changing search configuration when results appear stale",
    content="1. Rebuild the indexes.\n2. Verify a known query.",
    sources=(SOURCE,),
) -> Experience:
    return Experience.model_validate(
        {"description": description, "when-to-use": when_to_use, "content": content, "sources": list(sources)}
    )


def stored(name: str, exp: Experience | None = None) -> StoredExperience:
    return StoredExperience(f"procedures/{name}", "0123456789abcdef", exp or experience())


def write_skill(root, skill) -> object:
    folder = root / skill.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_bytes(skill.data)
    return folder


# -- names -------------------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.from_regex(r"\A[a-z0-9]{1,12}(-[a-z0-9]{1,12}){0,12}\Z"))
@example("a" * 64)
@example("a" * 65)
@example("abcd-" * 20 + "e")  # its 55-character prefix ends with a hyphen
def test_every_experience_name_maps_to_a_valid_skill_name(stem):
    filename = f"{stem}.json"
    assert NAME_PATTERN.match(filename)
    name = skill_name(filename)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) and len(name) <= 64, name
    if len(stem) <= 64:
        assert name == stem  # short names are kept as they are
    else:  # a prefix, then 8 hex digits of the whole stem's SHA-256
        assert name.endswith("-" + hashlib.sha256(stem.encode()).hexdigest()[:8])
        assert stem.startswith(name[:-9])


def test_long_names_that_share_a_prefix_stay_distinct():
    base = "restart-the-payment-service-after-the-database-failover-completes-in"
    names = {skill_name(f"{base}-region-{i}.json") for i in range(50)}
    assert len(names) == 50 and all(len(n) == 64 for n in names)


def test_a_name_shared_by_two_experiences_goes_to_the_one_it_belongs_to():
    long = "a" * 60 + "-" + "b" * 40 + ".json"
    assert assign_names([stored(long)]) == ([(skill_name(long), stored(long))], [])  # alone, a long name is its own
    squatter = f"{skill_name(long)}.json"  # another experience named exactly like the long one's skill
    named, refused = assign_names([stored(long), stored(squatter), stored("other.json")])
    assert [(n, s.path) for n, s in named] == [
        (skill_name(long), f"procedures/{squatter}"),
        ("other", "procedures/other.json"),
    ]
    assert [(r["path"], r["skill"]) for r in refused] == [(f"procedures/{long}", skill_name(long))]
    assert f"procedures/{squatter}" in refused[0]["reason"] and "rename" in refused[0]["reason"]


# -- description -------------------------------------------------------------------------------------------------------


def test_description_joins_what_and_when_on_one_line():
    text, cut = skill_description("Rotate credentials\nafter a leak", "When keys\tleaked  to a repository\n")
    assert (text, cut) == ("Rotate credentials after a leak. When to use: When keys leaked to a repository", False)
    assert skill_description("Done!", "w")[0] == "Done! When to use: w"  # no second full stop


def test_a_long_description_is_cut_at_a_space_and_marked():
    words = " ".join(f"word{i}" for i in range(400))
    text, cut = skill_description("Clean a failed build", words)
    assert cut and len(text) <= MAX_DESCRIPTION_CHARS and text.endswith("\u2026")
    assert text.startswith("Clean a failed build. When to use: word0 word1")
    assert re.search(r"word\d+\u2026$", text) and words.startswith(
        text[len("Clean a failed build. When to use: ") : -1]
    )


def test_text_without_spaces_is_cut_at_the_limit():
    text, cut = skill_description("清理失败的构建", "当" * 3000)
    assert cut and len(text) == MAX_DESCRIPTION_CHARS and text.endswith("当\u2026")


def test_exactly_1024_characters_are_not_cut():
    what = "d" * 10
    text, cut = skill_description(what, "w" * (MAX_DESCRIPTION_CHARS - len(what) - len(". When to use: ")))
    assert len(text) == MAX_DESCRIPTION_CHARS and not cut


# -- YAML and Markdown quoting -----------------------------------------------------------------------------------------

HOSTILE = [
    "true",
    "null",
    "123",
    "0x1f",
    "1e3",
    "~",
    "- item",
    "key: value",
    "# comment",
    "'quoted'",
    '"double"',
    "back\\slash",
    "---",
    "a --- b ---- c",
    "-",
    "--",
    "\x00nul\x07bell\x7fdel\x85nel",
    "\u2028\u2029\ufeff",
    "tab\there",
    "🔥 émoji",
    "line\nbreak",
    "[flow]",
    "{flow: map}",
    "&anchor *alias",
    "!tag",
    "@at `tick`",
]


@pytest.mark.parametrize("text", HOSTILE, ids=ascii)
def test_yaml_strings_read_back_exactly_by_yaml_1_1_and_the_reference_parser(text):
    scalar = yaml_string(text)
    assert "---" not in scalar and "\n" not in scalar
    assert yaml.safe_load(f"k: {scalar}\n") == {"k": text}
    assert strictyaml.load(f"k: {scalar}\n").data == {"k": text}


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_any_text_reads_back_exactly(text):
    scalar = yaml_string(text)
    assert "---" not in scalar
    assert yaml.safe_load(f"k: {scalar}\n") == {"k": text}


@pytest.mark.parametrize("text, span", [("run.jsonl", "`run.jsonl`"), ("a`b", "``a`b``"), ("`x", "`` `x ``")])
def test_code_spans_hold_backticks(text, span):
    assert code_span(text) == span


# -- whole skills ------------------------------------------------------------------------------------------------------


def test_a_rendered_skill_has_the_layout_and_passes_both_parsers(tmp_path):
    skill = render_skill(
        "rotate-leaked-credentials",
        "procedures/rotate-leaked-credentials.json",
        "0123456789abcdef",
        experience(
            "Rotate credentials after a leak",
            "When credentials leaked",
            "1. Revoke.\n2. Reissue.\n",
            sources=(SOURCE, "session/trajectories/run-2.jsonl"),
        ),
    )
    assert skill.data.decode() == (
        "---\n"
        'name: "rotate-leaked-credentials"\n'
        'description: "Rotate credentials after a leak. When to use: When credentials leaked"\n'
        "metadata:\n"
        '  reme-experience: "procedures/rotate-leaked-credentials.json"\n'
        '  reme-version: "0123456789abcdef"\n'
        "---\n"
        "\n"
        "1. Revoke.\n2. Reissue.\n"
        "\n"
        "## Sources\n"
        "\n"
        "Trajectories this procedure was learned from (paths in its ReMe workspace):\n"
        "\n"
        "- `session/trajectories/run.jsonl`\n"
        "- `session/trajectories/run-2.jsonl`\n"
    )
    assert skill_problems(write_skill(tmp_path, skill)) == []


def test_a_cut_description_leaves_both_texts_whole_in_the_body(tmp_path):
    when = "When " + "the deployment fails again " * 60
    skill = render_skill("x", "procedures/x.json", "v", experience("Roll back", when))
    assert skill.cut
    body = skill.data.decode().split("\n---\n", 1)[1]
    assert "## Description\n\nRoll back\n" in body and f"## When to use\n\n{when}\n" in body
    assert body.index("1. Rebuild") < body.index("## Description") < body.index("## Sources")
    assert skill_problems(write_skill(tmp_path, skill)) == []


@settings(max_examples=30, deadline=None)
@given(
    description=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300),
    when=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=1500),
    content=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300),
)
def test_any_experience_renders_a_skill_both_parsers_accept(tmp_path_factory, description, when, content):
    if not (description.strip() and when.strip() and content.strip()):
        return  # not an experience (its fields are non-blank)
    skill = render_skill("any-name", "procedures/any-name.json", "v", experience(description, when, content))
    assert skill_problems(write_skill(tmp_path_factory.mktemp("skills"), skill)) == []


# -- the strict parser refuses malformed skills ------------------------------------------------------------------------

GOOD = '---\nname: "good-skill"\ndescription: "Does a thing. When to use: always"\n---\n\nBody.\n'
MALFORMED = {
    "no front matter": "name: good-skill\n",
    "unclosed front matter": '---\nname: "good-skill"\ndescription: "d"\n',
    "not a mapping": "---\n- a\n- b\n---\nbody\n",
    "missing description": '---\nname: "good-skill"\n---\n',
    "missing name": '---\ndescription: "d"\n---\n',
    "unknown key": '---\nname: "good-skill"\ndescription: "d"\nversion: "1"\n---\n',
    "uppercase name": '---\nname: "Good-Skill"\ndescription: "d"\n---\n',
    "consecutive hyphens": '---\nname: "good--skill"\ndescription: "d"\n---\n',
    "leading hyphen": '---\nname: "-good-skill"\ndescription: "d"\n---\n',
    "non-ASCII name": '---\nname: "gööd-skill"\ndescription: "d"\n---\n',
    "folder mismatch": '---\nname: "other-skill"\ndescription: "d"\n---\n',
    "unquoted number name": "---\nname: 123\ndescription: d\n---\n",
    "empty description": '---\nname: "good-skill"\ndescription: ""\n---\n',
    "long description": '---\nname: "good-skill"\ndescription: "' + "d" * 1025 + '"\n---\n',
    "long compatibility": '---\nname: "good-skill"\ndescription: "d"\ncompatibility: "' + "c" * 501 + '"\n---\n',
    "metadata not strings": '---\nname: "good-skill"\ndescription: "d"\nmetadata:\n  n: [1, 2]\n---\n',
    "--- inside a value": '---\nname: "good-skill"\ndescription: "a --- b"\n---\n',
    "not UTF-8": b'---\nname: "good-skill"\ndescription: "\xff"\n---\n',
}


def test_the_strict_parser_accepts_a_well_formed_skill(tmp_path):
    (tmp_path / "good-skill").mkdir()
    (tmp_path / "good-skill" / "SKILL.md").write_text(GOOD)
    assert skill_problems(tmp_path / "good-skill") == []


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_the_strict_parser_refuses_malformed_skills(tmp_path, case):
    folder = tmp_path / "good-skill"
    folder.mkdir()
    data = MALFORMED[case]
    (folder / "SKILL.md").write_bytes(data if isinstance(data, bytes) else data.encode())
    assert skill_problems(folder) != [], case
    if case in ("non-ASCII name", "unquoted number name", "--- inside a value"):
        assert strict_problems(folder) != []  # rules the reference validator alone lets through


# -- the marker and the plan -------------------------------------------------------------------------------------------


def test_the_marker_round_trips_and_refuses_paths_the_export_never_writes():
    marker = Marker(
        "/ws", {INDEX_FILE: Entry(("a" * 64,)), "x/SKILL.md": Entry(("b" * 64, "c" * 64), "procedures/x.json")}
    )
    assert parse_marker(json.dumps(marker.to_json()).encode()) == marker
    for bad in ("../../etc/passwd", "x/../../y/SKILL.md", "/abs/SKILL.md", "X/SKILL.md", "x/other.md", "x--y/SKILL.md"):
        raw = {**marker.to_json(), "files": {bad: {"sha256": ["a" * 64]}}}
        with pytest.raises(ValueError, match="not a file the export writes"):
            parse_marker(json.dumps(raw).encode())
    for raw in (
        b"{",
        b"[]",
        json.dumps({**marker.to_json(), "format": 2}).encode(),
        json.dumps({**marker.to_json(), "files": {"x/SKILL.md": {"sha256": ["short"]}}}).encode(),
    ):
        with pytest.raises(ValueError):
            parse_marker(raw)


def test_plan_creates_rewrites_only_its_own_changed_files_and_refuses_the_rest():
    skills, index, _ = render([stored("a.json"), stored("b.json", experience(content="new")), stored("c.json")])
    a, b, c = skills
    recorded = {
        INDEX_FILE: Entry((sha256(b"old index"),)),
        a.file: Entry((sha256(a.data),), a.path),
        b.file: Entry((sha256(b"old b"),), b.path),
        "gone/SKILL.md": Entry((sha256(b"gone"),), "procedures/gone.json"),
        "edited/SKILL.md": Entry((sha256(b"as written"),), "procedures/edited.json"),
        "invalid/SKILL.md": Entry((sha256(b"inv"),), "procedures/invalid.json"),
    }
    found = {
        INDEX_FILE: Found("file", sha256(b"old index")),
        "a": Found("dir"),
        a.file: Found("file", sha256(a.data)),
        "b": Found("dir"),
        b.file: Found("file", sha256(b"old b")),
        "gone": Found("dir"),
        "gone/SKILL.md": Found("file", sha256(b"gone")),
        "edited": Found("dir"),
        "edited/SKILL.md": Found("file", sha256(b"edited by hand")),
        "invalid": Found("dir"),
        "invalid/SKILL.md": Found("file", sha256(b"inv")),
    }
    plan = plan_export(skills, index, recorded, found, present={a.path, b.path, c.path, "procedures/invalid.json"})
    assert plan.conflicts == []
    assert (plan.created, plan.updated, plan.unchanged) == ([c.file], [INDEX_FILE, b.file], [a.file])
    assert set(plan.writes) == {INDEX_FILE, b.file, c.file} and plan.removes == ["gone/SKILL.md"]
    assert [k["path"] for k in plan.kept] == ["edited/SKILL.md", "invalid/SKILL.md"]
    assert plan.during[b.file].hashes == (sha256(b"old b"), sha256(b.data))  # either version is the export's own
    assert plan.after[b.file].hashes == (sha256(b.data),)
    assert "gone/SKILL.md" in plan.during and "gone/SKILL.md" not in plan.after
    assert "edited/SKILL.md" not in plan.after and plan.after["invalid/SKILL.md"] == recorded["invalid/SKILL.md"]

    foreign = {**found, "c": Found("dir"), a.file: Found("file", sha256(b"edited")), INDEX_FILE: Found("link")}
    plan = plan_export(skills, index, recorded, foreign, present={a.path, b.path, c.path})
    assert plan.conflicts == [
        f"{INDEX_FILE} is a symbolic link, where the export writes a file",
        f"{a.file} was changed since the export wrote it",
        "the folder c/ is there and was not written by the export",
    ]

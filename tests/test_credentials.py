"""The secret rule set (``credentials.py``), a pure module: every planted secret found with its kind and exact span in
every context, none of the look-alikes or of the real fixture data flagged, masking and its offsets."""

from __future__ import annotations

import json
import random
import re
import string
import uuid

import pytest
from reme_procedure_memory.credentials import (
    _PREFIXED,
    KINDS,
    Finding,
    find_secrets,
    looks_random,
    mask_label,
    mask_secrets,
    masked_prefix,
    secrets_within,
)

from helpers import FIXTURES
from helpers.planted import in_field, in_trajectory, look_alikes, planted

SEEDS = range(5)
PLANTED = [item for seed in SEEDS for item in planted(seed)]


def spans(text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start : f.end]) for f in find_secrets(text)]


@pytest.mark.parametrize("item", planted(0), ids=lambda p: p.label)
def test_a_planted_secret_is_found_exactly_with_its_kind_in_every_plain_context(item):
    for seed_item in [p for p in PLANTED if p.label == item.label]:
        for text in (seed_item.text, in_field(seed_item), in_trajectory(seed_item, "log")):
            assert (seed_item.kind, seed_item.secret) in spans(text), text


@pytest.mark.parametrize("item", planted(0), ids=lambda p: p.label)
@pytest.mark.parametrize("style", ["jsonl", "md"])
def test_a_planted_secret_inside_escaped_tool_arguments_is_found_and_masked(item, style):
    """JSONL tool arguments are JSON inside JSON, Markdown shows a call's arguments as Python literals: a key block's
    newlines are escaped there, so its lines are checked one by one."""
    for seed_item in [p for p in PLANTED if p.label == item.label]:
        line = in_trajectory(seed_item, style)
        findings = find_secrets(line)
        assert seed_item.kind in {f.kind for f in findings}, line
        masked = mask_secrets(line, findings)
        for piece in re.split(r"\s+", seed_item.secret):
            assert len(piece) < 16 or piece not in masked


def test_every_token_format_of_the_rule_set_is_planted():
    for token in _PREFIXED:
        assert any(re.search(token.pattern, item.secret) for item in PLANTED), token.pattern
    assert {item.kind for item in PLANTED} == set(KINDS)


@pytest.mark.parametrize("seed", range(20))
def test_no_look_alike_is_flagged(seed):
    assert {label: spans(text) for label, text in look_alikes(seed) if find_secrets(text)} == {}


def test_the_real_fixture_trajectories_and_experiences_hold_no_secret():
    """The fixtures' BFCL trajectories and released experiences, and the example workspace's trajectories and the
    experiences a capable model extracted from them."""
    example = FIXTURES.parents[1] / "examples" / "bfcl-workspace"
    files = (
        sorted((FIXTURES / "trajectories").iterdir())
        + [FIXTURES / "experiences.jsonl"]
        + sorted((example / "session" / "trajectories").iterdir())
        + sorted((example / "procedures").iterdir())
    )
    assert len(files) >= 37  # 5 trajectories and the library of the fixtures, 20 trajectories and 11 experiences
    assert {f.name: spans(f.read_text()) for f in files if find_secrets(f.read_text())} == {}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_placeholder_the_answer_suggests_is_accepted_in_place_of_the_secret(kind):
    placeholder = KINDS[kind].placeholder
    for text in (
        f"api_key={placeholder}",
        f'"client_secret": "{placeholder}"',
        f"Authorization: Bearer {placeholder}",
        f"postgres://app:{placeholder}@db:5432/x",
        f"export TOKEN={placeholder}",
        f"-----BEGIN RSA PRIVATE KEY-----\n{placeholder}\n-----END RSA PRIVATE KEY-----",
    ):
        assert find_secrets(text) == [], text


def random_values(alphabet: str, length: int, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(length)) for _ in range(count)]


@pytest.mark.parametrize(
    ("alphabet", "length", "most_missed"),
    [
        ("0123456789abcdef", 32, 0),
        ("0123456789abcdef", 64, 0),
        (string.ascii_letters + string.digits + "+/", 40, 0),  # an AWS secret access key
        (string.ascii_letters + string.digits, 24, 10),  # 1.5% have no digit; of those some read as camel-case words
        (string.ascii_letters + string.digits, 40, 0),
        (string.ascii_lowercase + string.digits, 32, 10),
    ],
)
def test_random_values_look_random(alphabet, length, most_missed):
    """Of 2,000 random values of a format, at most ``most_missed`` are taken for words: the measured recall of
    ``looks_random`` on what real credentials are made of."""
    values = random_values(alphabet, length, 2000, seed=length)
    assert sum(not looks_random(v) for v in values) <= most_missed
    assert all(looks_random(str(uuid.UUID(int=random.Random(i).getrandbits(128), version=4))) for i in range(200))


@pytest.mark.parametrize(
    "value",
    [
        "securePass123",
        "db_password_prod_2024",
        "YOUR_API_KEY_HERE_123",
        "settings.api_key_v2",
        "os.environ.TOKEN",
        "<API_KEY>",
        "${DB_PASSWORD}",
        "%(password)s",
        "********************",
        "aaaaaaaaaaaaaaaa1",
        "sk-learn-compatible-v2",
        "/home/agent/projects/app2",
        "GetAccessTokenResponse",
        "0123456789012345",
    ],
)
def test_words_placeholders_and_code_do_not_look_random(value):
    assert not looks_random(value, 12)


def test_masking_replaces_each_secret_by_its_label_and_keeps_the_rest():
    items = [p for p in planted(1) if p.label in ("akia", "json-password", "postgres")]
    text = " | ".join(item.text for item in items)
    findings = find_secrets(text)
    masked = mask_secrets(text, findings)
    assert [f.kind for f in findings] == [item.kind for item in items]
    for item in items:
        assert item.secret not in masked
        assert mask_label(item.kind) in masked
    assert masked.replace(mask_label("aws_access_key"), "").startswith("aws_access_key_id = ")
    assert "postgresql://app:[masked:password_in_url]@db.internal:5432/orders" in masked


def test_masked_prefix_maps_every_cut_to_the_copy_and_never_cuts_a_label():
    text = "x" * 5 + " AKIAZ2345ABCDEFGHJ7K then api_key=Zx9K2mPq7Lr4Tw8Yv3Bn6Hj1 and the rest"
    findings = find_secrets(text)
    assert len(findings) == 2
    masked = mask_secrets(text, findings)
    for cut in range(len(masked) + 1):
        kept, covered = masked_prefix(findings, cut)
        assert kept <= cut
        assert masked[:kept] == mask_secrets(text[:covered], [f for f in findings if f.end <= covered])
        assert not any(f.start < covered < f.end for f in findings)  # a secret is covered whole or not at all


def test_secrets_within_finds_a_secret_cut_by_the_excerpt_edge_and_clips_it():
    key = next(p for p in planted(2) if p.label == "rsa-pem").secret
    text = "header line\n" * 100 + key + "\ntrailer\n" * 100
    at = text.index(key)
    middle = at + len(key) // 2
    assert secrets_within(text, middle, middle + 100) == [Finding(0, 100, "private_key")]
    assert secrets_within(text, at - 10, middle) == [Finding(10, middle - at + 10, "private_key")]
    token = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5"
    line = f"GITHUB_TOKEN={token} done"
    start = line.index(token) + 10
    assert secrets_within(line, start, start + 5) == [Finding(0, 5, "github_token")]
    assert secrets_within(line, 0, line.index(token)) == []


def test_findings_never_overlap_and_the_specific_rule_wins():
    jwt = next(p for p in planted(3) if p.kind == "jwt").secret
    text = f'{{"api_key": "sk-proj-{"Ab3dEf5gHi7jKl9mNo1pQr3sTu5vWx7yZa9b"}", "Authorization": "Bearer {jwt}"}}'
    findings = find_secrets(text)
    assert [f.kind for f in findings] == ["openai_api_key", "jwt"]
    assert all(a.end <= b.start for a, b in zip(findings, findings[1:]))


def test_the_released_library_format_is_clean():
    """ReMe's released experiences (the fixture's 40) as an agent would write them: no field is refused."""
    for line in (FIXTURES / "experiences.jsonl").read_text().splitlines():
        row = json.loads(line)
        for field in ("when_to_use", "content", "task_query"):
            assert find_secrets(row[field]) == [], (field, row[field][:80])


# -- issue 30: forms that passed the rule set (judged after Unicode folding; command lines; URL users; any length) ---

RANDOM_PASSWORD = "Xk9#mP2qLr7v"
GHP = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5"


def covered(text: str, secret: str) -> bool:
    """Whether one finding covers every character of ``secret`` in ``text``."""
    at = text.index(secret)
    return any(f.start <= at and at + len(secret) <= f.end for f in find_secrets(text))


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        ("p\u0430ssword=Zx9K2mPq7Lr4Tw8Y", "Zx9K2mPq7Lr4Tw8Y", "secret_assignment"),  # a Cyrillic а
        (
            "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44\uff1dZx9K2mPq7Lr4Tw8Y",
            "Zx9K2mPq7Lr4Tw8Y",
            "secret_assignment",
        ),
        (
            "pass\u200bword = Zx9K2mPq7Lr4Tw8Y",
            "Zx9K2mPq7Lr4Tw8Y",
            "secret_assignment",
        ),  # a zero-width space in the name
        (f"GITHUB_TOKEN={GHP[:10]}\u200b{GHP[10:]} done", f"{GHP[:10]}\u200b{GHP[10:]}", "github_token"),
        (f"token {GHP[:4]}\u2060{GHP[4:]}", f"{GHP[:4]}\u2060{GHP[4:]}", "github_token"),  # a word joiner
        ("\uff21\uff2b\uff29\uff21Z2345ABCDEFGHJ7K", "\uff21\uff2b\uff29\uff21Z2345ABCDEFGHJ7K", "aws_access_key"),
        ("\u0430pi_key: Zx9K2mPq7Lr4Tw8YvB3n", "Zx9K2mPq7Lr4Tw8YvB3n", "secret_assignment"),
    ],
)
def test_a_secret_is_judged_after_folding_and_masked_at_its_original_span(text, secret, kind):
    """NFKC, zero-width characters removed, look-alike letters folded: the finding is the original characters."""
    at = text.index(secret)
    assert [(f.start, f.end, f.kind) for f in find_secrets(text)] == [(at, at + len(secret), kind)]
    masked = mask_secrets(text, find_secrets(text))
    assert masked == text[:at] + mask_label(kind) + text[at + len(secret) :]


def test_folding_maps_spans_back_across_expansions_and_escapes():
    """Characters NFKC expands (a ligature) or drops before the secret move nothing: the span is the original one."""
    text = "\ufb01le \u00bd\u200b\u200b and pa\u200bssword=Zx9K2mPq7Lr4Tw8Y \ufb01n"
    secret = "Zx9K2mPq7Lr4Tw8Y"
    at = text.index(secret)
    assert find_secrets(text) == [Finding(at, at + len(secret), "secret_assignment")]
    assert secrets_within(text, at + 3, at + 6) == [Finding(0, 3, "secret_assignment")]


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        (f"git clone https://{GHP}@github.com/o/r.git", GHP, "github_token"),
        ("git clone https://Zx9K2mPq7Lr4Tw8YvB3nQ5@git.example.com/r.git", "Zx9K2mPq7Lr4Tw8YvB3nQ5", "token_in_url"),
        (f"mysql -u root -p{RANDOM_PASSWORD} orders", RANDOM_PASSWORD, "password_in_command"),
        ("mysqldump -uroot -phunter2 shop > shop.sql", "hunter2", "password_in_command"),
        (f"mysql --user=app --password={RANDOM_PASSWORD} -h db", RANDOM_PASSWORD, "password_in_command"),
        (f"sshpass -p '{RANDOM_PASSWORD}' ssh deploy@10.0.0.5", RANDOM_PASSWORD, "password_in_command"),
        ("sshpass -p hunter2 scp a.txt host:", "hunter2", "password_in_command"),
        (f"curl -u admin:{RANDOM_PASSWORD} https://api.example.com", RANDOM_PASSWORD, "password_in_command"),
        ('curl --user "admin:hunter2" https://x.example.com', "hunter2", "password_in_command"),
        ("wget --http-password=hunter2 https://x.example.com/f", "hunter2", "password_in_command"),
        ("docker login -u bot -p hunter2 registry.example.com", "hunter2", "password_in_command"),
        ("redis-cli -h cache -a hunter2 ping", "hunter2", "password_in_command"),
        ("PGPASSWORD=hunter2 psql -h db -U app", "hunter2", "password_in_command"),
        (f"pw={RANDOM_PASSWORD}", RANDOM_PASSWORD, "secret_assignment"),
        (f'{{"pwd": "{RANDOM_PASSWORD}"}}', RANDOM_PASSWORD, "secret_assignment"),
        ("db_pw: Xk9mP2qL7v", "Xk9mP2qL7v", "secret_assignment"),
    ],
)
def test_common_credential_forms_are_found(text, secret, kind):
    at = text.index(secret)
    assert (kind, secret) in spans(text), spans(text)
    # escaped in a JSONL tool call too
    line = json.dumps({"command": text})
    assert kind in {f.kind for f in find_secrets(line)}, line
    assert covered(text, secret) and text[at : at + len(secret)] == secret


@pytest.mark.parametrize(
    "text",
    [
        "mysql -u root -p",
        "mysql -u root -p orders",
        "mysql -h db -P 3306 -u app -p",
        "ssh -p 2222 deploy@host",
        "docker run -p 8080:80 nginx",
        "mkdir -p /tmp/a/b",
        "mysql -u root -p$MYSQL_ROOT_PASSWORD",
        'mysql -uroot -p"$DB_PASS" shop',
        "mysql -u root -proot",
        "mysql -p<PASSWORD>",
        "mysql --password=<PASSWORD>",
        "sshpass -p '<password>' ssh host",
        'sshpass -p "$SSHPASS" ssh host',
        "sshpass -e ssh host",
        'curl -u "$USER:$PASS" https://x.example.com',
        "curl -u admin:admin http://localhost:9200",
        "curl -u user:password https://x",
        "curl -u <user>:<password> https://x",
        "curl -u elastic: https://x",
        "curl -u ${API_KEY}: https://api",
        "curl -uadmin https://x",
        "pw=<PASSWORD>",
        "pw=${PW}",
        "pw = getpass()",
        "pwd: /home/agent/app2",
        "cd $(pwd)",
        "pwd=`pwd`",
        "wget --password=$WGET_PASSWORD https://x",
        "PGPASSWORD=$PGPASSWORD psql",
        "git clone https://github.com/org/repo.git",
        "git@github.com:org/repo.git",
        "https://x-access-token@github.com/o/r",
        "https://deploy-bot@git.example.com/r.git",
        "ssh://git@gitlab.example.com:2222/group/project.git",
        "https://user@example.com/path",
        "redis-cli -a $REDIS_PASSWORD",
        "the -----BEGIN RSA PRIVATE KEY----- line starts the file",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n...\n-----END OPENSSH PRIVATE KEY-----",
        "Copy the block from -----BEGIN PRIVATE KEY----- through -----END PRIVATE KEY----- into key.pem.",
        "Пароль и токен: см. документацию",
        "\u5bc6\u7801\uff1a\u8bf7\u4f7f\u7528\u73af\u5883\u53d8\u91cf\uff0c\u4e0d\u8981\u5199\u5728\u4ee3\u7801\u91cc",
    ],
)
def test_look_alikes_of_the_new_forms_are_not_flagged(text):
    assert spans(text) == []
    assert find_secrets(json.dumps({"command": text})) == []


def test_a_key_block_with_text_between_its_begin_line_and_its_body_is_found():
    key = next(p for p in planted(2) if p.label == "rsa-pem").secret
    begin, rest = key.split("\n", 1)
    text = f"{begin}\n(the body follows)\n{rest}"
    assert [(f.kind, text[f.start : f.end]) for f in find_secrets(text)] == [("private_key", text)]


@pytest.mark.parametrize("escaped", [False, True])
def test_a_key_block_of_any_length_is_masked_at_any_offset(escaped):
    """An excerpt far inside a key block longer than the scan margin is the key's: masked whole."""
    rng = random.Random(4)
    body = "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(120_000))
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    key = f"-----BEGIN RSA PRIVATE KEY-----\n{lines}\n-----END RSA PRIVATE KEY-----"
    text = "intro\n" * 50 + key + "\nafter\n" * 50
    text = json.dumps({"content": text}) if escaped else text
    start = text.index("-----BEGIN")
    for offset in (20_000, 50_000, 100_000):
        at = start + offset
        assert secrets_within(text, at, at + 500) == [Finding(0, 500, "private_key")]
    end = text.index("-----END RSA PRIVATE KEY-----") + len("-----END RSA PRIVATE KEY-----")
    tail = secrets_within(text, end - 100, end + 100)
    assert tail == [Finding(0, 100, "private_key")]
    assert secrets_within(text, end + 1, end + 100) == []

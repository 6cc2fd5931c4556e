"""A corpus of planted secrets and of look-alikes that are not secrets, for the secret guard's tests and benchmark.

Every secret here is synthetic: random characters from a seeded generator in the published format of its kind (none
is, or was, a real credential). ``planted(seed)`` gives each kind in several formats, each with the kind the guard
must name; ``in_field`` puts one into a sentence an extraction agent could write into an experience field, and
``in_trajectory`` into a trajectory line (JSONL tool arguments as escaped JSON, Markdown, a log line), as agent
trajectories carry them. ``look_alikes(seed)`` are the strings of real trajectories that resemble secrets and must
never be flagged: ids, hashes, UUIDs, base64 images, tool call ids, paging tokens, placeholders, code references.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from dataclasses import dataclass

B62 = string.ascii_letters + string.digits
B64URL = B62 + "-_"
B32 = string.ascii_uppercase + "234567"
HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Planted:
    """One planted secret: its exact text, the kind the guard must name, and how it appears in its context."""

    kind: str
    secret: str  # the characters the guard must report (and mask)
    text: str  # the secret in its own context, e.g. ``api_key = "<secret>"`` (contains ``secret``)
    label: str  # what it is, for test ids


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _password(rng: random.Random, n: int, symbols: str = "!@#^_+-=") -> str:
    """A generated password: at least one lowercase, uppercase, digit and symbol, not starting with a symbol (in a
    URL, ``symbols="!_-"``: the ones a URL's user info may hold unencoded)."""
    while True:
        value = rng.choice(string.ascii_letters) + _pick(rng, B62 + symbols, n - 1)
        if all(
            any(c in group for c in value)
            for group in (string.ascii_lowercase, string.ascii_uppercase, string.digits, symbols)
        ):
            return value


def _b64(rng: random.Random, n_bytes: int) -> str:
    return base64.b64encode(rng.randbytes(n_bytes)).decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _pem(rng: random.Random, label: str, n_bytes: int, headers: str = "") -> str:
    body = _b64(rng, n_bytes)
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{headers}{lines}\n-----END {label}-----"


def _jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}).encode())
    claims = {"sub": str(rng.randrange(10**9)), "iat": 1733390000 + rng.randrange(10**6), "scope": "read write"}
    signature = _b64url(rng.randbytes(rng.choice([32, 64, 256])))
    return f"{header}.{_b64url(json.dumps(claims).encode())}.{signature}"


def planted(seed: int = 0) -> list[Planted]:
    """Every kind of secret in several realistic formats and contexts (deterministic for a seed)."""
    rng = random.Random(seed)
    out: list[Planted] = []

    def add(kind: str, label: str, secret: str, template: str = "{}") -> None:
        out.append(Planted(kind, secret, template.format(secret), label))

    add("private_key", "rsa-pem", _pem(rng, "RSA PRIVATE KEY", 1190))
    add("private_key", "pkcs8", _pem(rng, "PRIVATE KEY", 1218))
    add("private_key", "ec-pem", _pem(rng, "EC PRIVATE KEY", 121))
    add("private_key", "openssh", _pem(rng, "OPENSSH PRIVATE KEY", 399))
    add(
        "private_key",
        "encrypted-pem",
        _pem(
            rng,
            "RSA PRIVATE KEY",
            1192,
            f"Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{_pick(rng, HEX, 32).upper()}\n\n",
        ),
    )
    add("private_key", "pgp", _pem(rng, "PGP PRIVATE KEY BLOCK", 900, "Version: GnuPG v2\n\n"))
    add("aws_access_key", "akia", "AKIA" + _pick(rng, B32, 16), "aws_access_key_id = {}")
    add("aws_access_key", "asia", "ASIA" + _pick(rng, B32, 16), "export AWS_ACCESS_KEY_ID={}")
    add("aws_access_key", "aws-documented-example", "AKIAIOSFODNN7EXAMPLE", "the access key {} of the test account")
    add(
        "google_api_key",
        "aiza",
        "AIza" + _pick(rng, B64URL, 35),
        "https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key={}",
    )
    add("google_oauth", "gocspx", "GOCSPX-" + _pick(rng, B64URL, 28), '"client_secret": "{}"')
    add("google_oauth", "ya29", "ya29." + _pick(rng, B64URL, 160), "access token {}")
    add("anthropic_api_key", "sk-ant", "sk-ant-api03-" + _pick(rng, B64URL, 93) + "AA", "ANTHROPIC_API_KEY={}")
    add("openai_api_key", "sk-proj", "sk-proj-" + _pick(rng, B64URL, 156), 'client = OpenAI(api_key="{}")')
    add(
        "openai_api_key",
        "sk-legacy",
        "sk-" + _pick(rng, B62, 20) + "T3BlbkFJ" + _pick(rng, B62, 20),
        "OPENAI_API_KEY={}",
    )
    add("openai_api_key", "sk-dashscope", "sk-" + _pick(rng, HEX, 32), "DASHSCOPE_API_KEY: {}")
    add(
        "github_token",
        "ghp",
        "ghp_" + _pick(rng, B62, 36),
        "git clone https://x-access-token@github.com/o/r with GITHUB_TOKEN {}",
    )
    add("github_token", "ghs", "ghs_" + _pick(rng, B62, 36), "gh auth login --with-token <<< {}")
    add("github_token", "fine-grained", "github_pat_" + _pick(rng, B62, 22) + "_" + _pick(rng, B62, 59), "token: {}")
    add("gitlab_token", "glpat", "glpat-" + _pick(rng, B64URL, 20), "PRIVATE-TOKEN: {}")
    add(
        "slack_token",
        "xoxb",
        f"xoxb-{rng.randrange(10**11, 10**12)}-{rng.randrange(10**12, 10**13)}-{_pick(rng, B62, 24)}",
        "SLACK_BOT_TOKEN={}",
    )
    add(
        "slack_token",
        "webhook",
        f"https://hooks.slack.com/services/T{_pick(rng, B32, 8)}/B{_pick(rng, B32, 10)}/{_pick(rng, B62, 24)}",
        "curl -X POST -d @msg.json {}",
    )
    add("stripe_key", "sk-live", "sk_live_" + _pick(rng, B62, 99), "stripe.api_key = '{}'")
    add("stripe_key", "rk-live", "rk_live_" + _pick(rng, B62, 24), "restricted key {}")
    add("huggingface_token", "hf", "hf_" + _pick(rng, string.ascii_letters, 34), "huggingface-cli login --token {}")
    add("provider_api_key", "npm", "npm_" + _pick(rng, B62, 36), "//registry.npmjs.org/:_authToken={}")
    add("provider_api_key", "pypi", "pypi-AgEIcHlwaS5vcmc" + _pick(rng, B64URL, 120), "twine upload -p {}")
    add(
        "provider_api_key",
        "sendgrid",
        "SG." + _pick(rng, B64URL, 22) + "." + _pick(rng, B64URL, 43),
        "SENDGRID_API_KEY={}",
    )
    add("provider_api_key", "groq", "gsk_" + _pick(rng, B62, 52), "GROQ_API_KEY={}")
    add("provider_api_key", "xai", "xai-" + _pick(rng, B62, 80), "XAI_API_KEY={}")
    add("provider_api_key", "replicate", "r8_" + _pick(rng, B62, 37), "REPLICATE_API_TOKEN={}")
    add("provider_api_key", "digitalocean", "dop_v1_" + _pick(rng, HEX, 64), "doctl auth init -t {}")
    add("provider_api_key", "shopify", "shpat_" + _pick(rng, HEX, 32), "X-Shopify-Access-Token: {}")
    add("jwt", "jwt", _jwt(rng), "id_token={}")
    add("jwt", "jwt-in-cookie", _jwt(rng), "Cookie: session={}; Path=/")
    add("password_in_url", "postgres", _password(rng, 16, "!_-"), "postgresql://app:{}@db.internal:5432/orders")
    add("password_in_url", "mongodb", _pick(rng, B62, 20), "mongodb+srv://admin:{}@cluster0.abcde.mongodb.net/")
    add("password_in_url", "redis-no-user", _password(rng, 14, "!_-"), "redis://:{}@cache.internal:6379/0")
    add("password_in_url", "human-password", "hunter2", "https://deploy:{}@git.example.com/repo.git")
    add(
        "basic_auth",
        "basic",
        base64.b64encode(f"svc-user:{_password(rng, 14)}".encode()).decode(),
        "Authorization: Basic {}",
    )
    add("bearer_token", "bearer", _pick(rng, B62, 40), "curl -H 'Authorization: Bearer {}' https://api.example.com")
    add("bearer_token", "token-header", _pick(rng, HEX, 40), "Authorization: token {}")
    add("secret_assignment", "aws-secret", _b64(rng, 30), "aws_secret_access_key = {}")
    add("secret_assignment", "json-client-secret", _pick(rng, B64URL, 32), '{{"client_secret": "{}"}}')
    add("secret_assignment", "env-db-password", _password(rng, 18), "DB_PASSWORD={}")
    add("secret_assignment", "json-password", _password(rng, 14), '"password": "{}"')
    add("secret_assignment", "cli-password", _password(rng, 16), "mysql -u root --password {}")
    add("secret_assignment", "api-key-header", _pick(rng, HEX, 32), "X-Api-Key: {}")
    add(
        "secret_assignment",
        "azure-account-key",
        _b64(rng, 64),
        "DefaultEndpointsProtocol=https;AccountName=logs;AccountKey={};EndpointSuffix=core.windows.net",
    )
    add("secret_assignment", "session-token", _b64(rng, 120), "AWS_SESSION_TOKEN={}")
    add("secret_assignment", "uuid-api-key", str(uuid.UUID(int=rng.getrandbits(128), version=4)), "HEROKU_API_KEY={}")
    add("secret_assignment", "yaml-webhook-secret", _pick(rng, B62, 24), "webhook_secret: {}")
    add("secret_assignment", "kwarg-token", _pick(rng, HEX, 64), 'client = Client(auth_token="{}")')
    # issue 30: a token as a URL's user, passwords on command lines, short password names
    add("github_token", "ghp-url-user", "ghp_" + _pick(rng, B62, 36), "git clone https://{}@github.com/o/r.git")
    add("token_in_url", "url-user-token", _pick(rng, B62, 32), "git remote add origin https://{}@git.example.com/r")
    add("password_in_command", "mysql-p", _password(rng, 12), "mysql -h db -u app -p{} orders")
    add("password_in_command", "sshpass", _password(rng, 10), "sshpass -p '{}' ssh deploy@10.0.0.5")
    add("password_in_command", "curl-u", _password(rng, 12), "curl -u admin:{} https://jenkins.internal/api")
    add("password_in_command", "pgpassword", _password(rng, 14), "PGPASSWORD={} psql -h db -U app")
    add("secret_assignment", "pw", _password(rng, 10), "pw={}")
    return out


def in_field(item: Planted) -> str:
    """The planted secret inside a sentence an extraction agent could write into an experience field."""
    return f"Authenticate first ({item.text}), then retry the failed request and check its status."


def in_trajectory(item: Planted, style: str) -> str:
    """The planted secret inside one trajectory line of ``style``: ``jsonl`` (a tool call whose arguments are escaped
    JSON), ``md`` (a Markdown transcript line) or ``log`` (a timestamped log line)."""
    if style == "jsonl":
        arguments = json.dumps({"command": item.text})
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_" + "Q3kT9x" * 4,
                    "type": "function",
                    "function": {"name": "run_shell", "arguments": arguments},
                }
            ],
        }
        return json.dumps(call) + "\n"
    if style == "md":
        return f"**assistant → tool** `run_shell(command={item.text!r})`\n\n"
    return f"2026-12-05T10:00:00Z INFO tool run_shell command={item.text}\n"


def look_alikes(seed: int = 0) -> list[tuple[str, str]]:
    """(label, text) of strings real trajectories and experiences carry that resemble secrets and are none."""
    rng = random.Random(seed)
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(3000)).decode()
    sha = hashlib.sha256(rng.randbytes(16)).hexdigest()
    items = [
        ("uuid", f'"request_id": "{uuid.UUID(int=rng.getrandbits(128), version=4)}"'),
        ("uuid-bare", str(uuid.UUID(int=rng.getrandbits(128), version=4))),
        ("sha256", f"sha256 {sha}"),
        ("git-sha", f"commit {hashlib.sha1(rng.randbytes(8)).hexdigest()}"),
        ("docker-digest", f"image@sha256:{sha}"),
        ("npm-integrity", f'"integrity": "sha512-{_b64(rng, 64)}"'),
        ("png-data-uri", f"![screenshot](data:image/png;base64,{png})"),
        ("png-json", json.dumps({"type": "image", "data": png})),
        ("openai-tool-call-id", f'"tool_call_id": "call_{_pick(rng, B62, 24)}"'),
        ("anthropic-tool-use-id", f'"id": "toolu_01{_pick(rng, B62, 22)}"'),
        ("completion-id", f'"id": "chatcmpl-{_pick(rng, B62, 29)}"'),
        ("message-id", f'"id": "msg_01{_pick(rng, B62, 22)}"'),
        ("ulid", f"run {_pick(rng, '0123456789ABCDEFGHJKMNPQRSTVWXYZ', 26)}"),
        ("page-token", f'"next_page_token": "{_b64(rng, 48)}"'),
        ("page-token-camel", f'"nextPageToken": "{_pick(rng, B64URL, 40)}"'),
        ("max-tokens", '"max_tokens": 4096, "input_tokens": 18234, "usage": {"total_tokens": 20480}'),
        ("token-type", '"token_type": "Bearer", "expires_in": 3599'),
        ("ssh-public-key", f'"public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{_pick(rng, B62, 43)} me@host"'),
        ("key-id", f'"key_id": "{_pick(rng, HEX, 32)}"'),
        ("kms-key-arn", f"arn:aws:kms:us-east-1:123456789012:key/{uuid.UUID(int=rng.getrandbits(128))}"),
        ("idempotency-key", f'"idempotency_key": "{uuid.UUID(int=rng.getrandbits(128), version=4)}"'),
        ("cache-key", f'cache_key = "sha256:{sha}"'),
        ("password-hash", '"password_hash": "$2b$12$' + _pick(rng, B62 + "./", 53) + '"'),
        ("secret-name", '"secret_name": "prod/orders/db-password"'),
        ("placeholder-key", "api_key=<API_KEY>"),
        ("placeholder-bearer", "Authorization: Bearer <TOKEN>"),
        ("placeholder-url", "postgres://user:password@localhost:5432/app"),
        ("placeholder-url-env", "postgres://app:${DB_PASSWORD}@db:5432/app"),
        ("default-credentials", "postgresql://postgres:postgres@localhost:5432/postgres"),
        ("env-reference", 'api_key=os.environ["OPENAI_API_KEY"]'),
        ("attribute-reference", "token = settings.GITHUB_TOKEN_V2"),
        ("call-reference", "password = getpass.getpass(prompt)"),
        ("template-reference", "password: {{ vault_db_password_2024 }}"),
        ("key-header-only", "The file starts with -----BEGIN RSA PRIVATE KEY----- and must stay private."),
        ("key-placeholder", "-----BEGIN PRIVATE KEY-----\n<PRIVATE_KEY>\n-----END PRIVATE KEY-----"),
        ("sk-mention", "an OpenAI key looks like sk-... and goes in OPENAI_API_KEY"),
        ("sk-words", "install sk-learn-compatible-estimators-v2 first"),
        ("task-id", f"task-{_pick(rng, B62, 24)} finished"),
        ("human-password", "password='securePass123'"),
        ("word-password", '"password": "db_password_prod_2024"'),
        ("placeholder-value", "OPENAI_API_KEY=YOUR_API_KEY_HERE_123"),
        ("author", '"author": "qwen3-8b", "authentication_status": true'),
        ("jwt-word", "a JWT has three parts, eyJhbGciOi..., separated by dots"),
        ("base64-bytes", f"payload {_b64(rng, 200)}"),
        ("hex-blob", f"checksum {_pick(rng, HEX, 128)}"),
        ("path-pwd", "pwd: /home/agent/projects/app2/src"),
        ("stripe-publishable", f"pk_live_{_pick(rng, B62, 24)}"),
        ("bypass-flag", '"bypass_cache": "7f3a9c1e5b2d8f4a6c0e"'),
        # issue 30: look-alikes of the command-line, URL-user and short-name rules, and of folded text
        ("mysql-prompt", "mysql -h db.internal -P 3306 -u app -p orders"),
        ("mysql-env", 'mysqldump -uroot -p"$MYSQL_ROOT_PASSWORD" shop > shop.sql'),
        ("port-flags", "ssh -p 2222 deploy@host && docker run -p 8080:80 nginx && mkdir -p /tmp/a/b"),
        ("sshpass-placeholder", "sshpass -p '<password>' ssh deploy@host; sshpass -e ssh host"),
        ("curl-placeholders", 'curl -u "$USER:$PASS" https://x.example.com; curl -u admin:admin http://localhost:9200'),
        ("pw-placeholder", "pw=<PASSWORD> and pwd=`pwd`"),
        (
            "url-users",
            "https://x-access-token@github.com/o/r, ssh://git@gitlab.example.com:2222/g/p.git, "
            f"https://{_pick(rng, string.ascii_lowercase, 8)}-bot@git.example.com/r.git",
        ),
        (
            "key-headers-doc",
            "Copy everything from -----BEGIN OPENSSH PRIVATE KEY----- through "
            "-----END OPENSSH PRIVATE KEY----- into ~/.ssh/id_ed25519.",
        ),
        ("cyrillic-prose", "Пароль и токен храните в переменных окружения, а не в коде."),
        ("chinese-prose", "密码：请使用环境变量，不要写在代码里（见 README）。"),
        ("fullwidth-words", "ｐａｓｓｗｏｒｄ： ｓｅｅ ｔｈｅ ｖａｕｌｔ"),
    ]
    return items


def fragments(secret: str, size: int = 8) -> set[str]:
    """Every run of ``size`` characters of ``secret`` that holds random material (a digit or a capital): what an
    answer must never repeat. A key block's lines count one by one; public parts of a format (``https://``,
    ``hooks.slack.com``) are not secret."""
    return {
        part[i : i + size]
        for part in secret.split()
        for i in range(len(part) - size + 1)
        if any(c.isdigit() or c.isupper() for c in part[i : i + size])
    }

"""Credentials in text: a small rule set that finds them (``find_secrets``) and masks them (``mask_secrets``).

Contract: pure functions of one string, no state, no I/O. A ``Finding`` is the span of the secret itself and its
``kind`` (one of ``KINDS``): the value without the name it is assigned to, a URL's password without the rest of the
URL, a private key block from its BEGIN line through its END line. Findings are sorted by position and never overlap
(where two rules match the same characters, the more specific rule's finding is kept). Nothing here logs or returns
the secret's text: callers answer with kinds and offsets only.

The rules, most specific first (docs/decisions.md#secret-guard says why a rule set and not a detector library):

1. ``private_key``: a PEM / OpenSSH / PGP ``-----BEGIN … PRIVATE KEY-----`` line followed by a base64 body, or with
   a body line (40 base64 characters with a digit) anywhere before its END line, whatever is written between (a
   header alone, or one followed by a placeholder, is documentation, not a key). A block has no length limit.
2. Provider tokens by their published prefixes: AWS access key ids (``AKIA``/``ASIA``/``ABIA``/``ACCA`` + 16),
   Google API keys (``AIza`` + 35) and OAuth secrets/tokens (``GOCSPX-``, ``ya29.``), ``sk-ant-…``, ``sk-…``,
   GitHub (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``, ``github_pat_``), GitLab (``glpat-``), Slack (``xox?-``,
   webhook URLs), Stripe (``sk_live_``/``rk_live_``/``sk_test_``), Hugging Face (``hf_``), npm, PyPI, SendGrid, Groq, xAI,
   Replicate, DigitalOcean, Shopify. The body after the prefix must look random (below), so ``sk-your-key-here`` or
   ``ghp_xxxx…`` are not keys.
3. ``jwt``: ``eyJ….eyJ….…`` whose first part decodes to a JSON header with ``alg``.
4. ``password_in_url``: ``scheme://user:password@host`` unless the password is a placeholder (``<PASSWORD>``,
   ``${DB_PASSWORD}``, ``password``, ``***``, the user name again as in ``postgres:postgres@``); ``token_in_url``:
   ``scheme://<random-looking user>@host`` (a provider token there is found by its prefix: rule 2).
   ``password_in_command``: a password given to a command-line client (``mysql -p…``, ``--password=…``,
   ``sshpass -p …``, ``curl -u user:…``, ``wget --password=…``, ``docker login -p …``, ``redis-cli -a …``,
   ``mongosh -p …``) or in the variable one reads (``PGPASSWORD=…``, ``MYSQL_PWD=…``), unless a placeholder as in
   URLs (also ``$VAR``, an option, a command substitution).
5. ``basic_auth``: ``Basic <base64>`` that decodes to ``user:password``; ``bearer_token``: ``Bearer`` / ``token``
   followed by a random-looking value.
6. ``secret_assignment``: a random-looking value assigned (``=``, ``:``, ``=>``, ``:=``, JSON ``"name": "value"``,
   escaped JSON, a ``--flag value``) to a name whose words say credential: ``password``, ``passwd``, ``passphrase``,
   ``pwd``, ``pass``, ``pw``, ``psw``, ``secret``, ``token``, ``credential``, ``auth``, ``authorization``, or
   ``key`` qualified as ``api``/``access``/``secret``/``private``/``client``/… key — but not names that say the value
   is something else (``next_page_token``, ``max_tokens``, ``public_key``, ``key_id``, ``token_type``, ``secret_name``, …).

Every rule judges the text as a reader sees it (``textfold.fold``: NFKC, zero-width characters removed, Cyrillic and
Greek look-alikes folded), and findings are spans of the original characters.

"Random-looking" (``looks_random``) is what keeps ids, words and code out: long enough (16 characters, 8 for
password names), letters and digits, Shannon entropy near what random text of that length has, no run of six equal
characters, and not mostly words of ``WORDS`` (``db_password_prod_2024``, ``securePass123``, ``YOUR_API_KEY_HERE``),
no placeholder or code syntax (``<…>``, ``{…}``, ``$VAR``, ``%s``, ``***``, ``settings.api_key``, ``f(x)``). Bare
random strings (hashes, UUIDs, base64 images, tool call ids, request ids) are never flagged on their own: only a
prefix, a structure or a credential name makes a value a secret.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from .textfold import fold


@dataclass(frozen=True)
class Kind:
    """A kind of secret: its name (in answers), what it is (in messages: no part of any secret, not even a format's
    prefix) and the placeholder to write instead."""

    name: str
    what: str
    placeholder: str


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("private_key", "a private key block", "<PRIVATE_KEY>"),
        Kind("aws_access_key", "an AWS access key id", "<AWS_ACCESS_KEY_ID>"),
        Kind("google_api_key", "a Google API key", "<GOOGLE_API_KEY>"),
        Kind("google_oauth", "a Google OAuth client secret or access token", "<GOOGLE_OAUTH_TOKEN>"),
        Kind("anthropic_api_key", "an Anthropic API key", "<ANTHROPIC_API_KEY>"),
        Kind("openai_api_key", "an OpenAI-style API key", "<API_KEY>"),
        Kind("github_token", "a GitHub token", "<GITHUB_TOKEN>"),
        Kind("gitlab_token", "a GitLab token", "<GITLAB_TOKEN>"),
        Kind("slack_token", "a Slack token or webhook URL", "<SLACK_TOKEN>"),
        Kind("stripe_key", "a Stripe secret key", "<STRIPE_KEY>"),
        Kind("huggingface_token", "a Hugging Face token", "<HF_TOKEN>"),
        Kind("provider_api_key", "a provider API key (npm, PyPI, SendGrid, Groq, xAI, Replicate, …)", "<API_KEY>"),
        Kind("jwt", "a JSON Web Token", "<JWT>"),
        Kind("password_in_url", "a password in a URL", "<PASSWORD>"),
        Kind("token_in_url", "a token as a URL's user name", "<TOKEN>"),
        Kind("password_in_command", "a password on a command line", "<PASSWORD>"),
        Kind("basic_auth", "HTTP Basic credentials", "<BASIC_AUTH>"),
        Kind("bearer_token", "a bearer token", "<TOKEN>"),
        Kind(
            "secret_assignment", "a random-looking value assigned to a key, secret, token or password name", "<SECRET>"
        ),
    )
}


@dataclass(frozen=True, order=True)
class Finding:
    """The characters ``text[start:end]`` are a secret of ``kind``."""

    start: int
    end: int
    kind: str


# -- what "random-looking" means ---------------------------------------------------------------------------------------

MIN_VALUE_CHARS = 16  # a value assigned to a credential name, a bearer token
MIN_PASSWORD_CHARS = 8  # a value assigned to a password name (generated passwords are 8 characters and more)
MAX_VALUE_CHARS = 4096
# Words that make up placeholders, code references and human-chosen values ("YOUR_API_KEY_HERE", "securePass123",
# "db_password_prod_2024"): a value whose characters are mostly these is not random. Random text seldom contains
# them: measured on generated keys in tests/test_credentials.py.
WORDS = frozenset(
    """
    access account admin api app auth bearer change changeme client config db default demo dev dummy enter env example
    fake here insert key local master mock my new none null pass passwd password placeholder private prod production
    public redacted replace sample secret secure service session spring staging summer super temp test token user
    value welcome winter your qwerty letmein
""".split()
)
_WORDS = re.compile("|".join(sorted(WORDS, key=len, reverse=True)), re.IGNORECASE)
_REPEAT = re.compile(r"(.)\1{5}")
_CAMEL_WORDS = re.compile(r"[A-Z]?[a-z]{4,}")
_KEBAB = re.compile(r"[a-z]{2,}(?:[-_.][a-z0-9]+)+")  # lowercase words joined by separators: sk-learn-compatible-v2
_IDENTIFIER_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # settings.api_key, os.environ.TOKEN
# a file path (``pwd: /home/user/app2``, ``/Users/Alice/Projects``): base64 may start with a slash and hold more, but
# its segments are not lowercase words
_FILE_PATH = re.compile(r"(?:~|\.{1,2})?(?:/[\w.\-]{1,64}){2,}/?")
_PATH_SEGMENT = re.compile(r"[A-Za-z]?[a-z0-9_.\-]*")
_PLACEHOLDER_CHARS = re.compile(r"[<>{}()\[\]]|\*\*\*|\.\.\.|…|^[$%]")
_HEX = frozenset("0123456789abcdefABCDEF")


def entropy(text: str) -> float:
    """Shannon entropy of the characters of ``text``, in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def _file_path(value: str) -> bool:
    """Whether ``value`` is a file path: slash-separated, most segments lowercase words (capitalised or not)."""
    if not _FILE_PATH.fullmatch(value):
        return False
    segments = [s for s in value.split("/") if s not in ("", "~", ".", "..")]
    return sum(bool(_PATH_SEGMENT.fullmatch(s)) for s in segments) * 2 > len(segments)


def random_enough(body: str, words: bool = True) -> bool:
    """Whether ``body`` (a token without its prefix, a value) has the entropy of random text and (``words``) is not
    mostly words of ``WORDS``.

    The entropy bar is 60% of the most that ``len(body)`` characters of its alphabet (hex: 16 symbols, else 64) can
    have: random hex of 16 characters has about 3.4 bits, ``aaaa…`` none.
    """
    if not body or _REPEAT.search(body) or _KEBAB.fullmatch(body):
        return False
    alphabet = 16 if all(c in _HEX for c in body) else 64
    if entropy(body) < 0.6 * math.log2(min(len(body), alphabet)):
        return False
    return not words or sum(len(m) for m in _WORDS.findall(body)) < 0.4 * len(body)


def looks_random(value: str, min_chars: int = MIN_VALUE_CHARS) -> bool:
    """Whether a value assigned to a credential name (or following ``Bearer``) is a secret rather than a word, a
    placeholder or code: ``min_chars``..``MAX_VALUE_CHARS`` characters, letters and digits (or, without digits, 20
    characters of mixed case that are not camel-case words), no placeholder or code syntax, and ``random_enough``."""
    if not min_chars <= len(value) <= MAX_VALUE_CHARS or _PLACEHOLDER_CHARS.search(value):
        return False
    if _IDENTIFIER_PATH.fullmatch(value) or "://" in value or _file_path(value):
        return False
    if not any(c.isalpha() for c in value):
        return False
    if not any(c.isdigit() for c in value):  # random letters (1.5% of 24 base62 characters): long, mixed case, no words
        if len(value) < 20 or value.islower() or value.isupper():
            return False
        if sum(len(m) for m in _CAMEL_WORDS.findall(value)) >= 0.5 * len(value):  # GetAccessTokenResponse
            return False
    return random_enough(value)


# -- the rules -------------------------------------------------------------------------------------------------------

# A token starts where no letter, digit or base64 character precedes it (inside base64, hex or an identifier it is
# not a token), or right after a URL's ``://`` (a token as the URL's user: ``_after_scheme``). After ``-`` or ``_``
# it may start a token (``deploy-with-ghp_…``) unless what it is glued to is random itself: then it is the inside of
# a base64url blob (``glued_to_random``).
_START = r"(?<![A-Za-z0-9+/])"
_GLUED = re.compile(r"[A-Za-z0-9_\-]{1,64}$")


def glued_to_random(text: str, start: int) -> bool:
    """Whether the token at ``start`` follows ``-``/``_`` glued to a random-looking run (a base64url blob)."""
    if start == 0 or text[start - 1] not in "-_":
        return False
    run = _GLUED.search(text, max(0, start - 64), start)
    body = run.group() if run else ""
    return (
        len(body) >= 16
        and any(c.isupper() for c in body)
        and any(c.isdigit() for c in body)
        and any(c.islower() for c in body)
    )


class Prefixed(NamedTuple):
    """A token format: the characters after ``prefix`` must be ``random_enough``; formats of a fixed length and
    alphabet (``fixed``) need only its entropy, not the words check (AWS's own documented key AKIAIOSFODNN7EXAMPLE
    is mostly a word)."""

    kind: str
    pattern: str
    prefix: int
    fixed: bool = False


_PREFIXED = [
    Prefixed("aws_access_key", r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}(?![A-Za-z0-9])", 4, fixed=True),
    Prefixed("google_api_key", r"AIza[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_\-])", 4, fixed=True),
    Prefixed("google_oauth", r"GOCSPX-[A-Za-z0-9_\-]{28}(?![A-Za-z0-9_\-])", 7, fixed=True),
    Prefixed("google_oauth", r"ya29\.[A-Za-z0-9_\-]{30,}", 5),
    Prefixed("anthropic_api_key", r"sk-ant-[a-z0-9]{2,12}-[A-Za-z0-9_\-]{32,}", 7),
    Prefixed("openai_api_key", r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}", 3),
    Prefixed("github_token", r"gh[pousr]_[A-Za-z0-9]{36,251}(?![A-Za-z0-9])", 4, fixed=True),
    Prefixed("github_token", r"github_pat_[A-Za-z0-9_]{40,}", 11),
    Prefixed("gitlab_token", r"glpat-[A-Za-z0-9_\-]{20,}", 6),
    Prefixed("slack_token", r"xox[abposre]-[A-Za-z0-9\-]{10,}", 5),
    Prefixed("slack_token", r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{20,}", 33),
    Prefixed("stripe_key", r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", 8),
    Prefixed("huggingface_token", r"hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])", 3),
    Prefixed("provider_api_key", r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])", 4, fixed=True),
    Prefixed("provider_api_key", r"pypi-AgE[A-Za-z0-9_\-]{50,}", 8),
    Prefixed("provider_api_key", r"SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}", 3),
    Prefixed("provider_api_key", r"gsk_[A-Za-z0-9]{40,}", 4),
    Prefixed("provider_api_key", r"xai-[A-Za-z0-9]{40,}", 4),
    Prefixed("provider_api_key", r"r8_[A-Za-z0-9]{30,}(?![A-Za-z0-9])", 3),
    Prefixed("provider_api_key", r"dop_v1_[a-f0-9]{64}", 7, fixed=True),
    Prefixed("provider_api_key", r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}", 6, fixed=True),
]
# One pass finds every prefixed token: group i + 1 is format i.
# (the lookahead of the first characters lets the scan skip most positions at once: five times faster)
_PREFIXED_BODY = "(?:" + "|".join(f"({f.pattern})" for f in _PREFIXED) + ")"
_PREFIXED_RE = re.compile(r"(?=[AGSdghnprsxy])" + _START + _PREFIXED_BODY)
_PREFIXED_AT = re.compile(_PREFIXED_BODY)  # after "://" (a lookbehind alternative would slow the whole scan)

_PEM_BEGIN_LINE = "-----BEGIN "
_PEM_HEADER = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ ){0,3})PRIVATE KEY( BLOCK)?-----")
# after the BEGIN line: optional header lines (Proc-Type, DEK-Info, Version, Comment), then the base64 body; newlines
# may be real or escaped (a key inside a JSON string)
_PEM_BODY_START = re.compile(r"(?:(?:\\+[rn]|\s)+[A-Za-z\-]+: [^\n\\]*)*(?:\\+[rn]|\s)+[A-Za-z0-9+/=]{20,}")
_PEM_BODY = re.compile(r"(?:[A-Za-z0-9+/=]|\\+[rn]|\s)*")
# a body line anywhere between the BEGIN and END lines (text put between them does not make a key documentation)
_PEM_BODY_LINE = re.compile(r"(?=[A-Za-z0-9+/]{40})(?=[A-Za-z+/]*[0-9])[A-Za-z0-9+/]{40,}")
MAX_KEY_BLOCK_CHARS = 16384  # an RSA-8192 PEM is about 6,400 characters; a PGP block with subkeys a few more

_JWT = re.compile(r"(?=eyJ)" + _START + r"eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{16,}")

# the user info after a URL's "://" (found with str.find: a regex tried at every position costs more)
_URL_USERINFO = re.compile(
    r"(?P<user>[^\s:/?#@\"'<>\\\[\]]{0,128}):(?P<password>[^\s/?#@\"'<>\\]{1,256})@(?=[A-Za-z0-9\[])",
)
_URL_TOKEN_USER = re.compile(r"(?P<user>[^\s:/?#@\"'<>\\\[\]]{16,256})@(?=[A-Za-z0-9\[])")
PLACEHOLDER_PASSWORDS = frozenset(
    {
        "password",
        "passwd",
        "pass",
        "pwd",
        "pw",
        "secret",
        "changeme",
        "example",
        "user",
        "username",
        "x",
        "xxx",
        "xxxx",
        "token",
        "apikey",
        "api_key",
        "redacted",
    }
)

# Command lines that take a password as an argument: the command, then its options up to the end of the command (a
# line, an escaped newline, a pipe, ``;`` or ``&&``). An option's value may be quoted (also with escaped quotes, in
# JSON); its span is the value without the quotes.
_VALUE = r"""(?:'(?P<q1>[^'\n]{1,256})'|\\*"(?P<q2>[^"\\\n]{1,256})\\*"|(?P<bare>[^\s'"\\;|&)`]{1,256}))"""
# (each command's first word is found with str.find: a regex tried at every position costs four times as much)
COMMAND_WORDS = ("mysql", "mariadb", "mongo", "sshpass", "curl", "wget", "redis-cli", "docker")
_COMMAND = re.compile(
    r"(?P<command>mysql(?:dump|admin|import|check|show|slap|pump|sh)?|mariadb(?:-?dump|-?admin)?"
    r"|mongo(?:sh|dump|restore|export|import)?|sshpass|curl|wget|redis-cli|docker[ \t]+login)(?![\w\-])"
)
_COMMAND_BEFORE = frozenset(string.ascii_letters + string.digits + "_.-/$")
_VARIABLE_BEFORE = frozenset(string.ascii_letters + string.digits + "_$")
_COMMAND_END = re.compile(r"\n|\\+n|[|;]|&&")
MAX_COMMAND_CHARS = 1024
_OPTION = r"(?<![\w\-])"
COMMAND_OPTIONS = {  # family (a command's name starts with it) -> its password options
    "mysql": re.compile(_OPTION + r"(?:-p(?=[^\s\-])|--pass(?:word)?=)" + _VALUE),  # -p with a space prompts
    "mariadb": re.compile(_OPTION + r"(?:-p(?=[^\s\-])|--pass(?:word)?=)" + _VALUE),
    "mongo": re.compile(_OPTION + r"(?:-p[ \t]*|--password[= \t][ \t]*)" + _VALUE),
    "sshpass": re.compile(_OPTION + r"-p[ \t]*" + _VALUE),
    "redis-cli": re.compile(_OPTION + r"(?:-a[ \t]+|--pass[= \t][ \t]*)" + _VALUE),
    "docker": re.compile(_OPTION + r"(?:-p[ \t]+|--password[= \t][ \t]*)" + _VALUE),
    "wget": re.compile(_OPTION + r"--(?:http-|ftp-|proxy-)?password[= \t][ \t]*" + _VALUE),
    "curl": re.compile(_OPTION + r"(?:-u|-U|--user|--proxy-user)(?:=|[ \t]+|(?=[^\s\-]))" + _VALUE),
}
_USER_OPTION = re.compile(_OPTION + r"(?:-u[ \t]*|--user(?:name)?[= \t][ \t]*)" + _VALUE)
# environment variables the command-line clients read a password from
PASSWORD_VARIABLES = ("PGPASSWORD", "MYSQL_PWD", "SSHPASS", "REDISCLI_AUTH")
_PASSWORD_VARIABLE = re.compile(r"(?:" + "|".join(PASSWORD_VARIABLES) + r")=" + _VALUE)

# ``Basic <base64>``, ``Bearer <token>``, ``token <token>`` (GitHub's Authorization scheme)
_AUTH_SCHEME = re.compile(r"(?=[bBtT])(?i:\b(?P<scheme>basic|bearer|token))[ \t]+(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)")

# Assignments are found from the credential words in names (a pass over every name of a JSON-heavy trajectory costs
# three times as much): each hit is widened to its whole name, then the operator and the value must follow it.
_CREDENTIAL_HINT = re.compile(r"(?=[pPsStTkKaAcC])(?i:pass|pwd|pw|psw|secret|token|key|auth|cred)")
_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
MAX_NAME_CHARS = 64
_ASSIGNED = re.compile(
    r"(?:\\*[\"'`])?[ \t]*(?P<op>=>|:=|[=:]|[ \t])[ \t]*(?:\\*[\"'`])?"  # a space only after a --flag
    r"(?P<value>[^\s\"'`\\,;&|)}\]<>]{8,4096})",
)
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# A word that is, or ends in, one of these names a password (dbpassword) or another credential (authtoken,
# clientsecret); "pass" only as a whole word (not compass, bypass)
PASSWORD_ENDINGS = ("password", "passwd", "passphrase", "pwd")
PASSWORD_WORDS = frozenset({"pass", "pw", "psw", "pswd", "passw", "pword", "passwrd"})  # only as whole words
CREDENTIAL_ENDINGS = (
    "secret",
    "token",
    "credential",
    "credentials",
    "apikey",
    "secretkey",
    "accesskey",
    "privatekey",
    "authkey",
    "masterkey",
    "signingkey",
    "encryptionkey",
    "accountkey",
)
CREDENTIAL_WORDS = frozenset({"auth", "authorization", "secrets"})
# "key" is a credential only after one of these (api key, access key, x-api-key, account key ...)
KEY_QUALIFIERS = frozenset(
    {
        "api",
        "access",
        "secret",
        "private",
        "client",
        "auth",
        "signing",
        "encryption",
        "master",
        "app",
        "application",
        "account",
        "subscription",
        "service",
        "admin",
        "deploy",
        "session",
        "shared",
        "storage",
        "license",
        "x",
        "webhook",
        "consumer",
        "ssh",
    }
)
# Words that say the value is something else than the credential: a reference to it, a property of it, or paging
NOT_CREDENTIAL = frozenset(
    {
        "page",
        "pages",
        "cursor",
        "next",
        "prev",
        "previous",
        "continuation",
        "pagination",
        "count",
        "max",
        "min",
        "limit",
        "limits",
        "total",
        "num",
        "number",
        "usage",
        "budget",
        "type",
        "types",
        "id",
        "ids",
        "name",
        "names",
        "index",
        "length",
        "len",
        "size",
        "prefix",
        "suffix",
        "hash",
        "digest",
        "sha",
        "url",
        "uri",
        "path",
        "file",
        "format",
        "expiry",
        "expires",
        "expiration",
        "ttl",
        "time",
        "at",
        "date",
        "status",
        "public",
        "publishable",
        "field",
        "header",
        "param",
        "env",
        "var",
        "variable",
        "ref",
        "arn",
        "version",
        "policy",
        "rotation",
        "kind",
        "required",
        "enabled",
        "valid",
        "error",
        "errors",
        "hint",
        "label",
        "description",
        "desc",
        "placeholder",
        "pattern",
        "regex",
        "fingerprint",
        "location",
        "store",
        "manager",
        "provider",
        "mode",
        "method",
        "scope",
        "scopes",
        "tokenizer",
        "fields",
        "input",
        "output",
        "cached",
        "reasoning",
        "completion",
        "prompt",
    }
)


def credential_name(name: str) -> str | None:
    """``"password"`` when ``name`` names a password, ``"secret"`` when it names another credential, else None."""
    words = [w.lower() for w in _NAME_WORDS.findall(name)]
    if not words or any(w in NOT_CREDENTIAL for w in words):
        return None
    if any(w in PASSWORD_WORDS or w.endswith(PASSWORD_ENDINGS) for w in words):
        return "password"
    for i, word in enumerate(words):
        if word.endswith(CREDENTIAL_ENDINGS) or word in CREDENTIAL_WORDS:
            return "secret"
        if word in ("key", "keys") and i > 0 and words[i - 1] in KEY_QUALIFIERS:
            return "secret"
    return None


def key_block(text: str, header: re.Match) -> Finding | None:
    """The private key block whose BEGIN line is ``header`` (a match of ``_PEM_HEADER`` in ``text``), or None when it
    has no body (a header alone, or one followed by a placeholder, is documentation).

    The block ends with its END line when one comes before the next BEGIN line (blocks do not nest), whatever its
    length and whatever is written between (a body line of 40 base64 characters is the key's); without an END line
    the body must follow the header and the block is the run of base64 lines after it. Cost: linear in the text up to
    the next BEGIN line."""
    label = header.group(1) + "PRIVATE KEY" + (header.group(2) or "")
    end_line = f"-----END {label}-----"
    after = header.end()
    following = text.find(_PEM_BEGIN_LINE, after)
    stop = text.find(end_line, after, len(text) if following < 0 else following)
    direct = _PEM_BODY_START.match(text, after)
    if stop >= 0 and (direct and direct.end() <= stop or _PEM_BODY_LINE.search(text, after, stop)):
        return Finding(header.start(), stop + len(end_line), "private_key")
    if stop < 0 and direct:
        return Finding(header.start(), _PEM_BODY.match(text, after).end(), "private_key")
    return None


def _private_keys(text: str) -> list[Finding]:
    return [block for header in _PEM_HEADER.finditer(text) if (block := key_block(text, header)) is not None]


def enclosing_key_block(text: str, at: int) -> Finding | None:
    """The private key block of ``text`` whose BEGIN line is the last one starting at or before ``at``, when there
    is one (whatever its length: found from ``at`` backwards, not by scanning a window)."""
    begin = text.rfind(_PEM_BEGIN_LINE, 0, at + len(_PEM_BEGIN_LINE))
    header = _PEM_HEADER.match(text, begin) if begin >= 0 else None
    return key_block(text, header) if header else None


def _prefixed(text: str) -> list[Finding]:
    out = []
    for match in merged(_PREFIXED_RE.finditer(text), _after_scheme(text)):
        if glued_to_random(text, match.start()):
            continue
        token = _PREFIXED[match.lastindex - 1]
        if random_enough(match.group()[token.prefix :], words=not token.fixed):
            out.append(Finding(match.start(), match.end(), token.kind))
    return out


def _after_scheme(text: str):
    """The prefixed tokens right after a URL's ``://`` (a token as the URL's user)."""
    at = text.find("://")
    while at >= 0:
        match = _PREFIXED_AT.match(text, at + 3)
        if match:
            yield match
        at = text.find("://", at + 3)


def merged(*iterables):
    """The matches of several scans in the order of their starts."""
    return sorted((m for matches in iterables for m in matches), key=lambda m: m.start())


def _jwts(text: str) -> list[Finding]:
    out = []
    for match in _JWT.finditer(text):
        if glued_to_random(text, match.start()):
            continue
        header = match.group().split(".", 1)[0]
        try:
            decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
        except (ValueError, binascii.Error):
            continue
        if isinstance(decoded, dict) and "alg" in decoded:
            out.append(Finding(match.start(), match.end(), "jwt"))
    return out


def placeholder_password(password: str, user: str = "") -> bool:
    """Whether a URL's password is a placeholder: ``<…>``, ``{…}``, ``$VAR``, ``%s``, stars or dots, a word of
    ``PLACEHOLDER_PASSWORDS``, an environment variable's name (``DB_PASSWORD``), or the user name again."""
    lowered = password.lower()
    return (
        bool(_PLACEHOLDER_CHARS.search(password))
        or password.startswith(("$", "%", ":"))
        or lowered in PLACEHOLDER_PASSWORDS
        or lowered == user.lower()
        or set(password) <= set("*x.")
        or re.fullmatch(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", password) is not None
    )


def _url_passwords(text: str) -> list[Finding]:
    out, at = [], text.find("://")
    while at >= 0:
        match = _URL_USERINFO.match(text, at + 3)
        if match and at > 0 and text[at - 1].isalnum() and not placeholder_password(match["password"], match["user"]):
            out.append(Finding(match.start("password"), match.end("password"), "password_in_url"))
        elif match is None and at > 0 and text[at - 1].isalnum():  # a token as the user: https://<token>@host
            user = _URL_TOKEN_USER.match(text, at + 3)
            if user and looks_random(user["user"]):
                out.append(Finding(user.start("user"), user.end("user"), "token_in_url"))
        at = text.find("://", at + 3)
    return out


def _option_value(match: re.Match) -> tuple[str, int, int]:
    """The value of an option matched with ``_VALUE`` (without its quotes) and its span."""
    group = next(g for g in ("q1", "q2", "bare") if match.group(g) is not None)
    return match.group(group), match.start(group), match.end(group)


def words_at(text: str, words) -> list[int]:
    """Every position where one of ``words`` starts, in order."""
    out = []
    for word in words:
        at = text.find(word)
        while at >= 0:
            out.append(at)
            at = text.find(word, at + 1)
    return sorted(out)


def _command_passwords(text: str) -> list[Finding]:
    """Passwords given on a command line (``COMMAND_OPTIONS``) or in the variables CLIs read them from
    (``PASSWORD_VARIABLES``): any value that is not a placeholder (``placeholder_password``, a ``$VAR``, an option)."""
    out = []
    for at in words_at(text, PASSWORD_VARIABLES):
        match = _PASSWORD_VARIABLE.match(text, at)
        if match is None or (at and text[at - 1] in _VARIABLE_BEFORE):
            continue
        value, start, end = _option_value(match)
        if not _placeholder_option(value):
            out.append(Finding(start, end, "password_in_command"))
    for at in words_at(text, COMMAND_WORDS):
        command = _COMMAND.match(text, at)
        if command is None or (at and text[at - 1] in _COMMAND_BEFORE):
            continue
        stop = _COMMAND_END.search(text, command.end(), command.end() + MAX_COMMAND_CHARS)
        stop = stop.start() if stop else min(len(text), command.end() + MAX_COMMAND_CHARS)
        family = command.group("command").split()[0].rstrip("0123456789")
        family = next(f for f in COMMAND_OPTIONS if family.startswith(f))
        users = [_option_value(m)[0] for m in _USER_OPTION.finditer(text, command.end(), stop)]
        for option in COMMAND_OPTIONS[family].finditer(text, command.end(), stop):
            value, start, end = _option_value(option)
            if family == "curl":  # user:password
                user, colon, password = value.partition(":")
                if colon and password and not _placeholder_option(password, user):
                    out.append(Finding(start + len(user) + 1, end, "password_in_command"))
                elif not password and looks_random(user):  # a token as the user, no password
                    out.append(Finding(start, start + len(user), "password_in_command"))
            elif not _placeholder_option(value, *users[:1]):
                out.append(Finding(start, end, "password_in_command"))
    return out


def _placeholder_option(value: str, user: str = "") -> bool:
    return placeholder_password(value.strip(), user) or value.startswith("-") or "`" in value


def _authorization(text: str) -> list[Finding]:
    out = []
    for match in _AUTH_SCHEME.finditer(text):
        value = match.group("value")
        if match.group("scheme").lower() != "basic":
            if looks_random(value):
                out.append(Finding(match.start("value"), match.end("value"), "bearer_token"))
            continue
        try:  # Basic credentials are base64 of user:password
            decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("ascii")
        except (ValueError, binascii.Error):
            continue
        user, colon, password = decoded.partition(":")
        if colon and user and password and decoded.isprintable() and not placeholder_password(password, user):
            out.append(Finding(match.start("value"), match.end("value"), "basic_auth"))
    return out


def _names(text: str):
    """(start, end, flag) of every name holding a credential word: ``flag`` when it is written ``--name``/``-name``."""
    seen = set()
    for hint in _CREDENTIAL_HINT.finditer(text):
        start, end = hint.start(), hint.end()
        while start > 0 and text[start - 1] in _NAME_CHARS and hint.start() - start <= MAX_NAME_CHARS:
            start -= 1
        while end < len(text) and text[end] in _NAME_CHARS and end - hint.end() <= MAX_NAME_CHARS:
            end += 1
        if start in seen or (start > 0 and text[start - 1] in _NAME_CHARS) or end - start > MAX_NAME_CHARS:
            continue  # a name seen already, or no name: a run of letters and digits too long for one
        seen.add(start)
        stripped = text[start:end].lstrip("-.")
        if stripped and (stripped[0].isalpha() or stripped[0] == "_"):
            yield end - len(stripped), end, text[start] == "-"


def _assignments(text: str) -> list[Finding]:
    out = []
    for start, end, flag in _names(text):
        which = credential_name(text[start:end])
        match = _ASSIGNED.match(text, end) if which else None
        if match is None or (match.group("op") in " \t" and not flag):
            continue
        value = match.group("value").rstrip(".")  # a sentence's full stop is not part of the value
        if looks_random(value, MIN_PASSWORD_CHARS if which == "password" else MIN_VALUE_CHARS):
            out.append(Finding(match.start("value"), match.start("value") + len(value), "secret_assignment"))
    return out


# The rules in order of precedence: where findings overlap, the earlier rule's is kept.
RULES = (_private_keys, _prefixed, _jwts, _url_passwords, _command_passwords, _authorization, _assignments)


def find_secrets(text: str) -> list[Finding]:
    """Every secret in ``text``, sorted by position, without overlaps (the more specific rule wins).

    The rules judge ``text`` as a reader sees it (``textfold.fold``: NFKC, zero-width characters removed, look-alike
    letters folded), and each finding is the span of the original characters."""
    folded = fold(text)
    if folded is None:
        return _find(text)
    return [Finding(folded.start(f.start), folded.end(f.end), f.kind) for f in _find(folded.text)]


def _find(text: str) -> list[Finding]:
    kept: list[Finding] = []  # sorted by start, not overlapping
    for rule in RULES:
        for finding in rule(text):
            at = bisect.bisect_left(kept, finding)
            if (at and kept[at - 1].end > finding.start) or (at < len(kept) and kept[at].start < finding.end):
                continue  # overlaps a finding of a more specific rule (or an earlier one of this rule)
            kept.insert(at, finding)
    return kept


def mask_label(kind: str) -> str:
    """What replaces a secret of ``kind`` in masked text."""
    return f"[masked:{kind}]"


def mask_secrets(text: str, findings: list[Finding]) -> str:
    """``text`` with each finding's characters replaced by ``mask_label(kind)`` (findings: sorted, not overlapping,
    within the text)."""
    parts, position = [], 0
    for finding in findings:
        parts += [text[position : finding.start], mask_label(finding.kind)]
        position = finding.end
    parts.append(text[position:])
    return "".join(parts)


# How far around an excerpt ``secrets_within`` looks: a secret that reaches into the excerpt is found whole (and so
# masked) if it is shorter than this. Private key blocks, the longest, are found in the whole text instead.
SCAN_MARGIN = MAX_KEY_BLOCK_CHARS


def secrets_within(text: str, start: int, end: int, margin: int = SCAN_MARGIN) -> list[Finding]:
    """The secrets that overlap ``text[start:end]``, clipped to it, with positions relative to ``start``.

    ``text[start - margin:end + margin]`` is scanned, so the cost of an excerpt does not grow with the file; a secret
    cut by the excerpt's edge is still found (whole) and its part inside the excerpt reported. A private key block of
    any length that reaches into the excerpt is found from its BEGIN line, searched backwards from the excerpt's first
    and last characters (``enclosing_key_block``: two backward searches and the block's own characters).
    """
    low = max(0, start - margin)
    found = [Finding(f.start + low, f.end + low, f.kind) for f in find_secrets(text[low : end + margin])]
    for at in dict.fromkeys((start, end - 1) if end > start else ()):
        block = enclosing_key_block(text, at)
        if block is not None and block.start < end and block.end > start:
            found = [f for f in found if f.end <= block.start or f.start >= block.end] + [block]
    out = []
    for finding in sorted(found):
        clipped_start, clipped_end = max(finding.start, start), min(finding.end, end)
        if clipped_start < clipped_end:
            out.append(Finding(clipped_start - start, clipped_end - start, finding.kind))
    return out


def masked_prefix(findings: list[Finding], masked_chars: int) -> tuple[int, int]:
    """For a prefix of ``masked_chars`` characters of ``mask_secrets(text, findings)``: how many of them to keep (a
    mask label cut in two is left out whole) and how many characters of ``text`` the kept prefix stands for."""
    masked = original = 0
    for finding in findings:
        plain = finding.start - original
        if masked_chars <= masked + plain:
            return masked_chars, original + masked_chars - masked
        masked, original = masked + plain, finding.start
        label = len(mask_label(finding.kind))
        if masked_chars < masked + label:
            return masked, original
        masked, original = masked + label, finding.end
    return masked_chars, original + masked_chars - masked

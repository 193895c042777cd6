"""Keep secrets out of everything the tool writes or prints. Two nets: the values of secret-named
environment variables, and secrets recognised by their shape wherever they appear:

- URL credentials: scheme://user:password@host (and scheme://token@host) keep only the host;
- flags and assignments named like a secret: --wandb-key=..., --api_token VALUE, PASSWORD=..., token: ...;
- sbatch's --export lists (every value) and --comment (all of it);
- well-known key formats (hf_..., sk-..., sk-ant-..., ghp_/github_pat_, glpat-, xox?-/xapp-, AKIA..., AWS secret
  keys, 40-hex tokens, JWTs, Google AIza... keys and ya29. tokens, Stripe, npm, PyPI, SendGrid, Databricks,
  DigitalOcean, Twilio, Mailgun), `Bearer TOKEN`, PEM private-key blocks;
- presigned URLs' signatures (X-Amz-Signature, X-Amz-Credential, X-Goog-Signature, Azure SAS `sig=`), Azure
  connection strings' AccountKey, and 32-hex values where a key is named (Azure subscription and account keys);
- alert URLs whose whole address is the credential: Slack and Discord webhooks, slack:// tgram:// ntfy:// and
  the other apprise schemes that carry tokens in the path.

A name counts as a secret's only when the secret word ends it (`api_token`, `PASSWORD`, `pass=`), so a run named
`coco-secret-run` keeps its job id and a path with `secret` in it stays readable.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Sequence

MASK = "[redacted]"
_STRONG_WORD = (
    r"(?:token(?!iz|s\b|s?_(?:per|count|len|num))|secret|passw(?:or)?d|passphrase|(?<![A-Za-z])pass(?![A-Za-z])|credential"
    r"|auth(?!or)|cookie|private)"
)
# "key" counts only as the end of a compound (api_key, WANDB_API_KEY, --wandb-key), not key / key_metric / loss-key
_KEY_WORD = (
    r"(?:(?<![A-Za-z0-9])(?:api|access|secret|private|auth|wandb|hf|openai|anthropic|aws|client|license|signing"
    r"|subscription|account|storage|primary|secondary|master|azure|service|encryption|sas)[_.-]?keys?(?![a-z]))"
)
_SECRET_WORD = f"(?:{_STRONG_WORD}|{_KEY_WORD})"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)  # env var names
_KEY_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,}|xox[abpersc]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|[a-f0-9]{40}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})\b"
)
# more key shapes: Google API keys, Stripe, npm, PyPI, Google OAuth access tokens, SendGrid, Databricks,
# DigitalOcean, Twilio, Mailgun, Slack app tokens, Hugging Face organisation tokens, Anthropic admin keys
_MORE_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_-])(?:AIza[0-9A-Za-z_-]{35}|(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}|npm_[A-Za-z0-9]{36}"
    r"|pypi-AgE[A-Za-z0-9_-]{40,}|ya29\.[0-9A-Za-z_-]{20,}|SG\.[\w-]{16,}\.[\w-]{20,}|dapi[0-9a-f]{32}"
    r"|do[por]_v1_[a-f0-9]{64}|SK[0-9a-fA-F]{32}|key-[0-9a-zA-Z]{32}|xapp-[0-9A-Za-z-]{20,}|api_org_[A-Za-z0-9]{20,}"
    r"|sk-ant-[A-Za-z0-9_-]{20,})(?![A-Za-z0-9_-])"
)
# a presigned URL's signature and credentials (S3, GCS, Azure SAS): the query value goes
_URL_SIGNATURE = re.compile(
    r"((?:X-Amz-(?:Signature|Credential|Security-Token)|X-Goog-(?:Signature|Credential)|(?<=[?&])sig|"
    r"(?<=[?&])AWSAccessKeyId|(?<=[?&])Signature)=)([^&\s'\"<>]+)", re.IGNORECASE)
# a 32-hex value where a key is named (Azure's subscription and account keys, `key1 = 0123...`); 32-hex alone
# is left alone: run ids, md5 sums and commit prefixes look the same
_HEX_KEY = re.compile(r"(?i)((?<![A-Za-z0-9])[A-Za-z0-9_.-]*key\d?[\"']?\s*[=:]\s*[\"']?|Ocp-Apim-Subscription-Key:\s*)"
                      r"([0-9a-f]{32})(?![0-9a-f])")
# Azure storage connection strings: AccountKey=<base64>; SharedAccessSignature=...
_CONNECTION_KEY = re.compile(r"((?:AccountKey|SharedAccessKey|SharedAccessSignature)=)([^;\s'\"]+)", re.IGNORECASE)
# an AWS secret access key: 40 characters of base64 with upper, lower and digits, standing alone
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+=]*[A-Z])(?=[A-Za-z0-9/+=]*[a-z])(?=[A-Za-z0-9/+=]*[0-9])"
                         r"(?!/)[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_BEARER = re.compile(r"\b(Bearer|Token|Basic)(\s+)(?!\[redacted\])[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
                  re.DOTALL)
_WEBHOOK = re.compile(r"(https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)|(?:[a-z]+\.)?discord(?:app)?\.com/api"
                      r"/webhooks|[A-Za-z0-9.-]*\.webhook\.office\.com|api\.telegram\.org/bot))[^\s'\"<>]+", re.IGNORECASE)
# apprise URLs whose address is the secret (tokens in host and path): keep the scheme only
_TOKEN_URL = re.compile(r"\b((?:slack|tgram|ntfys?|discord|msteams|pover|pushover|pbul|gotify|gotifys|matrixs?|rocket|"
                        r"rockets|mmost|mmosts|zulip|twilio|signal|signals|ifttt|join|prowl|bark|barks|apprise|apprises)://)"
                        r"[^\s'\"<>]+", re.IGNORECASE)
# scheme://userinfo@ : everything between :// and the last @ before the host part
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,30}://)[^\s/@'\"<>]+@")
_EXPORT = re.compile(r"(--export(?:=|\s+))([^\s\"']+)", re.IGNORECASE)
_COMMENT = re.compile(r"(--comment(?:=|\s+))(\"[^\"]*\"|'[^']*'|[^\s\"']+)", re.IGNORECASE)
# --name=value / --name value where the flag names a secret
_SECRET_FLAG = re.compile(
    r"((?<![A-Za-z0-9_./-])--?[A-Za-z0-9_.-]*" + _SECRET_WORD + r"[A-Za-z0-9_.-]*)"
    r"(=|\s+)(?![-\[{])(\"[^\"]*\"|'[^']*'|[^\s\"']+)",
    re.IGNORECASE,
)
# --anything-with-key-in-it=value (the issue's `--*key*=`), except flags known to name a metric key
_KEY_FLAG_EQ = re.compile(r"(--[A-Za-z0-9_.-]*key[A-Za-z0-9_.-]*=)(\"[^\"]*\"|'[^']*'|[^\s\"']+)", re.IGNORECASE)
_METRIC_KEY_FLAGS = re.compile(
    r"--(?:guard-)?(?:train-loss|eval|loss|metric|sort|monitor)[-_]keys?=|--key[-_]metric=|"
    r"--keep",
    re.IGNORECASE,
)
# NAME=value / "name": "value" / name: value where the name is a secret's
# (not a path component: `/data/my_secret_stuff: Permission denied` names a folder, it assigns nothing)
_SECRET_ASSIGN = re.compile(
    r"((?<![/\\A-Za-z0-9_.-])[A-Za-z0-9_.-]*" + _SECRET_WORD
    + r"\d*[\"']?\s*[=:]\s*)(?![\[{])(\"[^\"]*\"|'[^']*'|[^\s,;&\"']+)",
    re.IGNORECASE,
)


def _env_key(environ: dict[str, str] | None) -> frozenset[tuple[str | bytes, str | bytes]]:
    if environ is None:
        # os.environ's raw bytes (their hashes are cached): iterating os.environ decodes every item
        raw = getattr(os.environ, "_data", None)
        if isinstance(raw, dict):
            return frozenset(raw.items())
        environ = dict(os.environ)
    return frozenset(environ.items())


@functools.lru_cache(maxsize=8)
def _secret_values(items: frozenset[tuple[str | bytes, str | bytes]]) -> tuple[str, ...]:
    env = {os.fsdecode(name): os.fsdecode(value) for name, value in items}
    values = set()
    for name, value in env.items():
        if len(value) < 6:
            continue
        if _SECRET_NAME.search(name):
            values.add(value)
        for match in _URL_USERINFO.finditer(value):  # DATABASE_URL=postgres://alice:pw@db
            userinfo = match.group(0)[len(match.group(1)) : -1]
            for part in (userinfo, userinfo.partition(":")[2]):  # alice:pw and the password alone
                if len(part) >= 4:
                    values.add(part)
    return tuple(sorted(values, key=len, reverse=True))


@functools.lru_cache(maxsize=8)
def _secret_pattern(values: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(map(re.escape, values))) if values else None


_FINGERPRINTS: set[str] = set()  # sha256 of secret values of other environments (the shared monitor's runs)
_TOKEN = re.compile(r"[^\s'\"=:,;&@/<>()\[\]{}]{6,}")


def secret_fingerprints(environ: dict[str, str] | None = None) -> list[str]:
    """Fingerprints (sha256) of this environment's secret values: what a shared monitor needs to mask a later
    launch's secrets without ever holding them."""
    return sorted(hashlib.sha256(value.encode()).hexdigest() for value in _secret_values(_env_key(environ)))


def remember_fingerprints(fingerprints: Sequence[str]) -> None:
    """Mask, from now on, any word whose sha256 is one of these (a watched run's environment secrets)."""
    _FINGERPRINTS.update(str(f) for f in fingerprints if isinstance(f, str) and len(f) == 64)


def _mask_fingerprinted(text: str) -> str:
    return _TOKEN.sub(lambda m: MASK if hashlib.sha256(m.group(0).encode()).hexdigest() in _FINGERPRINTS else m.group(0),
                      text)


def _export_list(match: re.Match[str]) -> str:
    items = []
    for item in match.group(2).split(","):
        name, sep, _ = item.partition("=")
        items.append(f"{name}={MASK}" if sep else item)
    return match.group(1) + ",".join(items)


def _quoted_mask(value: str) -> str:
    return value[0] + MASK + value[0] if value[:1] in ("'", '"') else MASK


def redact(text: str, environ: dict[str, str] | None = None) -> str:
    if not isinstance(text, str) or not text:
        return text
    return _redact(text, _secret_pattern(_secret_values(_env_key(environ))))


def _redact(text: str, pattern: re.Pattern[str] | None) -> str:
    """redact() with the environment's secrets already compiled (a tree or an argument list compiles them once)."""
    if not text:
        return text
    if pattern is not None:
        text = pattern.sub(MASK, text)
    if _FINGERPRINTS:
        text = _mask_fingerprinted(text)
    text = _PEM.sub(f"{MASK} (private key block)", text)
    text = _URL_SIGNATURE.sub(lambda m: m.group(1) + MASK, text)
    text = _CONNECTION_KEY.sub(lambda m: m.group(1) + MASK, text)
    text = _HEX_KEY.sub(lambda m: m.group(1) + MASK, text)
    text = _MORE_SHAPES.sub(MASK, text)
    text = _WEBHOOK.sub(lambda m: f"{m.group(1)}/{MASK}", text)
    text = _TOKEN_URL.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _EXPORT.sub(_export_list, text)
    text = _COMMENT.sub(lambda m: m.group(1) + _quoted_mask(m.group(2)), text)
    text = _KEY_FLAG_EQ.sub(
        lambda m: (
            m.group(0) if _METRIC_KEY_FLAGS.match(m.group(1)) or MASK in m.group(2) else m.group(1) + _quoted_mask(m.group(2))
        ),
        text,
    )
    text = _SECRET_FLAG.sub(lambda m: m.group(1) + m.group(2) + _quoted_mask(m.group(3)), text)
    text = _SECRET_ASSIGN.sub(lambda m: m.group(0) if MASK in m.group(2) else m.group(1) + _quoted_mask(m.group(2)), text)
    return _AWS_SECRET.sub(MASK, _KEY_SHAPES.sub(MASK, text))


def redact_args(args: Sequence[str], environ: dict[str, str] | None = None) -> list[str]:
    """An argument list with secrets masked, including a value given as the word after its flag
    (`--api-key VALUE`, `--comment TEXT`, `--export LIST`)."""
    return _redact_args(args, _secret_pattern(_secret_values(_env_key(environ))))


def _redact_args(args: Sequence[str], pattern: re.Pattern[str] | None) -> list[str]:
    out: list[str] = []
    mask_next = False
    for arg in args:
        if mask_next and not arg.startswith("-"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        if re.fullmatch(r"--?[A-Za-z0-9_.-]*" + _SECRET_WORD + r"[A-Za-z0-9_.-]*", arg, re.IGNORECASE) or arg in (
            "--comment",
            "--export",
        ):
            mask_next = True
        out.append(_redact(arg, pattern))
    return out


_SECRET_KEY_NAME = re.compile(r"[A-Za-z0-9_.-]*" + _SECRET_WORD + r"\d*", re.IGNORECASE)


def _secret_item(key: object, item: object) -> bool:
    """A config entry whose name is a secret's (`api_key: abc`, `password: 1234`): its value goes, whatever it is."""
    plain = isinstance(item, (str, int, float)) and not isinstance(item, bool) and item != ""
    return plain and isinstance(key, str) and _SECRET_KEY_NAME.fullmatch(key) is not None


def redact_tree(value: object) -> object:
    """A JSON-like structure with every string (keys included) redacted, the value of every secret-named key
    masked whatever its shape; lists of words as arguments."""
    return _redact_tree(value, _secret_pattern(_secret_values(_env_key(None))))


def _redact_tree(value: object, pattern: re.Pattern[str] | None) -> object:
    if isinstance(value, str):
        return _redact(value, pattern)
    if isinstance(value, dict):
        return {_redact(key, pattern) if isinstance(key, str) else key:
                MASK if _secret_item(key, item) else _redact_tree(item, pattern) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, str) for item in value):
            return _redact_args(list(value), pattern)
        return [_redact_tree(item, pattern) for item in value]
    return value

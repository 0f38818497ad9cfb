"""Content identity of specs: canonical JSON, SHA-256 digests, provider-side names, tag refs.

What this is: the pure rules that turn a spec into the identity a provider sees.

- **Canonical JSON** (``canonical_json``): keys sorted (by code point), no whitespace between
  tokens, UTF-8 without ``\\u`` escapes for non-ASCII (``ensure_ascii=False``), tuples as
  arrays, and a float with an integral value below 2**53 written as an integer (``1.0`` and
  ``1`` are one identity, as in RFC 8785; ``-0.0`` is ``0``). NaN, infinities, non-string
  keys, lone surrogates, nesting deeper than ``MAX_DEPTH`` and anything JSON has no word for
  are refused with ``NotJSON`` naming the path — never coerced (V-9: an integer key and a
  string key cannot silently become one identity).
- **Digests** are the lowercase SHA-256 hex of the canonical bytes of a versioned identity
  document (``rma.agent/1``, ``rma.environment/1``, ``rma.agent+environment/1``). A spec's
  ``name`` is never part of it (V-2, V-4): the name is the *base* under which versions live.
  Names carry the first 8 hex (``short_digest``). This is not the reference's Erlang term
  hash (V-7); docs/decisions.md (V-8) explains the one-time re-provision that follows.
- **Names** (``compose_name``, V-16…V-19): ``<stem>_<digest8>`` under a ``NamePolicy``. The
  AgentCore harness policy folds the base to ASCII (NFKD, combining marks dropped), replaces
  every other character outside ``[A-Za-z0-9_]`` with ``_``, prefixes ``a`` unless the first
  character is an ASCII letter, and fits 40 bytes; the Claude policy keeps the base as given
  within 256 UTF-8 bytes. A base over its budget is cut on a character boundary and followed
  by ``_`` and the first 6 hex of SHA-256 of the **original** base (V-18 Better: distinct long
  bases never share a name); so is a base that sanitising changed beyond ``-`` → ``_``
  (``café``, ``日本語``, ``1st``), so bases differing in characters the policy cannot carry
  stay apart. The digest is never truncated.
- **Tag references** (``parse_ref``): ``base:tag``, split on the first colon (V-33).

What it is not: it does no I/O and holds no provider flow; stores and the control-plane
calls live in ``rma_shell``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import attrs
from returns.result import Failure, Result, Success

from rma.provisioning.errors import InvalidRef, NotJSON
from rma.vocabulary import JSON

if TYPE_CHECKING:
    from rma.provisioning.spec import AgentSpec, EnvironmentSpec

MAX_DEPTH: Final = 256
"""Deepest nesting accepted in a spec's JSON values (and the guard against cyclic values)."""

_EXACT_FLOAT_INT: Final = 2**53
DIGEST_HEX_LEN: Final = 64
SHORT_DIGEST_LEN: Final = 8
TRUNCATION_HASH_LEN: Final = 6

AGENT_IDENTITY: Final = "rma.agent/1"
ENVIRONMENT_IDENTITY: Final = "rma.environment/1"
COMBINED_IDENTITY: Final = "rma.agent+environment/1"

# --- JSON values --------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def key_path(path: str, key: str) -> str:
    """``config.networking``, or ``config["allowed hosts"]`` for a key that is not a plain word."""
    if _IDENT.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def index_path(path: str, index: int) -> str:
    return f"{path}[{index}]"


class _Refused(Exception):
    def __init__(self, path: str, detail: str) -> None:
        super().__init__(detail)
        self.path = path
        self.detail = detail


def _string(value: str, path: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Refused(path, "a string with a lone surrogate is not valid Unicode") from None
    return str.__str__(value)


def _plain(value: object, path: str, depth: int, canonical: bool) -> JSON:
    if depth > MAX_DEPTH:
        raise _Refused(path, f"nested deeper than {MAX_DEPTH} levels (or cyclic)")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _string(value, path)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused(path, f"{value!r} is not a JSON number")
        if canonical and value.is_integer() and abs(value) < _EXACT_FLOAT_INT:
            return int(value)
        return float(value)
    if isinstance(value, Mapping):
        out: dict[str, JSON] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Refused(path, f"object keys must be strings, got {type(key).__name__} {key!r}")
            name = _string(key, path)
            out[name] = _plain(item, key_path(path, name), depth + 1, canonical)
        return out
    if isinstance(value, list | tuple):
        return [_plain(item, index_path(path, i), depth + 1, canonical) for i, item in enumerate(value)]
    raise _Refused(path, f"{type(value).__name__} is not a JSON type")


def json_value(value: object, path: str = "") -> Result[JSON, NotJSON]:
    """A plain, independent copy of a JSON value (dicts, lists, str, int, float, bool, None),
    key order kept, tuples as lists — or ``NotJSON`` naming where it is not JSON."""
    try:
        return Success(_plain(value, path, 0, canonical=False))
    except _Refused as refused:
        return Failure(NotJSON(path=refused.path, detail=refused.detail))


def canonical_json(value: object) -> Result[str, NotJSON]:
    """The canonical text of a JSON value (see the module docstring)."""
    try:
        plain = _plain(value, "", 0, canonical=True)
    except _Refused as refused:
        return Failure(NotJSON(path=refused.path, detail=refused.detail))
    return Success(
        json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    )


def canonical_bytes(value: object) -> Result[bytes, NotJSON]:
    return canonical_json(value).map(lambda text: text.encode("utf-8"))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(value: object) -> Result[str, NotJSON]:
    """Lowercase SHA-256 hex of the canonical bytes of ``value``."""
    return canonical_bytes(value).map(sha256_hex)


def short_digest(digest: str) -> str:
    """The 8 hex a provider-side name carries."""
    return digest[:SHORT_DIGEST_LEN]


_FULL_DIGEST = re.compile(r"[0-9a-f]{64}")


def is_digest(value: object) -> bool:
    """A full digest: 64 lowercase hex."""
    return isinstance(value, str) and _FULL_DIGEST.fullmatch(value) is not None


# --- identity documents -------------------------------------------------------------------


def agent_identity(spec: AgentSpec) -> JSON:
    """What an agent's digest covers: everything but its name (V-2). ``skills``,
    ``mcp_servers`` and ``multiagent`` count only when set, so a spec that does not use them
    keeps the digest it had before they existed (and its provisioned agent)."""
    document: dict[str, JSON] = {
        "identity": AGENT_IDENTITY,
        "system_prompt": spec.system_prompt,
        "tools": [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in spec.tools
        ],
        "terminal_tool": spec.terminal_tool,
        "model_config": spec.model_config,
    }
    document.update(spec.extensions())
    return document


def environment_identity(spec: EnvironmentSpec) -> JSON:
    """What an environment's digest covers: config and runtimes, not the name (V-4)."""
    return {
        "identity": ENVIRONMENT_IDENTITY,
        "config": spec.config,
        "runtimes": [{"lang": r.lang, "version": r.version, "via": r.via} for r in spec.runtimes],
    }


def _digest_of_valid(document: JSON) -> str:
    # Specs hold validated JSON only, so this cannot fail; a failure is a bug worth a crash.
    return digest_of(document).unwrap()


def agent_digest(spec: AgentSpec) -> str:
    return _digest_of_valid(agent_identity(spec))


def environment_digest(spec: EnvironmentSpec) -> str:
    return _digest_of_valid(environment_identity(spec))


def combined_digest(agent: AgentSpec, environment: EnvironmentSpec | None) -> str:
    """The identity of an agent run in an environment (a harness folds both in, B-49).

    No environment, or an empty one (no config, no runtimes — nothing reaches the wire), is
    the agent's own digest (B-50: env nil ≡ no env). The environment's name never matters.
    """
    if environment is None or environment.is_empty:
        return agent_digest(agent)
    return _digest_of_valid(
        {
            "identity": COMBINED_IDENTITY,
            "agent": agent_digest(agent),
            "environment": environment_digest(environment),
        }
    )


# --- names --------------------------------------------------------------------------------


@attrs.frozen
class NamePolicy:
    """What a provider accepts as a resource name (V-16, V-18).

    ``charset`` is the body of a regex character class of allowed characters (None: any);
    with a charset the base is folded to ASCII first and every other character becomes ``_``.
    """

    provider: str
    max_bytes: int
    charset: str | None = None
    leading_letter: bool = False
    digest_len: int = SHORT_DIGEST_LEN

    def __attrs_post_init__(self) -> None:
        minimum = self.digest_len + TRUNCATION_HASH_LEN + 3
        if self.max_bytes < minimum:
            raise ValueError(
                f"name policy {self.provider!r}: max_bytes {self.max_bytes} cannot hold a digest of "
                f"{self.digest_len} and a truncation hash; the minimum is {minimum}"
            )

    @property
    def pattern(self) -> re.Pattern[str]:
        """A full-match regex for names under this policy (byte length checked separately)."""
        if self.charset is None:
            return re.compile(r"(?s).+")
        lead = "[A-Za-z]" if self.leading_letter else f"[{self.charset}]"
        return re.compile(f"{lead}[{self.charset}]{{0,{self.max_bytes - 1}}}")

    def accepts(self, name: str) -> bool:
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError:
            return False
        return 0 < size <= self.max_bytes and self.pattern.fullmatch(name) is not None


CLAUDE_NAMES: Final = NamePolicy(provider="claude_managed_agents", max_bytes=256)
"""Claude Managed Agents agent and environment names: any characters, 256 UTF-8 bytes (V-18; the
API documents no limit, the reference assumes 256 and refuses to truncate agent bases, V-20)."""

AGENTCORE_HARNESS_NAMES: Final = NamePolicy(
    provider="bedrock_agent_core", max_bytes=40, charset="A-Za-z0-9_", leading_letter=True
)
"""AgentCore harness names: ``[a-zA-Z][a-zA-Z0-9_]{0,39}`` (wire reference §8.1, B-50)."""

_ASCII_LETTERS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_HEX: Final = re.compile(r"[0-9a-f]+")


def _sanitise(base: str, policy: NamePolicy) -> str:
    if policy.charset is None:
        return base
    allowed = re.compile(f"[{policy.charset}]")
    out: list[str] = []
    for ch in unicodedata.normalize("NFKD", base):
        if unicodedata.combining(ch):
            continue  # é → e, ﬁ → fi: a readable name rather than a row of underscores
        out.append(ch if ch.isascii() and allowed.fullmatch(ch) else "_")
    return "".join(out)


def _cut(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` within ``max_bytes`` UTF-8 bytes — whole characters only."""
    size = 0
    for i, ch in enumerate(text):
        size += len(ch.encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            return text[:i]
    return text


def _lossless(base: str, stem: str, policy: NamePolicy) -> bool:
    """The stem still says what the base said. ``-`` → ``_`` counts as lossless: it is the common
    case (``billing-support``) and the reference's name vectors rely on it (B.4)."""
    if not base:
        return True  # nothing to lose: an empty base is just the leading "a" (B-50: a_<digest>)
    return stem == (base if policy.charset is None else base.replace("-", "_"))


def name_stem(base: str, policy: NamePolicy) -> str:
    """The part of every name of ``base`` before ``_<digest8>`` (V-16, V-17).

    Sanitised, led by a letter where the policy says so; when that lost information (a
    character replaced or folded, a leading ``a`` added) or the stem is over budget, it is
    followed by ``_`` and 6 hex of SHA-256 of the *original* base, cutting the stem on a
    character boundary to make room — so two bases share a stem only when they differ by
    ``-`` versus ``_`` (V-18 Better: ``日本語`` and ``中文字`` no longer both become ``a___``,
    and a prune of one base cannot match the other's names).
    """
    stem = _sanitise(base, policy)
    if policy.leading_letter and (not stem or stem[0] not in _ASCII_LETTERS):
        stem = "a" + stem
    budget = policy.max_bytes - policy.digest_len - 1
    size = len(stem.encode("utf-8", "surrogatepass"))
    if size <= budget and _lossless(base, stem, policy):
        return stem
    marker = sha256_hex(base.encode("utf-8", "surrogatepass"))[:TRUNCATION_HASH_LEN]
    room = budget - TRUNCATION_HASH_LEN - 1
    return f"{stem if size <= room else _cut(stem, room)}_{marker}"


def compose_name(base: str, digest: str, policy: NamePolicy) -> str:
    """``<stem>_<digest8>`` (V-16, V-17). ``digest`` is lowercase hex, full or already short;
    the name takes its first ``policy.digest_len`` characters. A malformed digest is a
    programming error and raises ``ValueError``."""
    if len(digest) < policy.digest_len or not _HEX.fullmatch(digest):
        raise ValueError(f"digest must be at least {policy.digest_len} lowercase hex, got {digest!r}")
    return f"{name_stem(base, policy)}_{digest[: policy.digest_len]}"


def digest_of_name(name: str, base: str, policy: NamePolicy) -> str | None:
    """The 8 hex of a provider-side name composed from ``base``, or None when the name is not
    exactly ``<stem of base>_<8 lowercase hex>`` (prune's candidate rule, V-36: a longer base
    such as ``data_analysis_…`` never matches ``data``)."""
    prefix = name_stem(base, policy) + "_"
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    if len(rest) != policy.digest_len or not _HEX.fullmatch(rest):
        return None
    return rest


def preserves_base(name: str, base: str) -> bool:
    """V-19: the name still starts with ``base_`` — false once the base was sanitised or cut."""
    return name.startswith(base + "_")


def agent_name(spec: AgentSpec, base: str | None = None, policy: NamePolicy = CLAUDE_NAMES) -> str:
    """A Claude Managed Agents agent name: ``<base or spec.name>_<digest8>`` (V-20)."""
    return compose_name(spec.name if base is None else base, agent_digest(spec), policy)


def environment_name(spec: EnvironmentSpec, base: str, policy: NamePolicy = CLAUDE_NAMES) -> str:
    """A Claude Managed Agents environment name ``<base>_<digest8>`` (V-26, now under a policy)."""
    return compose_name(base, environment_digest(spec), policy)


def harness_base(spec: AgentSpec, prefix: str | None = None) -> str:
    """B-49: the prefix and the spec name joined with ``_`` (empty parts dropped)."""
    return "_".join(part for part in (prefix, spec.name) if part)


def harness_name(
    spec: AgentSpec, environment: EnvironmentSpec | None = None, prefix: str | None = None
) -> str:
    """An AgentCore harness name for an agent in an environment (B-49, B-50)."""
    return compose_name(
        harness_base(spec, prefix), combined_digest(spec, environment), AGENTCORE_HARNESS_NAMES
    )


# --- tag references -----------------------------------------------------------------------

_TAG = re.compile(r"[A-Za-z0-9_.:@+-]{1,128}")


@attrs.frozen
class TagRef:
    """``base:tag`` parsed."""

    base: str
    tag: str

    def __str__(self) -> str:
        return f"{self.base}:{self.tag}"


def check_tag(tag: object, base: str = "") -> Result[str, InvalidRef]:
    """A tag is 1–128 characters of ``[A-Za-z0-9_.:@+-]`` (colons allowed: refs split on the
    first colon only)."""
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        return Failure(
            InvalidRef(
                ref=f"{base}:{tag}",
                detail="a tag is 1-128 characters of letters, digits and _ . : @ + -",
            )
        )
    return Success(tag)


def check_base(base: object) -> Result[str, InvalidRef]:
    """A base is a non-empty string without colons or control characters."""
    if (
        not isinstance(base, str)
        or not base
        or ":" in base
        or any(unicodedata.category(ch) in ("Cc", "Cs") for ch in base)
    ):
        return Failure(
            InvalidRef(
                ref=str(base), detail="a base is a non-empty string without colons or control characters"
            )
        )
    return Success(base)


def parse_ref(ref: object) -> Result[TagRef, InvalidRef]:
    """``"base:tag"`` → ``TagRef`` (V-33, split on the first colon). No colon, an empty side or
    an invalid tag is ``InvalidRef`` (V-33 Better: a value, not a raise)."""
    if not isinstance(ref, str) or ":" not in ref:
        return Failure(InvalidRef(ref=str(ref), detail="expected base:tag"))
    base, tag = ref.split(":", 1)
    checked = check_base(base).bind(lambda b: check_tag(tag, b).map(lambda t: TagRef(base=b, tag=t)))
    return checked.alt(lambda error: InvalidRef(ref=ref, detail=error.detail))

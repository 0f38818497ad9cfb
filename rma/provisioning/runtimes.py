"""Declared runtimes: the bootstrap script, the system-prompt block, the hosts, the wire config.

What this is: the pure rendering of an environment's ``runtimes`` (V-47…V-51, V-29) — a bash
script that installs each ``lang@version`` with mise on first need, the instructions an agent
reads to run it, the hosts it must reach, and the provider config with those hosts merged
into *limited* networking. Output is deterministic: the same runtimes give the same bytes.
What it is not: no provider call and no I/O — the flows in ``rma_shell.provisioning`` put
``wire_config`` on the wire and hand ``Bootstrap`` to the caller on the environment handle.

Safety: ``lang`` and ``version`` are interpolated into shell words unquoted. That is safe only
because every runtime is validated by ``rma.provisioning.spec`` first (whole-string patterns
``[a-z0-9][a-z0-9_-]{0,63}`` and ``[0-9A-Za-z][0-9A-Za-z._+-]{0,63}``: no spaces, quotes,
``;``, ``$``, backquotes, newlines, leading ``-``). Every function here re-validates entries
that are not already ``Runtime`` values and raises ``SpecError`` on an invalid one.

Hosts (``required_hosts``). Every mise runtime needs mise itself and its download sources:
``mise.jdx.dev`` (the install script), ``mise-versions.jdx.dev`` (version lists),
``github.com``, ``objects.githubusercontent.com`` and ``release-assets.githubusercontent.com``
(GitHub release downloads: mise's binary and most prebuilt runtimes; GitHub now serves
release assets from the latter). Languages add (``LANGUAGE_HOSTS``):

==========  ==============================================  ====================================
lang        hosts                                           why
==========  ==============================================  ====================================
erlang      ``builds.hex.pm``, ``repo.hex.pm``              prebuilt OTP, hex (the reference's)
elixir      ``builds.hex.pm``, ``repo.hex.pm``              Elixir builds, hex packages
node        ``nodejs.org``                                  Node.js tarballs
go          ``dl.google.com``, ``go.dev``                   Go tarballs, version index
ruby        ``cache.ruby-lang.org``                         ruby-build source tarballs
rust        ``sh.rustup.rs``, ``static.rust-lang.org``      rustup and toolchains
==========  ==============================================  ====================================

Other languages (python — prebuilt from GitHub —, and anything unlisted) need only the mise
hosts. The per-language rows follow mise's default download sources as documented today and
are not verified against a live sandbox; a config that needs more lists them itself in
``allowed_hosts`` (they are kept, first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import attrs
from returns.result import Failure, Result

from rma.provisioning.errors import InvalidSpec
from rma.provisioning.spec import EnvironmentSpec, Runtime, SpecError
from rma.vocabulary import JSON

MARKER: Final = "mise activate-rma"
"""The line that guards the ``~/.bashrc`` block: present means the block is already there."""

INSTALL_URL: Final = "https://mise.jdx.dev/install.sh"

MISE_HOSTS: Final = (
    "github.com",
    "mise-versions.jdx.dev",
    "mise.jdx.dev",
    "objects.githubusercontent.com",
    "release-assets.githubusercontent.com",
)

LANGUAGE_HOSTS: Final[Mapping[str, tuple[str, ...]]] = {
    "erlang": ("builds.hex.pm", "repo.hex.pm"),
    "elixir": ("builds.hex.pm", "repo.hex.pm"),
    "node": ("nodejs.org",),
    "go": ("dl.google.com", "go.dev"),
    "ruby": ("cache.ruby-lang.org",),
    "rust": ("sh.rustup.rs", "static.rust-lang.org"),
}

_ENV_LINES: Final = (
    "export LANG=C.UTF-8 LC_ALL=C.UTF-8",
    'export PATH="$HOME/.local/bin:$HOME/.local/share/mise/shims:$PATH"',
)
_HEREDOC: Final = "RMA_MISE_ACTIVATE"

RuntimeLike = Runtime | Mapping[str, object]


@attrs.frozen
class Bootstrap:
    """What an environment handle carries when runtimes are declared (V-30): the script and
    the system-prompt block that tells the agent to run it. Computed, never stored."""

    script: str
    instructions: str


def validate(runtimes: object) -> Result[tuple[Runtime, ...], InvalidSpec]:
    """V-47: the runtimes as ``Runtime`` values, or the first error naming ``runtimes[i].field``
    (a non-list, an unknown field, a bad version, a language declared twice)."""
    return EnvironmentSpec.create(runtimes=runtimes).map(lambda spec: spec.runtimes)


def _checked(runtimes: Iterable[RuntimeLike]) -> tuple[Runtime, ...]:
    result = validate(runtimes)
    if isinstance(result, Failure):
        raise SpecError(result.failure())
    return result.unwrap()


def _ordered(runtimes: Sequence[Runtime]) -> list[Runtime]:
    """V-49: erlang first, then elixir, then the rest in input order."""
    rank = {"erlang": 0, "elixir": 1}
    return sorted(runtimes, key=lambda r: rank.get(r.lang, 2))  # sorted is stable


def mise_specs(runtimes: Iterable[RuntimeLike]) -> list[str]:
    """The ``mise use`` arguments in install order (V-49). Elixir built for the declared
    Erlang's major (``elixir@1.17.3-otp-27``) when Erlang is declared."""
    checked = _ordered(_checked(runtimes))
    erlang = next((r for r in checked if r.lang == "erlang"), None)
    out: list[str] = []
    for runtime in checked:
        if runtime.lang == "elixir" and erlang is not None:
            out.append(f"elixir@{runtime.version}-otp-{erlang.version.split('.', 1)[0]}")
        else:
            out.append(runtime.mise_spec)
    return out


def bootstrap_script(runtimes: Iterable[RuntimeLike]) -> str:
    """V-48: an idempotent bash script installing every runtime with mise.

    Strict mode and the C.UTF-8 locale; mise installed only when absent; ``PATH`` with
    ``~/.local/bin`` and mise's shims; one ``mise use --global`` per runtime; ``mise install``;
    and, once, a block in ``~/.bashrc`` (guarded by ``MARKER``) re-exporting ``PATH`` and the
    locale so later shells find the runtimes."""
    specs = mise_specs(runtimes)
    lines = [
        "#!/usr/bin/env bash",
        f"# rma runtime bootstrap: {' '.join(specs) or '(no runtimes)'} via mise. Safe to re-run.",
        "set -euo pipefail",
        *_ENV_LINES,
        "if ! command -v mise >/dev/null 2>&1; then",
        f"  curl -fsSL {INSTALL_URL} | sh",
        "fi",
        *(f"mise use --global {spec}" for spec in specs),
        "mise install",
        f"if ! grep -qF '{MARKER}' \"$HOME/.bashrc\" 2>/dev/null; then",
        f"  cat >> \"$HOME/.bashrc\" <<'{_HEREDOC}'",
        f"# >>> {MARKER} >>>",
        *_ENV_LINES,
        f"# <<< {MARKER} <<<",
        _HEREDOC,
        "fi",
    ]
    return "\n".join(lines) + "\n"


def system_prompt_block(runtimes: Iterable[RuntimeLike]) -> str:
    """V-50: the instructions an agent needs — which runtimes, that they are not preinstalled,
    run the script EXACTLY ONCE via bash before the first command needing them — with the
    script in a bash fence. Empty when no runtime is declared."""
    checked = _checked(runtimes)
    if not checked:
        return ""
    names = ", ".join(f"{r.lang} {r.version}" for r in _ordered(checked))
    return (
        "## Language runtimes\n"
        "\n"
        f"This environment declares these language runtimes: {names}.\n"
        "They are NOT preinstalled. Before the first command that needs any of them, run the "
        "script below EXACTLY ONCE via bash (save it to a file and run `bash <file>`, or pipe "
        "it to `bash`). It is idempotent: running it again is harmless but slow, so do not. "
        "Afterwards run `source ~/.bashrc` (or start a new shell) so the runtimes are on PATH.\n"
        "\n"
        "```bash\n"
        f"{bootstrap_script(checked)}"
        "```\n"
    )


def bootstrap(runtimes: Iterable[RuntimeLike]) -> Bootstrap | None:
    """The handle's ``Bootstrap`` (V-30), or None without runtimes."""
    checked = _checked(runtimes)
    if not checked:
        return None
    return Bootstrap(script=bootstrap_script(checked), instructions=system_prompt_block(checked))


def required_hosts(runtimes: Iterable[RuntimeLike]) -> list[str]:
    """V-51: the hosts the bootstrap reaches, sorted and deduplicated; ``[]`` for no runtimes."""
    checked = _checked(runtimes)
    if not checked:
        return []
    hosts = set(MISE_HOSTS)
    for runtime in checked:
        hosts.update(LANGUAGE_HOSTS.get(runtime.lang, ()))
    return sorted(hosts)


def _hosts_key(networking: Mapping[str, JSON]) -> str:
    """Where the allowed hosts live: the key already present, else the style the map uses
    (``allowedHosts`` beside camelCase keys, ``allowed_hosts`` otherwise)."""
    for key in ("allowed_hosts", "allowedHosts"):
        if key in networking:
            return key
    camel = any(k != k.lower() and "_" not in k for k in networking)
    return "allowedHosts" if camel else "allowed_hosts"


def wire_config(spec: EnvironmentSpec) -> dict[str, JSON]:
    """V-29: the config to send — a copy of ``spec.config`` (runtimes never go on the wire).

    With runtimes declared and ``config["networking"]`` of type ``limited``, the required
    hosts are merged into its allowed hosts: existing entries first, in their order, then the
    new ones, without duplicates, under the key the networking map already uses (V-29
    Better: a flat ``networking`` key is already in ``config`` — ``EnvironmentSpec.coerce``
    collects it). Unrestricted or absent networking is left untouched.
    """
    config: dict[str, JSON] = _copy(spec.config)
    networking = config.get("networking")
    if not spec.runtimes or not isinstance(networking, dict) or networking.get("type") != "limited":
        return config
    key = _hosts_key(networking)
    existing = networking.get(key, [])
    if not isinstance(existing, list):
        return config  # not ours to repair: the provider names the user's mistake
    merged: list[JSON] = []
    for host in [*existing, *required_hosts(spec.runtimes)]:
        if host not in merged:
            merged.append(host)
    networking[key] = merged
    return config


def _copy(value: dict[str, JSON]) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for key, item in value.items():
        out[key] = _copy_json(item)
    return out


def _copy_json(value: JSON) -> JSON:
    if isinstance(value, dict):
        return _copy(value)
    if isinstance(value, list):
        return [_copy_json(item) for item in value]
    return value


__all__ = [
    "INSTALL_URL",
    "LANGUAGE_HOSTS",
    "MARKER",
    "MISE_HOSTS",
    "Bootstrap",
    "bootstrap",
    "bootstrap_script",
    "mise_specs",
    "required_hosts",
    "system_prompt_block",
    "validate",
    "wire_config",
]

"""``rma provision | tag | resolve | prune | teardown``: managed entities from the command line.

Each sub-command's ``--help`` says the same in plain text (``COMMON_HELP``, ``DESCRIPTIONS``).
Specs are JSON files (``AgentSpec`` / ``EnvironmentSpec`` fields). Results are printed as JSON on
stdout, errors as ``rma <command>: error: <kind>: <message>`` on stderr. The store is SQLite at
the documented default path (``$RMA_STORE``, else ``$XDG_STATE_HOME/rma/rma.sqlite3``, else
``~/.local/state/rma/rma.sqlite3``) unless ``--store`` names another (``.json`` → a JSON file
store, ``:memory:`` → in memory). Credentials come from the environment as for ``run``:
``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_BEARER_TOKEN_FILE``) for Claude, ``AWS_*`` (or a profile
with the ``aws`` extra) for AgentCore; they are never printed.

Exit codes: 0 success, 1 a provisioning error (nothing half-done is left behind that the command
could undo), 2 bad usage or an unreadable spec file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import anyio
from returns.result import Failure, Result, Success

from rma.errors import SessionError
from rma.vocabulary import JSON
from rma_shell.cli.progress import Progress, harness_wait_telemetry

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

PROVIDERS = {
    "claude": "claude_managed_agents",
    "claude_managed_agents": "claude_managed_agents",
    "agentcore": "bedrock_agent_core",
    "bedrock_agentcore": "bedrock_agent_core",
    "bedrock_agent_core": "bedrock_agent_core",
}
KINDS = {"claude_managed_agents": ("agent", "environment"), "bedrock_agent_core": ("harness",)}
COMMANDS = ("provision", "tag", "resolve", "prune", "teardown")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _common(parser: argparse.ArgumentParser, *, kind: bool = True) -> None:
    parser.add_argument(
        "--provider",
        required=True,
        choices=sorted(PROVIDERS),
        metavar="{claude,agentcore}",
        help="claude (Managed Agents) or agentcore (Bedrock AgentCore)",
    )
    if kind:
        parser.add_argument(
            "--kind", choices=["agent", "environment", "harness"], help="default: agent (claude), harness"
        )
    parser.add_argument(
        "--store",
        metavar="PATH",
        help="store location (default: SQLite at $RMA_STORE or ~/.local/state/rma/rma.sqlite3)",
    )
    parser.add_argument("--base-url", help="Claude API base URL (env ANTHROPIC_BASE_URL)")
    parser.add_argument("--region", help="AWS region (env AWS_REGION)")
    parser.add_argument("--data-url", help="AgentCore data-plane URL (default: derived from the region)")
    parser.add_argument(
        "--control-url", help="AgentCore control-plane URL (default: derived from the region)"
    )


COMMON_HELP = """\
Specs are JSON files with AgentSpec / EnvironmentSpec fields. Results are printed as JSON on
stdout; errors as "rma COMMAND: error: KIND: MESSAGE" on stderr. The store is SQLite at
$RMA_STORE, else $XDG_STATE_HOME/rma/rma.sqlite3, else ~/.local/state/rma/rma.sqlite3, unless
--store names another (a .json path: a JSON file store; :memory: in memory). Credentials come
from the environment: ANTHROPIC_API_KEY (or ANTHROPIC_BEARER_TOKEN_FILE) for Claude, AWS_* (or
a profile, with the aws extra) for AgentCore. They are never printed.

Exit codes: 0 success, 1 a provisioning error (nothing half-done is left behind that the
command could undo), 2 bad usage or an unreadable spec file, 130 interrupted (Ctrl-C).
"""

DESCRIPTIONS = {
    "provision": """\
Create what a managed provider needs for a spec, or reuse what an earlier call created: on
Claude an agent and an environment, on AgentCore one harness (waited for until it and its
endpoint are READY). The handle is printed as JSON, each entity marked "provisioned":
"created" or "reused"; the same is said on stderr, one line per entity. On a terminal, long
waits show what is being waited for and for how long (not with --json).
""",
    "tag": "Point BASE:TAG at a provisioned digest (the full digest or its first 8 hex digits).",
    "resolve": "Print the handle that BASE:TAG points at, as JSON. Nothing remote is called.",
    "prune": """\
Keep the newest N versions of BASE (and every tagged one); archive (Claude) or delete
(AgentCore) the rest. Prints what was removed and what was kept, as JSON.
""",
    "teardown": "Release what BASE:TAG points at (archive or delete it) and forget it in the store.",
}


def _parser(commands: Any, name: str, help: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help,
        description=DESCRIPTIONS[name] + "\n" + COMMON_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def add_commands(commands: Any) -> None:
    """Register the provisioning sub-commands on the ``rma`` parser."""
    provision = _parser(
        commands, "provision", "create (or reuse) the agent/environment or harness for a spec"
    )
    _common(provision, kind=False)
    provision.add_argument("--agent", required=True, metavar="FILE", help="agent spec (JSON)")
    provision.add_argument("--environment", metavar="FILE", help="environment spec (JSON)")
    provision.add_argument("--execution-role-arn", help="AgentCore: the IAM role the harness assumes")
    provision.add_argument("--endpoint-name", help="AgentCore: the endpoint to wait for (default DEFAULT)")
    provision.add_argument("--prefix", help="AgentCore: a harness-name prefix")
    provision.add_argument(
        "--timeout", type=_positive_float, help="AgentCore: the whole wait budget in seconds (365)"
    )
    provision.add_argument("--tag", help="also tag the result (e.g. stable)")
    provision.add_argument(
        "--json", action="store_true", help="only the JSON result: no progress or notes on stderr"
    )

    tag = _parser(commands, "tag", "point BASE:TAG at a provisioned digest")
    _common(tag)
    tag.add_argument("base", metavar="BASE")
    tag.add_argument("tag", metavar="TAG")
    tag.add_argument("digest", metavar="DIGEST", help="the digest (or its first 8 hex) to tag")

    resolve = _parser(commands, "resolve", "print the handle BASE:TAG points at")
    _common(resolve)
    resolve.add_argument("ref", metavar="BASE:TAG")

    prune = _parser(commands, "prune", "archive/delete all but the newest N versions of BASE")
    _common(prune)
    prune.add_argument("base", metavar="BASE")
    prune.add_argument(
        "--keep", type=_positive_int, required=True, metavar="N", help="how many of the newest to keep (> 0)"
    )

    teardown = _parser(commands, "teardown", "release what BASE:TAG points at and forget it")
    _common(teardown)
    teardown.add_argument("ref", metavar="BASE:TAG")


STORE_ENV_VAR = "RMA_STORE"
"""Names the provisioning store when ``--store`` does not (``rma_shell.stores.ENV_VAR``)."""


def run_command(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    provider_name = PROVIDERS[args.provider]
    kind = getattr(args, "kind", None) or KINDS[provider_name][0]
    if args.command != "provision" and kind not in KINDS[provider_name]:
        return _fail(args.command, f"--kind {kind} does not exist for {args.provider}", EXIT_USAGE)
    try:
        store = _open_store(args.store, environ)
    except Exception as exc:  # a store that cannot be opened is a usage problem, said plainly
        return _fail(args.command, f"cannot open the store: {exc}", EXIT_USAGE)
    if args.store is None and not environ.get(STORE_ENV_VAR):
        # The default lives in the user's home: never written there unnoticed (a test, a CI job).
        from rma_shell.stores import default_store_path

        where = default_store_path(environ)
        print(
            f"rma {args.command}: store {where} (the default; --store or $RMA_STORE for another)",
            file=sys.stderr,
        )
    try:
        handler = _HANDLERS[args.command]
        outcome = anyio.run(handler, args, environ, store, provider_name, kind, backend="trio")
    finally:
        store.close()
    if isinstance(outcome, int):
        return outcome
    if isinstance(outcome, Failure):
        error = outcome.failure()
        return _fail(args.command, f"{error.kind}: {error.message}", EXIT_ERROR)
    print(json.dumps(outcome.unwrap(), indent=2, sort_keys=True))
    return EXIT_OK


def _cma_kind(kind: str) -> Literal["agent", "environment"]:
    return "environment" if kind == "environment" else "agent"


def _fail(command: str, message: str, code: int) -> int:
    print(f"rma {command}: error: {message}", file=sys.stderr)
    return code


def _open_store(location: str | None, environ: Mapping[str, str]) -> Any:
    from rma_shell.stores import open_store

    return open_store(location, env=environ)


def _provider(args: argparse.Namespace, environ: Mapping[str, str], provider_name: str) -> Any:
    if provider_name == "claude_managed_agents":
        from rma_shell.providers.claude import ClaudeManagedAgents

        options: dict[str, Any] = {"env": environ}
        if args.base_url:
            options["base_url"] = args.base_url
        return ClaudeManagedAgents(**options)
    from rma_shell.providers.agentcore import BedrockAgentCore

    aws: dict[str, Any] = {"env": environ}
    if args.region:
        aws["aws_region"] = args.region
    if args.data_url:
        aws["data_url"] = args.data_url
    if args.control_url:
        aws["control_url"] = args.control_url
    return BedrockAgentCore(**aws)


def _read_json(path: str, what: str) -> JSON:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise _Usage(f"cannot read the {what} spec {path}: {exc}") from None


class _Usage(Exception):
    pass


def _handle_json(value: Any) -> JSON:
    if hasattr(value, "to_json"):
        out = value.to_json()
        if hasattr(value, "agent") and hasattr(value, "environment"):
            out = {"agent": value.agent.to_json(), "environment": value.environment.to_json()}
        return out
    return value


Handler = Callable[..., Any]


async def _provision(
    args: argparse.Namespace, environ: Mapping[str, str], store: Any, provider_name: str, kind: str
) -> Result[JSON, SessionError] | int:
    from rma_shell.provisioning import provision

    try:
        agent = _read_json(args.agent, "agent")
        environment = _read_json(args.environment, "environment") if args.environment else None
    except _Usage as exc:
        return _fail("provision", str(exc), EXIT_USAGE)
    provider = _provider(args, environ, provider_name)
    options: dict[str, Any] = {}
    if provider_name == "bedrock_agent_core":
        if not args.execution_role_arn:
            return _fail("provision", "--execution-role-arn is required for agentcore", EXIT_USAGE)
        options = {"execution_role_arn": args.execution_role_arn}
        for name in ("endpoint_name", "prefix", "timeout"):
            if getattr(args, name) is not None:
                options[name] = getattr(args, name)
    progress = Progress.for_stream(sys.stderr, enabled=not args.json)
    if provider_name == "bedrock_agent_core":
        options["telemetry"] = harness_wait_telemetry(progress)
    try:
        async with progress.running():
            got = await provision(provider, agent, environment, store=store, **options)
        if isinstance(got, Failure):
            return Failure(got.failure())
        handle = got.unwrap()
        if args.tag:
            from rma.provisioning.identity import harness_base
            from rma.provisioning.spec import AgentSpec

            base = harness_base(AgentSpec.coerce(agent).unwrap(), options.get("prefix"))
            tagged = _tag_handle(store, provider_name, handle, args.tag, base)
            if isinstance(tagged, Failure):
                return Failure(tagged.failure())
        shown, notes = _provisioned(handle)
        if not args.json:
            for note in notes:
                print(f"rma provision: {note}", file=sys.stderr)
        return Success(shown)
    finally:
        await provider.close()


def _provisioned(handle: Any) -> tuple[JSON, list[str]]:
    """The handle as JSON with each entity marked created or reused, and a line for each."""
    if hasattr(handle, "agent") and hasattr(handle, "environment"):  # Claude: agent + environment
        shown: dict[str, JSON] = {}
        notes = []
        for kind, part in (("agent", handle.agent), ("environment", handle.environment)):
            state = "created" if part.name in handle.created else "reused"
            shown[kind] = {**part.to_json(), "provisioned": state}
            notes.append(f"{kind} {part.name}: {state}")
        return shown, notes
    state = "created" if handle.created else "reused"
    return {**handle.to_json(), "provisioned": state}, [f"harness {handle.name}: {state}"]


def _tag_handle(
    store: Any, provider_name: str, handle: Any, tag: str, harness_base: str
) -> Result[None, SessionError]:
    if provider_name == "claude_managed_agents":
        from rma_shell.providers.claude import provisioning as cma

        parts: tuple[tuple[Literal["agent", "environment"], Any], ...] = (
            ("agent", handle.agent),
            ("environment", handle.environment),
        )
        for kind, part in parts:
            base = part.name[: -len(part.short_digest) - 1]
            got = cma.tag(store, kind, base, tag, part)
            if isinstance(got, Failure):
                return Failure(got.failure())
        return Success(None)
    from rma_shell.providers.agentcore.provisioning import tag_harness

    return tag_harness(store, harness_base, tag, handle.digest)


async def _tag(
    args: argparse.Namespace, environ: Mapping[str, str], store: Any, provider_name: str, kind: str
) -> Result[JSON, SessionError]:
    if provider_name == "claude_managed_agents":
        from rma_shell.providers.claude import provisioning as cma

        got: Result[None, Any] = cma.tag(store, _cma_kind(kind), args.base, args.tag, args.digest)
    else:
        from rma_shell.providers.agentcore.provisioning import tag_harness

        got = tag_harness(
            store, args.base, args.tag, _full_digest(store, provider_name, kind, args.base, args.digest)
        )
    await anyio.lowlevel.checkpoint()
    return got.map(lambda _: {"ref": f"{args.base}:{args.tag}", "digest": args.digest})


def _full_digest(store: Any, provider_name: str, kind: str, base: str, digest: str) -> str:
    from rma_shell.stores import StoreKey

    if len(digest) == 64:
        return digest
    matches = [
        d
        for d in store.digests(StoreKey(provider=provider_name, kind=kind, base=base))
        if d.startswith(digest)
    ]
    return matches[0] if len(matches) == 1 else digest


async def _resolve(
    args: argparse.Namespace, environ: Mapping[str, str], store: Any, provider_name: str, kind: str
) -> Result[JSON, SessionError]:
    await anyio.lowlevel.checkpoint()
    if provider_name == "claude_managed_agents":
        from rma_shell.providers.claude import provisioning as cma

        found: Result[Any, Any] = cma.resolve(store, args.ref, kind)  # type: ignore[call-overload]
    else:
        from rma_shell.providers.agentcore.provisioning import resolve_harness

        found = resolve_harness(store, args.ref)
    return found.map(_handle_json)


async def _prune(
    args: argparse.Namespace, environ: Mapping[str, str], store: Any, provider_name: str, kind: str
) -> Result[JSON, SessionError]:
    provider = _provider(args, environ, provider_name)
    try:
        if provider_name == "claude_managed_agents":
            from rma_shell.providers.claude import provisioning as cma

            client = provider.client()
            if isinstance(client, Failure):
                return Failure(client.failure())
            pruned = await cma.prune(client.unwrap(), store, _cma_kind(kind), args.base, keep=args.keep)
            return pruned.map(lambda p: {"archived": list(p.archived), "kept": list(p.kept)})
        from rma_shell.providers.agentcore.provisioning import prune_harnesses

        control = await provider.control_client()
        if isinstance(control, Failure):
            return Failure(control.failure())
        done = await prune_harnesses(control.unwrap(), store, args.base, keep=args.keep)
        return done.map(lambda p: {"deleted": list(p.deleted), "kept": list(p.kept)})
    finally:
        await provider.close()


async def _teardown(
    args: argparse.Namespace, environ: Mapping[str, str], store: Any, provider_name: str, kind: str
) -> Result[JSON, SessionError]:
    from rma_shell.provisioning import teardown

    found = await _resolve(args, environ, store, provider_name, kind)
    if isinstance(found, Failure):
        return found
    provider = _provider(args, environ, provider_name)
    try:
        if provider_name == "claude_managed_agents":
            from rma_shell.providers.claude import provisioning as cma

            handle: Any = cma.resolve(store, args.ref, kind).unwrap()  # type: ignore[call-overload]
        else:
            from rma_shell.providers.agentcore.provisioning import resolve_harness

            handle = resolve_harness(store, args.ref).unwrap()
        done = await teardown(provider, handle, store=store)
        return done.map(lambda _: {"released": found.unwrap()})
    finally:
        await provider.close()


_HANDLERS: dict[str, Handler] = {
    "provision": _provision,
    "tag": _tag,
    "resolve": _resolve,
    "prune": _prune,
    "teardown": _teardown,
}

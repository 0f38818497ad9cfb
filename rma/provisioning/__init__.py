"""Provisioning's pure core: specs, content identity (canonical JSON, digests, names), tag refs.

What this is: the decisions of provisioning that need no I/O — validating what to build,
naming it on the provider side, and parsing ``base:tag``. What it is not: the stores
(``rma_shell.stores``) and the control-plane flows that create, recover and archive remote
resources (``rma_shell``).
"""

from rma.provisioning.errors import (
    InvalidRef,
    InvalidSpec,
    NotJSON,
    ProvisioningError,
    UnknownTag,
    UntrackedDigest,
)
from rma.provisioning.identity import (
    AGENTCORE_HARNESS_NAMES,
    CLAUDE_NAMES,
    NamePolicy,
    TagRef,
    agent_digest,
    agent_name,
    canonical_json,
    combined_digest,
    compose_name,
    digest_of,
    digest_of_name,
    environment_digest,
    environment_name,
    harness_name,
    parse_ref,
    preserves_base,
    short_digest,
)
from rma.provisioning.spec import AgentSpec, EnvironmentSpec, Runtime, SpecError, ToolSchema

__all__ = [
    "AGENTCORE_HARNESS_NAMES",
    "CLAUDE_NAMES",
    "AgentSpec",
    "EnvironmentSpec",
    "InvalidRef",
    "InvalidSpec",
    "NamePolicy",
    "NotJSON",
    "ProvisioningError",
    "Runtime",
    "SpecError",
    "TagRef",
    "ToolSchema",
    "UnknownTag",
    "UntrackedDigest",
    "agent_digest",
    "agent_name",
    "canonical_json",
    "combined_digest",
    "compose_name",
    "digest_of",
    "digest_of_name",
    "environment_digest",
    "environment_name",
    "harness_name",
    "parse_ref",
    "preserves_base",
    "short_digest",
]

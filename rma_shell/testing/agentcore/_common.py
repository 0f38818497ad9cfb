"""What every part of the AgentCore emulator shares: constants, the AWS error, small helpers.

The service's names and defaults (the SigV4 service, the session header, the emulator's
credentials, the harness statuses), ``_AwsError`` (an answer in the service's error form),
the disconnect checks and botocore's service model, loaded once as the oracle (and the check
that botocore is there at all). Not state, not routing.
"""

from __future__ import annotations

import hashlib
import select
import socket
import threading
from datetime import timedelta
from typing import Any

JSONDict = dict[str, Any]

SERVICE = "bedrock-agentcore"
SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
EVENT_STREAM = "application/vnd.amazon.eventstream"
DEFAULT_ACCESS_KEY_ID = "AKIDEMULATOR"
DEFAULT_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEMULATORKEY"
MAX_CLOCK_SKEW = timedelta(minutes=5)


CONTROL_SERVICE = "bedrock-agentcore-control"
"""The control plane's botocore model (it signs as ``bedrock-agentcore`` too)."""
DEFAULT_ENDPOINT = "DEFAULT"
HARNESS_STATUSES = frozenset(
    {"CREATING", "CREATE_FAILED", "UPDATING", "UPDATE_FAILED", "READY", "DELETING", "DELETE_FAILED"}
)
"""botocore 1.44.5's ``HarnessStatus`` enum (``HarnessEndpointStatus`` is the same)."""
INVOKABLE_STATUSES = frozenset({"READY", "UPDATING"})
"""The harness and endpoint statuses the data plane serves (UPDATING serves the live version)."""
GONE = "GONE"
"""The normal end of a deletion in ``ControlPlane.script_harness``: the harness is removed."""

_DEFAULT_MODEL: JSONDict = {"bedrockModelConfig": {"modelId": "global.anthropic.claude-sonnet-4-6"}}
_DEFAULT_LIFECYCLE: JSONDict = {"idleRuntimeSessionTimeout": 900, "maxLifetime": 28800}
_HARNESS_LIFECYCLE_MAX = 28800
_LIFECYCLE_SHAPE_MAX = 1209600
_REQUEST_ONLY = frozenset({"harnessName", "harnessId", "clientToken", "tags"})
_OPTIONAL_VALUE = frozenset({"environmentArtifact", "authorizerConfiguration", "memory"})
"""UpdateHarness members wrapped in ``{"optionalValue": …}`` (absent: clear the member)."""
_ECHOED = (
    "environmentArtifact",
    "environmentVariables",
    "authorizerConfiguration",
    "memory",
    "hooks",
    "maxIterations",
    "maxTokens",
    "timeoutSeconds",
)
_SIGV4_TIME = "%Y%m%dT%H%M%SZ"
_DEFAULT_COMMAND_TIMEOUT = 300
_COMMAND_TIMEOUT_RANGE = (1, 3600)


class _AwsError(Exception):
    def __init__(self, status: int, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields
        self.headers: dict[str, str] = {}


def _forbidden(code: str, message: str) -> _AwsError:
    return _AwsError(403, code, message)


def _not_found(message: str) -> _AwsError:
    return _AwsError(404, "ResourceNotFoundException", message)


class _StreamEnded(Exception):
    """The 200 stream ended early (a fault, a gone client, the emulator closing)."""


_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def _client_gone(connection: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


AWS_EXTRA = 'pip install "rma-agents[aws]"'


def _require_botocore() -> None:
    """Refuse to build an emulator that would fail every request: botocore is its oracle (the
    SigV4 check recomputes signatures with ``SigV4Auth``, validation uses the service models)
    and comes with the ``aws`` extra, not the base install."""
    try:
        import botocore  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "AgentCoreEmulator needs botocore (it checks signatures and validates requests with it): "
            + AWS_EXTRA,
            name=exc.name,
        ) from exc


_service_model_lock = threading.Lock()
_service_models: dict[str, Any] = {}


def _model(service: str = SERVICE) -> Any:
    """botocore's ``bedrock-agentcore`` (or ``bedrock-agentcore-control``) service model, the
    oracle, loaded once."""
    with _service_model_lock:
        if service not in _service_models:
            import botocore.session  # type: ignore[import-untyped]

            _service_models[service] = botocore.session.get_session().get_service_model(service)
        return _service_models[service]


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("eusc-"):
        return "aws-eusc"
    return "aws"


def _suffix(seed: str) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    out = []
    for _ in range(10):
        number, digit = divmod(number, len(alphabet))
        out.append(alphabet[digit])
    return "".join(out)

"""The AgentCore emulator: ``AgentCoreEmulator``, its start-up, test controls and request routing.

The class a test uses: its options (credentials, region and account, the pre-existing
harness, the control plane's timings), the loopback server (``_loopback``), the controls a
test calls (``inject``, ``script_session``, ``sessions``, ``storage_dir`` …), and the
handling of every request: the SigV4 check, the media type, routing to the data plane
(``invoke``, ``commands``) or the control plane (``control``), and the error answers. Not the
operations themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import (
    _DISCONNECTS,
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_SECRET_ACCESS_KEY,
    _AwsError,
    _partition,
    _require_botocore,
    _suffix,
)
from rma_shell.testing.agentcore.commands import _Commands
from rma_shell.testing.agentcore.control import ControlPlane, _control_route
from rma_shell.testing.agentcore.faults import AgentCoreFault, _Armed
from rma_shell.testing.agentcore.frames import SessionView, Turn
from rma_shell.testing.agentcore.invoke import _Invoke
from rma_shell.testing.agentcore.sigv4 import _verify_signature
from rma_shell.testing.agentcore.state import RuntimeStop, _Session
from rma_shell.testing.agentcore.stop import _Stop
from rma_shell.testing.local.emulator import RecordedRequest


class _Handler(LoopbackHandler):
    def do_PATCH(self) -> None:
        self.dispatch()

    def handle_one_request(self) -> None:
        # A client that gave up on a stream (an exception, a bad CRC) resets the connection;
        # that is the test's business, not a server error worth a traceback.
        try:
            super().handle_one_request()
        except _DISCONNECTS:
            self.close_connection = True


class AgentCoreEmulator(_Invoke, _Commands, _Stop):
    """The emulator; use as a context manager (``with AgentCoreEmulator(script=…) as emu``)."""

    handler_class = _Handler
    thread_name = "agentcore-emulator"
    label = "agentcore emulator"

    def __init__(
        self,
        script: Iterable[Turn] = (),
        *,
        access_key_id: str = DEFAULT_ACCESS_KEY_ID,
        secret_access_key: str = DEFAULT_SECRET_ACCESS_KEY,
        session_token: str | None = None,
        region: str = "us-east-1",
        account: str = "123456789012",
        faults: Iterable[AgentCoreFault] = (),
        clock: Callable[[], datetime] | None = None,
        mount_path: str = "/mnt/data",
        harness_name: str = "emulated_harness",
        harness_id: str | None = None,
        runtime_id: str | None = None,
        endpoints: Iterable[str] = ("DEFAULT",),
        lifecycle_clock: Callable[[], float] | None = None,
        ready_after_s: float = 10.0,
        endpoint_appear_after_s: float = 0.0,
        endpoint_ready_after_s: float = 20.0,
        update_after_s: float = 10.0,
        delete_after_s: float = 10.0,
        page_size: int = 5,
    ) -> None:
        """``clock`` (returning an aware UTC datetime) is what ``X-Amz-Date`` is checked
        against (default: the wall clock). ``harness_name`` names the one pre-existing READY
        harness, whose id is ``{harness_name}-{10 alphanumerics}`` unless ``harness_id`` pins it
        (``runtime_id`` likewise pins the runtime behind it); ``endpoints`` are its endpoint
        names (the valid ``qualifier`` values), all READY.

        The control plane's lifecycles run on ``lifecycle_clock`` (seconds; default
        ``time.monotonic``): a created harness is CREATING for ``ready_after_s``; its DEFAULT
        endpoint appears ``endpoint_appear_after_s`` after the harness is READY and is READY
        ``endpoint_ready_after_s`` after the harness is; an update takes ``update_after_s``
        (DEFAULT follows ``endpoint_ready_after_s`` later); a deletion ``delete_after_s``.
        Listings return at most ``page_size`` items a page.

        Needs botocore (the ``aws`` extra, ``pip install "rma-agents[aws]"``): without it this
        raises ``ImportError`` saying so, rather than serving requests it would fail."""
        _require_botocore()
        if not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,39}", harness_name):
            raise ValueError(f"invalid harness name {harness_name!r}")
        self._script = list(script)
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.session_token = session_token
        self._credentials: dict[str, tuple[str, str | None]] = {
            access_key_id: (secret_access_key, session_token)
        }
        self.region = region
        self.account = account
        self.mount_path = mount_path
        self._clock = clock or (lambda: datetime.now(UTC))
        partition = _partition(region)
        self.harness_id = harness_id or f"{harness_name}-{_suffix(harness_name)}"
        if not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,39}-[a-zA-Z0-9]{10}", self.harness_id):
            raise ValueError(f"invalid harness id {self.harness_id!r}")
        self.harness_arn = f"arn:{partition}:bedrock-agentcore:{region}:{account}:harness/{self.harness_id}"
        self.runtime_id = runtime_id or f"harness_{harness_name}-{_suffix('runtime:' + harness_name)}"
        self.runtime_arn = f"arn:{partition}:bedrock-agentcore:{region}:{account}:runtime/{self.runtime_id}"
        self.endpoints = frozenset(endpoints)
        self._lock = threading.RLock()
        self._init_loopback()
        self._faults: list[_Armed] = [_Armed(f, f.times, None) for f in faults]
        self._sessions: dict[str, _Session] = {}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._stops: list[RuntimeStop] = []
        self._root: Path | None = None
        self.requests: list[RecordedRequest] = []
        self.harness_name = harness_name
        self.control = ControlPlane(
            self,
            lifecycle_clock=lifecycle_clock or time.monotonic,
            ready_after_s=ready_after_s,
            endpoint_appear_after_s=endpoint_appear_after_s,
            endpoint_ready_after_s=endpoint_ready_after_s,
            update_after_s=update_after_s,
            delete_after_s=delete_after_s,
            page_size=page_size,
            harness_name=harness_name,
            endpoints=self.endpoints,
        )
        """The control plane: its harnesses, scripts and the calls it received."""

    # -- lifecycle --

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: boto3's ``endpoint_url``."""
        return f"http://127.0.0.1:{self.port}"

    def _before_close(self) -> None:
        with self._lock:
            for pid in list(self._procs):
                # Registered means not yet reaped, so the group id is still ours.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    def close(self) -> None:
        super().close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._lock:
                if not self._procs:
                    break
            time.sleep(0.02)
        with self._lock:
            root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    # -- test controls --

    def credentials_env(self) -> dict[str, str]:
        """Environment variables pointing an AWS SDK (or rma) at this emulator."""
        env = {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": self.base_url,
            "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL": self.base_url,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        if self.session_token is not None:
            env["AWS_SESSION_TOKEN"] = self.session_token
        return env

    def add_credentials(
        self, access_key_id: str, secret_access_key: str, session_token: str | None = None
    ) -> None:
        """Accept another access key (e.g. to test credential rotation)."""
        with self._lock:
            self._credentials[access_key_id] = (secret_access_key, session_token)

    def inject(self, *faults: AgentCoreFault, session_id: str | None = None) -> None:
        """Arm faults for every session (``session_id=None``) or for one runtime session."""
        with self._lock:
            self._faults.extend(_Armed(f, f.times, session_id) for f in faults)

    def script_session(self, session_id: str, script: Iterable[Turn]) -> None:
        """Give one runtime session its own script (its next turn is the first of ``script``)."""
        with self._lock:
            session = self._session(session_id)
            session.script = list(script)
            session.turns_played = 0

    def reset_session(self, session_id: str) -> None:
        """Forget a runtime session (conversation, script position, storage), as when the
        microVM's window ends and the same id starts afresh."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None and session.workdir is not None:
            shutil.rmtree(session.workdir.parent, ignore_errors=True)

    @property
    def sessions(self) -> dict[str, SessionView]:
        """A snapshot of every runtime session seen, by id."""
        with self._lock:
            return {sid: s.view() for sid, s in self._sessions.items()}

    @property
    def stops(self) -> tuple[RuntimeStop, ...]:
        """Every ``StopRuntimeSession`` served, in arrival order."""
        with self._lock:
            return tuple(self._stops)

    def storage_dir(self, session_id: str) -> Path:
        """The session's storage directory (what ``mount_path`` maps to), created if needed,
        so a test can put files there before a command runs or read them after."""
        with self._lock:
            return self._dirs(self._session(session_id))[1]

    def workdir(self, session_id: str) -> Path:
        """The session's command working directory, created if needed."""
        with self._lock:
            return self._dirs(self._session(session_id))[0]

    def _check_signature(self, h: LoopbackHandler, body: bytes) -> None:
        def credentials(access_key: str) -> tuple[str, str | None] | None:
            with self._lock:
                return self._credentials.get(access_key)

        _verify_signature(h, body, credentials=credentials, region=self.region, clock=self._clock)

    # -- request handling (server threads) --

    def _handle(self, h: LoopbackHandler) -> None:
        raw = h.read_body()
        headers = {k.lower(): v for k, v in h.headers.items()}
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        h.request_id = request_id = str(uuid.uuid4())
        with self._lock:
            self.requests.append(RecordedRequest(h.command, h.path, headers, body, raw, request_id))
        try:
            self._check_signature(h, raw)
            self._route(h, raw, request_id)
        except _AwsError as error:
            self._send_error(h, error, request_id)
        except _DISCONNECTS:
            h.close_connection = True
        # Anything else (a scripted callable that raised, a bug) is answered by the loopback
        # handler: a 500 in ``_crash_reply``'s shape, or a cut connection mid-stream.

    def _crash_reply(self, h: LoopbackHandler, message: str) -> tuple[dict[str, str], bytes]:
        return _error_answer(_AwsError(500, "InternalServerException", message), h.request_id)

    def _send_error(self, h: LoopbackHandler, error: _AwsError, request_id: str) -> None:
        headers, payload = _error_answer(error, request_id)
        try:
            h.send_response(error.status)
            for name, value in headers.items():
                h.send_header(name, value)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
        except _DISCONNECTS:
            h.close_connection = True

    def _route(self, h: LoopbackHandler, raw: bytes, request_id: str) -> None:
        url = urlsplit(h.path)
        path = url.path
        query = parse_qsl(url.query, keep_blank_values=True)
        media_type = (h.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if raw and media_type != "application/json":
            raise _AwsError(
                415, "UnsupportedMediaTypeException", f"Unsupported Content-Type {media_type or '(none)'!r}"
            )
        if h.command == "POST" and path == "/harnesses/invoke":
            self._invoke_harness(h, query, raw, request_id)
            return
        match = re.fullmatch(r"/runtimes/([^/]+)/commands", path)
        if h.command == "POST" and match:
            self._invoke_command(h, match.group(1), query, raw, request_id)
            return
        match = re.fullmatch(r"/runtimes/([^/]+)/stopruntimesession", path)
        if h.command == "POST" and match:
            self._stop_runtime_session(h, match.group(1), query, raw, request_id)
            return
        control = _control_route(h.command, path)
        if control is not None:
            self.control._serve(h, control[0], control[1], query, raw, request_id)
            return
        raise _AwsError(404, "UnknownOperationException", f"Unknown operation: {h.command} {path}")


def _error_answer(error: _AwsError, request_id: str | None) -> tuple[dict[str, str], bytes]:
    """The headers and body of AWS's answer for ``error``: the code in ``x-amzn-ErrorType``,
    the message (and any extra fields) in the JSON body."""
    headers = {"Content-Type": "application/json", "x-amzn-ErrorType": error.code, **error.headers}
    if request_id is not None:
        headers["x-amzn-RequestId"] = request_id
    return headers, json.dumps({"message": error.message, **error.fields}).encode()

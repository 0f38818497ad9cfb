"""The AgentCore emulator's runtime sessions, and the base its data-plane handlers share.

``_Session`` (a runtime session's conversation, pending tool uses, script position, commands
and directories) and ``_Core``: the emulator's lock, sessions, faults and the lookups the
invoke and command handlers build on. Not the handlers (``invoke``, ``commands``) nor the
control plane's state (``control``, ``harnesses``).
"""

from __future__ import annotations

import copy
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from rma_shell.testing._loopback import LoopbackEmulator
from rma_shell.testing.agentcore._common import JSONDict
from rma_shell.testing.agentcore.faults import AgentCoreFault, FaultKind, Operation, _Armed
from rma_shell.testing.agentcore.frames import SessionView, Turn
from rma_shell.testing.local.emulator import RecordedRequest

if TYPE_CHECKING:
    from rma_shell.testing.agentcore.control import ControlPlane


@attrs.define
class _Session:
    id: str
    number: int
    script: list[Turn] | None = None
    conversation: list[JSONDict] = attrs.Factory(list)
    received: list[JSONDict] = attrs.Factory(list)
    pending: list[JSONDict] = attrs.Factory(list)
    turns_played: int = 0
    invocations: int = 0
    commands: list[str] = attrs.Factory(list)
    busy: str | None = None
    user_id: str | None = None
    workdir: Path | None = None
    storage: Path | None = None
    stops: int = 0
    cut: threading.Event | None = None
    """Set by ``StopRuntimeSession`` to end the invoke in flight (None while none is)."""

    def view(self, messages: Sequence[JSONDict] | None = None) -> SessionView:
        return SessionView(
            id=self.id,
            messages=tuple(copy.deepcopy(list(messages if messages is not None else self.conversation))),
            received=tuple(copy.deepcopy(self.received)),
            pending_tool_uses=tuple(copy.deepcopy(self.pending)),
            turns_played=self.turns_played,
            invocations=self.invocations,
            commands=tuple(self.commands),
            workdir=str(self.workdir) if self.workdir else None,
            storage_dir=str(self.storage) if self.storage else None,
            user_id=self.user_id,
            stops=self.stops,
        )


@attrs.frozen
class RuntimeStop:
    """One ``StopRuntimeSession`` the emulator served (``AgentCoreEmulator.stops``)."""

    runtime_session_id: str
    target: str
    """The ``agentRuntimeArn`` path label as sent (a harness or runtime ARN, or an id)."""
    qualifier: str | None
    client_token: str | None
    interrupted: bool
    """An ``InvokeHarness`` of the session was in flight: its stream was ended."""


class _Core(LoopbackEmulator):
    """What the emulator's handlers rely on; ``AgentCoreEmulator.__init__`` fills it in."""

    region: str
    account: str
    mount_path: str
    control: ControlPlane
    requests: list[RecordedRequest]
    _script: list[Turn]
    _lock: threading.RLock
    _faults: list[_Armed]
    _sessions: dict[str, _Session]
    _procs: dict[int, subprocess.Popen[bytes]]
    _stops: list[RuntimeStop]
    _root: Path | None

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = _Session(session_id, len(self._sessions) + 1)
            self._sessions[session_id] = session
        return session

    def _dirs(self, session: _Session) -> tuple[Path, Path]:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="rma-agentcore-emu-"))
        if session.workdir is None or session.storage is None:
            # Session ids may hold any character (commands): directories are numbered instead.
            base = self._root / f"session-{session.number:04d}-{uuid.uuid4().hex[:6]}"
            session.workdir = base / "work"
            session.storage = base / "storage"
            session.workdir.mkdir(parents=True, exist_ok=True)
            session.storage.mkdir(parents=True, exist_ok=True)
        return session.workdir, session.storage

    def _take(
        self, kinds: Iterable[FaultKind], session_id: str | None, operation: Operation
    ) -> list[AgentCoreFault]:
        wanted = set(kinds)
        taken: list[AgentCoreFault] = []
        seen: set[FaultKind] = set()
        for armed in self._faults:
            fault = armed.fault
            if fault.kind not in wanted or fault.kind in seen or armed.remaining <= 0:
                continue
            if armed.session_id is not None and armed.session_id != session_id:
                continue
            if fault.operation is not None and fault.operation != operation:
                continue
            armed.remaining -= 1
            seen.add(fault.kind)
            taken.append(fault)
        return taken

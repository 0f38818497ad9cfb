"""The self-hosted work queue's wire: ``/v1/environments/{id}/work/poll``, ``…/{work_id}/ack``,
``…/heartbeat`` and ``…/stop``, as the SDK's ``client.beta.environments.work`` sends them.

What this is: four calls over a ``CMAClient`` (its retries, credentials and redaction) and
the values they return: the claimed item (a JSON object, or None for an empty poll) and a
``Heartbeat``. A heartbeat the server refuses because the lease moved on (412
``heartbeat_precondition_failed``) reads as ``lease_lost``. What this is not: the worker's
decisions (when to beat, what a refusal means for the session) — ``rma_shell.environments``.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs
from returns.result import Failure, Result, Success

from rma.errors import HttpError, MalformedResponse, SessionError
from rma.vocabulary import JSON
from rma_shell.providers.claude.client import CMAClient

NO_HEARTBEAT: Final = "NO_HEARTBEAT"
POLL_BLOCK_MS: Final = 999
"""The API caps a long poll at 999 ms."""

WorkState = Literal["queued", "starting", "active", "stopping", "stopped"]


@attrs.frozen
class Heartbeat:
    """A heartbeat's answer (``BetaSelfHostedWorkHeartbeatResponse``)."""

    last_heartbeat: str
    lease_extended: bool
    state: str
    ttl_seconds: int


def lease_lost(error: SessionError) -> bool:
    """Whether a heartbeat's refusal says the lease moved on (412 ``heartbeat_precondition_failed``:
    the item went back to the queue or to another worker), so this worker must not stop it."""
    return isinstance(error, HttpError) and error.status == 412


def server_lease(error: SessionError) -> JSON:
    """The lease as the server holds it, from a 412's ``error.details.current_state``."""
    node: Any = error.body if isinstance(error, HttpError) else None
    for key in ("error", "details", "current_state"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


class WorkQueue:
    """The work-queue calls of one environment."""

    def __init__(self, client: CMAClient, environment_id: str) -> None:
        self.client = client
        self.environment_id = environment_id
        self._base = f"/v1/environments/{environment_id}/work"

    async def poll(
        self, *, block_ms: int | None = POLL_BLOCK_MS, reclaim_older_than_ms: int | None = None
    ) -> Result[dict[str, Any] | None, SessionError]:
        """The next item (already claimed for this worker until acknowledged), or None."""
        got = await self.client.request(
            "GET",
            f"{self._base}/poll",
            params={"block_ms": block_ms, "reclaim_older_than_ms": reclaim_older_than_ms},
        )
        if isinstance(got, Failure):
            return got
        item = got.unwrap()
        if item is None:
            return Success(None)
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            return Failure(MalformedResponse(detail="work poll answered something that is not a work item"))
        return Success(item)

    async def ack(self, work_id: str) -> Result[JSON, SessionError]:
        got: Result[JSON, SessionError] = await self.client.request("POST", f"{self._base}/{work_id}/ack")
        return got

    async def heartbeat(self, work_id: str, expected_last_heartbeat: str) -> Result[Heartbeat, SessionError]:
        got = await self.client.request(
            "POST",
            f"{self._base}/{work_id}/heartbeat",
            params={"expected_last_heartbeat": expected_last_heartbeat},
            idempotent=True,
        )
        if isinstance(got, Failure):
            return Failure(got.failure())  # a 412 reads as ``lease_lost``
        body = got.unwrap()
        try:
            return Success(
                Heartbeat(
                    last_heartbeat=str(body["last_heartbeat"]),
                    lease_extended=bool(body["lease_extended"]),
                    state=str(body["state"]),
                    ttl_seconds=int(body["ttl_seconds"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            return Failure(
                MalformedResponse(
                    detail="heartbeat answer lacks last_heartbeat/lease_extended/state/ttl_seconds"
                )
            )

    async def stop(self, work_id: str, *, force: bool = True) -> Result[JSON, SessionError]:
        got: Result[JSON, SessionError] = await self.client.request(
            "POST", f"{self._base}/{work_id}/stop", json_body={"force": force}, idempotent=True
        )
        return got

"""rma_shell.transport.lean_http: the h11 lanes behave as httpx does where the providers can tell.

A raw loopback server (a thread per connection, scripted byte for byte) plays what real
servers and broken ones do: keep-alive, chunked and compressed bodies, closing idle
connections, answering nothing, truncating, stalling, garbage, TLS.
"""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
import trustme

from rma_shell.testing._loopback import reset_after_delivery
from rma_shell.transport import lean_http
from rma_shell.transport.http import user_agent
from rma_shell.transport.lean_http import Connection, Headers, LeanPool, PoolTimeout, Timeouts

Reply = Callable[["Peer", int], None]
"""Writes the answer to the connection's n-th request (0-based), or closes, or stalls."""

TIMEOUTS = Timeouts.of(5.0)


class Peer:
    """One accepted connection, as the scripted reply sees it."""

    def __init__(self, sock: socket.socket, number: int) -> None:
        self.sock = sock
        self.number = number
        self.closed = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


class RawServer:
    """Reads HTTP/1.1 requests (Content-Length bodies) and lets ``reply`` answer each."""

    def __init__(self, reply: Reply, *, tls: ssl.SSLContext | None = None) -> None:
        self.reply = reply
        self.tls = tls
        self.requests: list[tuple[int, bytes, dict[str, str], bytes]] = []
        """(connection number, request line, headers lower-cased, body) in arrival order."""
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/v1/chat?x=1"

    def _accept(self) -> None:
        while not self._stop:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(sock, self.connections), daemon=True).start()

    def _serve(self, sock: socket.socket, number: int) -> None:
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_side=True)
            except (ssl.SSLError, OSError):
                sock.close()
                return
        peer = Peer(sock, number)
        buffered = b""
        index = 0
        try:
            while not peer.closed:
                while b"\r\n\r\n" not in buffered:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buffered += data
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                line, *lines = head.split(b"\r\n")
                headers = {}
                for raw in lines:
                    name, _, value = raw.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                while len(buffered) < length:
                    buffered += sock.recv(65536)
                body, buffered = buffered[:length], buffered[length:]
                self.requests.append((number, line, headers, body))
                self.reply(peer, index)
                index += 1
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        self._stop = True
        self._listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(reply: Reply, **kw: Any) -> RawServer:
        servers.append(server := RawServer(reply, **kw))
        return server

    yield start
    for server in servers:
        server.close()


def answer(body: bytes = b'{"ok":true}', *, status: int = 200, headers: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"{headers}\r\n"
    ).encode() + body


def ok(peer: Peer, index: int) -> None:
    peer.send(answer(f'{{"n":{index}}}'.encode()))


async def exchange(
    pool: LeanPool, url: str, body: bytes = b"{}", **headers: str
) -> tuple[int, Headers, bytes]:
    response = await pool.request("POST", httpx.URL(url), headers, body, TIMEOUTS)
    try:
        return response.status_code, response.headers, await response.aread()
    finally:
        await response.aclose()


# -- requests on one keep-alive connection -------------------------------------------------


async def test_requests_reuse_one_keep_alive_connection_and_send_httpx_default_headers(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(ok)
    pool = LeanPool(4)
    try:
        bodies = [
            (await exchange(pool, server.url, b'{"q":1}', Authorization="Bearer k"))[2] for _ in range(3)
        ]
        assert len(pool.lanes) == 1 and pool.lanes[0].requests == 3
    finally:
        await pool.aclose()
    assert bodies == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
    assert server.connections == 1
    _number, line, headers, body = server.requests[0]
    assert line == b"POST /v1/chat?x=1 HTTP/1.1" and body == b'{"q":1}'
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["accept-encoding"] == "gzip, deflate" and headers["connection"] == "keep-alive"
    assert headers["user-agent"] == user_agent()  # rma's own, as its httpx clients send
    assert headers["authorization"] == "Bearer k" and headers["content-length"] == "7"


async def test_chunked_bodies_and_repeated_headers(serve: Callable[..., RawServer]) -> None:
    def chunked(peer: Peer, index: int) -> None:
        peer.send(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Amzn-RequestId: r1\r\n"
            b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n"
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        )

    server = serve(chunked)
    pool = LeanPool(1)
    try:
        status, headers, body = await exchange(pool, server.url)
        again = await exchange(pool, server.url)
    finally:
        await pool.aclose()
    assert (status, body, again[2]) == (200, b"hello world", b"hello world")
    assert headers["x-amzn-requestid"] == headers.get("X-Amzn-RequestId") == "r1"
    assert "X-AMZN-REQUESTID" in headers and dict(headers)["set-cookie"] == "a=1, b=2"
    assert server.connections == 1


async def test_the_chunks_of_one_read_come_in_one_piece_and_a_bad_chunk_after_them(
    serve: Callable[..., RawServer],
) -> None:
    """``Response.receive`` returns every body piece h11 has parsed (a stream's frames arrive
    a chunk each, often several per read); what ends the run — the body's end, a protocol
    error — comes with the next call, the error after the good pieces before it."""
    release = threading.Event()

    def chunked(peer: Peer, index: int) -> None:
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        if index == 0:
            peer.send(head + b"3\r\none\r\n3\r\ntwo\r\n")
            release.wait(5)
            peer.send(b"5\r\nthree\r\n0\r\n\r\n")
        else:
            peer.send(head + b"4\r\ngood\r\nzz\r\nbad\r\n")

    server = serve(chunked)
    pool = LeanPool(1)
    try:
        response = await pool.request("POST", httpx.URL(server.url), {}, b"{}", TIMEOUTS)
        try:
            with anyio.fail_after(5):
                first = await response.receive()  # the head and two chunks: one send, one read
            release.set()
            rest = [await response.receive(), await response.receive()]
        finally:
            await response.aclose()
        assert first == b"onetwo" and rest == [b"three", b""]
        response = await pool.request("POST", httpx.URL(server.url), {}, b"{}", TIMEOUTS)
        try:
            with anyio.fail_after(5):
                good = await response.receive()
            with pytest.raises(httpx.RemoteProtocolError, match="chunk"):
                await response.receive()
        finally:
            await response.aclose()
        assert good == b"good"
    finally:
        await pool.aclose()


async def test_a_1xx_answer_is_skipped_for_the_real_one(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda peer, i: peer.send(b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"done")))
    pool = LeanPool(1)
    try:
        assert (await exchange(pool, server.url))[::2] == (200, b"done")
    finally:
        await pool.aclose()


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send
    ],
)
async def test_compressed_bodies_are_decoded_whole_and_streamed(
    serve: Callable[..., RawServer], encoding: str, encode: Callable[[bytes], bytes]
) -> None:
    payload = b'{"text":"' + b"abc" * 5000 + b'"}'
    server = serve(
        lambda peer, i: peer.send(answer(encode(payload), headers=f"Content-Encoding: {encoding}\r\n"))
    )
    pool = LeanPool(1)
    try:
        assert (await exchange(pool, server.url))[2] == payload
        response = await pool.request("POST", httpx.URL(server.url), {}, b"", TIMEOUTS)
        streamed = [piece async for piece in response.aiter_bytes()]
        await response.aclose()
    finally:
        await pool.aclose()
    assert b"".join(streamed) == payload


async def test_an_undecodable_gzip_body_is_a_decoding_error(serve: Callable[..., RawServer]) -> None:
    server = serve(
        lambda peer, i: peer.send(answer(b"not gzip at all", headers="Content-Encoding: gzip\r\n"))
    )
    pool = LeanPool(1)
    try:
        with pytest.raises(httpx.DecodingError):
            await exchange(pool, server.url)
    finally:
        await pool.aclose()


# -- connections that end ------------------------------------------------------------------


async def test_a_connection_the_server_closed_while_idle_is_reopened_not_failed(
    serve: Callable[..., RawServer],
) -> None:
    closed = threading.Event()

    def then_close(peer: Peer, index: int) -> None:
        ok(peer, index)
        peer.close()  # no "Connection: close": the client learns it only from the socket
        closed.set()

    server = serve(then_close)
    pool = LeanPool(1)
    try:
        first = await exchange(pool, server.url)
        # The server has closed its end (on loopback the FIN is queued to us by then), however
        # long its thread took to get there.
        assert await anyio.to_thread.run_sync(closed.wait, 30)
        second = await exchange(pool, server.url)
    finally:
        await pool.aclose()
    assert (first[2], second[2]) == (b'{"n":0}', b'{"n":0}')
    assert server.connections == 2


async def test_connection_close_is_honoured(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda peer, i: (peer.send(answer(headers="Connection: close\r\n")), peer.close()))
    pool = LeanPool(1)
    try:
        for _ in range(2):
            assert (await exchange(pool, server.url))[0] == 200
        assert not pool.lanes[0].is_open
    finally:
        await pool.aclose()
    assert server.connections == 2


async def test_no_answer_at_all_is_a_remote_protocol_error(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda peer, i: peer.close())
    pool = LeanPool(1)
    try:
        with pytest.raises(httpx.RemoteProtocolError, match="Server disconnected without sending a response"):
            await exchange(pool, server.url)
        assert not pool.lanes[0].is_open
    finally:
        await pool.aclose()


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
async def test_a_head_cut_short_is_told_from_no_answer_at_all(
    serve: Callable[..., RawServer], reset: bool
) -> None:
    # httpx raises the same error whether part of a head arrived or none: the lane tells them
    # apart (issue #23), since a server that began answering had read the request.
    def cut(peer: Peer, index: int) -> None:
        if index == 0:
            ok(peer, index)
            return
        peer.send(b"HTTP/1.1 200 ")
        peer.closed = True
        if reset:
            reset_after_delivery(peer.sock)
        else:
            peer.sock.close()

    server = serve(cut)
    pool = LeanPool(1)
    try:
        await exchange(pool, server.url)
        lane = pool.lanes[0]
        expected = httpx.ReadError if reset else httpx.RemoteProtocolError
        with pytest.raises(expected) as caught:
            await exchange(pool, server.url)
        assert lane.response_began and not lane.is_open
        if not reset:
            assert str(caught.value) == "Server disconnected in the middle of the response head."
    finally:
        await pool.aclose()


async def test_no_answer_at_all_leaves_the_response_unbegun(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda peer, i: ok(peer, i) if i == 0 else peer.close())
    pool = LeanPool(1)
    try:
        await exchange(pool, server.url)
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await exchange(pool, server.url)
        assert not pool.lanes[0].response_began
    finally:
        await pool.aclose()


async def test_a_truncated_body_fails_the_read_and_the_next_request_reconnects(
    serve: Callable[..., RawServer],
) -> None:
    def truncated(peer: Peer, index: int) -> None:
        if index == 0 and peer.number == 1:
            peer.send(answer(b'{"cut":"here"}')[:-5])
            peer.close()
        else:
            ok(peer, index)

    server = serve(truncated)
    pool = LeanPool(1)
    try:
        with pytest.raises(httpx.RemoteProtocolError):
            await exchange(pool, server.url)
        assert (await exchange(pool, server.url))[2] == b'{"n":0}'
    finally:
        await pool.aclose()
    assert server.connections == 2


async def test_a_garbage_status_line_is_a_remote_protocol_error(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda peer, i: peer.send(b"NOT HTTP AT ALL\r\n\r\n"))
    pool = LeanPool(1)
    try:
        with pytest.raises(httpx.RemoteProtocolError):
            await exchange(pool, server.url)
    finally:
        await pool.aclose()


async def test_a_stalled_answer_is_a_read_timeout(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda peer, i: time.sleep(30))  # a daemon thread: nobody waits for it
    pool = LeanPool(1)
    try:
        with pytest.raises(httpx.ReadTimeout):
            await pool.request("POST", httpx.URL(server.url), {}, b"", Timeouts(5.0, 0.2, 5.0))
        assert not pool.lanes[0].is_open
    finally:
        await pool.aclose()


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = LeanPool(1)
    with pytest.raises(httpx.ConnectError):
        await exchange(pool, f"http://127.0.0.1:{port}/x")
    assert pool._free == pool.lanes  # the lane went back
    await pool.aclose()


async def test_an_unread_body_closes_its_connection(serve: Callable[..., RawServer]) -> None:
    server = serve(ok)
    pool = LeanPool(1)
    try:
        response = await pool.request("POST", httpx.URL(server.url), {}, b"", TIMEOUTS)
        await response.aclose()  # the body never read: the connection cannot carry another
        assert (await exchange(pool, server.url))[2] == b'{"n":0}'
    finally:
        await pool.aclose()
    assert server.connections == 2


async def test_cancelling_mid_answer_closes_the_connection_and_frees_the_lane(
    serve: Callable[..., RawServer],
) -> None:
    def slow(peer: Peer, index: int) -> None:
        if peer.number == 1:
            peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            time.sleep(30)  # far past the 0.2 s the client waits, however slowly it runs
        else:
            ok(peer, index)

    server = serve(slow)
    pool = LeanPool(1)
    try:
        with anyio.move_on_after(0.2) as scope:
            await exchange(pool, server.url)
        assert scope.cancelled_caught and not pool.lanes[0].is_open
        with anyio.fail_after(5):
            assert (await exchange(pool, server.url))[2] == b'{"n":0}'  # the one lane came back
    finally:
        await pool.aclose()


async def test_an_idle_connection_past_the_keep_alive_expiry_is_reopened(
    serve: Callable[..., RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(ok)
    monkeypatch.setattr(lean_http, "KEEPALIVE_EXPIRY_S", 0.0)
    pool = LeanPool(1)
    try:
        await exchange(pool, server.url)
        await anyio.sleep(0.01)
        await exchange(pool, server.url)
    finally:
        await pool.aclose()
    assert server.connections == 2


# -- the pool --------------------------------------------------------------------------------


async def test_lanes_are_bounded_handed_out_in_arrival_order_and_time_out() -> None:
    pool = LeanPool(2)
    first, second = await pool.acquire(1.0), await pool.acquire(1.0)
    assert len(pool.lanes) == 2
    order: list[int] = []
    held: list[Connection] = []

    async def wait(n: int) -> None:
        held.append(await pool.acquire(5.0))
        order.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(wait, n)
            await anyio.wait_all_tasks_blocked()  # queued: the waiters queue in a known order
        pool.release(first)
        for _ in range(3):  # one lane passed along: each release serves the longest waiter
            await anyio.wait_all_tasks_blocked()  # the served waiter has taken its lane
            pool.release(held.pop())
    assert order == [0, 1, 2, 3] and len(pool.lanes) == 2
    pool.release(held.pop())
    lane = await pool.acquire(1.0)
    assert lane is first  # the most recently used lane first
    with pytest.raises(PoolTimeout, match=r"no free connection within 0.05 s \(max_connections=2\)"):
        await pool.acquire(0.05)
    assert isinstance(PoolTimeout("x"), httpx.PoolTimeout)
    pool.release(second)
    pool.release(lane)


async def test_a_waiter_that_gives_up_leaves_the_queue() -> None:
    pool = LeanPool(1)
    lane = await pool.acquire(1.0)
    got: list[Connection] = []

    async def patient() -> None:
        got.append(await pool.acquire(5.0))

    async with anyio.create_task_group() as tg:
        with anyio.move_on_after(0.05):
            await pool.acquire(5.0)  # gives up while queued
        tg.start_soon(patient)
        await anyio.wait_all_tasks_blocked()  # patient is queued
        assert len(pool._waiters) == 1
        pool.release(lane)  # goes to the one still waiting, not to the one that left
    assert got == [lane] and not pool._waiters


# -- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def test_tls_with_a_trusted_certificate(serve: Callable[..., RawServer], ca: trustme.CA) -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    server = serve(ok, tls=server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    pool = LeanPool(1, ssl_context=client_context)
    try:
        assert [(await exchange(pool, server.url))[2] for _ in range(2)] == [b'{"n":0}', b'{"n":1}']
    finally:
        await pool.aclose()
    assert server.connections == 1 and server.requests[0][2]["host"] == f"127.0.0.1:{server.port}"


async def test_tls_with_an_untrusted_certificate_is_a_connect_error(
    serve: Callable[..., RawServer], ca: trustme.CA
) -> None:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    server = serve(ok, tls=server_context)
    pool = LeanPool(1, ssl_context=ssl.create_default_context())
    try:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await exchange(pool, server.url)
    finally:
        await pool.aclose()


async def test_a_big_body_arrives_whole(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda peer, i: peer.send(answer(str(len(server.requests[-1][3])).encode())))
    big = b"x" * 3_000_000
    pool = LeanPool(1)
    try:
        assert (await exchange(pool, server.url, big))[2] == b"3000000"
        assert (await exchange(pool, server.url, b"small"))[2] == b"5"
    finally:
        await pool.aclose()
    assert server.requests[0][3] == big and server.connections == 1


async def test_the_read_timeout_bounds_each_read_not_the_whole_head(serve: Callable[..., RawServer]) -> None:
    head = (b"HTTP/1.1 200 OK\r\n", b"Content-Length: 2\r\n", b"X-A: 1\r\n", b"X-B: 2\r\n", b"\r\n")

    def trickle(peer: Peer, index: int) -> None:
        for piece in (*head, b"ok"):
            time.sleep(0.25)
            peer.send(piece)

    server = serve(trickle)
    pool = LeanPool(1)
    # The head takes 1.25 s in all, never 0.25 s of silence, against a 1 s read timeout: as
    # httpx times it, this is no timeout. Each gap leaves 0.75 s for a busy machine's stalls.
    try:
        response = await pool.request("POST", httpx.URL(server.url), {}, b"", Timeouts(5.0, 1.0, 5.0))
        assert await response.aread() == b"ok"
        await response.aclose()
    finally:
        await pool.aclose()


async def test_a_write_the_server_never_reads_is_a_write_timeout() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/x"
    pool = LeanPool(1)
    try:
        with pytest.raises(httpx.WriteTimeout):  # 64 MiB into buffers nobody drains
            await pool.request("POST", httpx.URL(url), {}, b"x" * (64 << 20), Timeouts(5.0, 5.0, 0.3))
        assert not pool.lanes[0].is_open
    finally:
        await pool.aclose()
        for sock in accepted:
            sock.close()
        listener.close()

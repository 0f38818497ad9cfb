"""Shared HTTP plumbing for the providers: one TLS context and one ``User-Agent`` per process.

Building an ``httpx.AsyncClient`` builds a TLS context and loads the CA bundle, about 60 ms
on this project's CI machine — more than a whole local model turn. Sessions each own a client
(its lifetime is the session's), so they share the one context instead: an ``SSLContext`` is
safe to share between clients, threads and event loops.

Every connection rma opens itself — its lean lanes (``rma_shell.transport.lean_http``) and the httpx
clients it builds — says who it is with ``user_agent()``. A caller's own ``http_client`` is
not one of them: it is used as it is, its headers included.
"""

from __future__ import annotations

import functools
import ssl
import urllib.request
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx
import sniffio


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's own default verification context (certifi, ``SSL_CERT_FILE``), built once."""
    return httpx.create_ssl_context()


DISTRIBUTION = "rma-agents"
"""The name rma is installed under (``pip install rma-agents``): the product in its User-Agent."""


@functools.cache
def user_agent() -> str:
    """``rma-agents/<version>``: the ``User-Agent`` of every request rma sends on connections
    of its own. RFC 9110's ``product/version``, the product being the distribution's name (the
    official SDKs send ``Anthropic/Python 2.10.0``, ``OpenAI/Python …``; a host's logs then say
    which library called). The version is read from the installed package's metadata, once per
    process (``importlib.metadata`` costs milliseconds): at the first client built, not at
    import. Running from a source tree that is not installed, it is the bare product name."""
    try:
        return f"{DISTRIBUTION}/{version(DISTRIBUTION)}"
    except PackageNotFoundError:
        return DISTRIBUTION


def async_client(**options: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` that reuses the process's TLS context unless ``verify`` is given
    and sends rma's ``User-Agent`` unless ``headers`` name one."""
    options.setdefault("verify", shared_ssl_context())
    headers = httpx.Headers({"User-Agent": user_agent()})
    headers.update(options.get("headers") or {})
    options["headers"] = headers
    return httpx.AsyncClient(**options)


def host_of(url: str | httpx.URL) -> str | None:
    """``host[:port]`` of ``url`` (the port only when it is not the scheme's default), for
    errors that name who answered; None when it does not parse."""
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    if not parsed.host:
        return None
    return f"{parsed.host}:{parsed.port}" if parsed.port is not None else parsed.host


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs name the same scheme, host and port (the scope a credential is for);
    False when either does not parse."""
    try:
        x, y = httpx.URL(a), httpx.URL(b)
    except (httpx.InvalidURL, TypeError, ValueError):
        return False
    return (x.scheme, x.host, x.port) == (y.scheme, y.host, y.port)


def env_proxies() -> bool:
    """Whether the environment configures an HTTP proxy (``HTTP_PROXY``, ``HTTPS_PROXY``,
    ``ALL_PROXY``; the system settings on macOS and Windows), as httpx reads it: only httpx
    clients honour one, so paths that can go around httpx do not while one is set."""
    found = urllib.request.getproxies()
    return any(found.get(scheme) for scheme in ("http", "https", "all"))


def running_loop() -> object | None:
    """The event loop this code runs in — asyncio's loop, or the trio run (its root task) — or
    None outside one. A provider's connections belong to the loop that opened them, so a
    provider reused under another loop (a second ``asyncio.run``, trio after asyncio, a new
    notebook cell's loop) builds new ones instead of failing with "Event loop is closed"."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return None
    if library == "trio":
        import trio

        return trio.lowlevel.current_root_task()
    import asyncio

    return asyncio.get_running_loop()


def of_another_loop(bound: object | None, loop: object | None) -> bool:
    """Whether connections opened under ``bound`` cannot serve ``loop`` (unknown is fine)."""
    return bound is not None and loop is not None and bound is not loop

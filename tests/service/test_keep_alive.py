"""serve keeps an idle HTTP connection open longer than clients keep one to reuse
(httpx's pool: 5 s). uvicorn's default closed it after 5 s, so a client sending on its
pooled connection just then lost that request to a read error (the fleet bench: 8 in
14,600 requests)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn

from dreamkeeper.core.settings import ServiceSettings
from dreamkeeper.service.runtime import uvicorn_config

CLIENT_EXPIRY = 5.0  # httpx.Limits' keepalive_expiry default


async def _ok(scope, receive, send):  # noqa: ANN001 - a bare ASGI app
    if scope["type"] != "http":
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask(conn: socket.socket) -> bytes:
    """One request and its whole response (head, then the 2-byte body), read off the
    connection so the next request starts clean; b"" if the server closed it."""
    conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while not (b"\r\n\r\n" in data and data.endswith(b"ok")):
        chunk = conn.recv(4096)
        if not chunk:
            return data
        data += chunk
    return data


def test_a_connection_idle_as_long_as_a_client_pool_keeps_one_still_answers():
    port = _free_port()
    config = uvicorn_config(_ok, ServiceSettings(port=port))
    config.lifespan = "off"
    server = uvicorn.Server(config)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(),), daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            assert _ask(conn).startswith(b"HTTP/1.1 200")
            # Idle for just over what a client pool keeps a connection to reuse, then
            # send on it as that client would.
            time.sleep(CLIENT_EXPIRY + 0.5)
            assert _ask(conn).startswith(b"HTTP/1.1 200"), "serve closed a reusable connection"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

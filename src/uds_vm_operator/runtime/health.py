"""``/healthz`` and ``/readyz`` on a tiny asyncio HTTP server (no web framework needed for two paths).

Liveness answers from the event loop itself: if the loop is stuck, the probe times out and the kubelet
restarts the pod. Readiness turns green once kopf has started its watches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

_RESPONSES = {
    200: b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
    503: (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n"
        b"Connection: close\r\n\r\nnot ready\n"
    ),
    404: b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
}


def probe_status(path: str, ready: Callable[[], bool]) -> int:
    """HTTP status for a probe path: liveness is always 200 while the loop answers."""
    if path == "/healthz":
        return 200
    if path == "/readyz":
        return 200 if ready() else 503
    return 404


async def read_request_path(reader: asyncio.StreamReader, timeout_s: float = 5.0) -> str:
    """The path of an HTTP request line (query dropped); "" if the line is not a request."""
    request_line = await asyncio.wait_for(reader.readline(), timeout=timeout_s)
    parts = request_line.decode("latin-1").split()
    return parts[1].split("?")[0] if len(parts) >= 2 else ""


async def start_health_server(host: str, port: int, ready: Callable[[], bool]) -> asyncio.Server:
    """Serve the probes on ``host:port`` until the returned server is closed."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            path = await read_request_path(reader)
            writer.write(_RESPONSES[probe_status(path, ready)])
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)

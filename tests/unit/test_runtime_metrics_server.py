"""The operator's /metrics endpoint: the streamed exposition over a real loopback socket."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest

from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.runtime.metrics_server import CONTENT_TYPE, start_metrics_server


async def fetch(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


def test_a_scrape_returns_every_series_and_unknown_paths_are_404() -> None:
    metrics = OperatorMetrics()
    for index in range(2000):
        metrics.record_vm(
            name=f"vm{index}", namespace="ns", phase="Ready", controls={"SI-7": True}, overhead_ratio=0.06
        )

    async def scenario() -> tuple[bytes, bytes]:
        server = await start_metrics_server("127.0.0.1", 0, metrics)
        port = server.sockets[0].getsockname()[1]
        try:
            return await fetch(port, "/metrics?x=1"), await fetch(port, "/nope")
        finally:
            server.close()
            await server.wait_closed()

    scraped, missing = asyncio.run(scenario())
    head, _, body = scraped.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and f"Content-Type: {CONTENT_TYPE}".encode() in head
    text = body.decode()
    assert text.count("uds_vm_phase{") == 2000 and 'vm="vm1999"} 0.06' in text
    expected = {
        line for line in generate_latest(metrics.registry).decode().splitlines() if "process_" not in line
    }
    assert expected <= set(text.splitlines())  # process_* values move between the two renderings
    assert missing.startswith(b"HTTP/1.1 404")

"""Resolve an import source's host name the way CDI's importer pod will: through the cluster's DNS.

A name such as ``images.site.internal`` may point at a private or metadata address; the SSRF lock
(:mod:`ssrf`) must judge the address, not the spelling. The operator runs in a pod of the same cluster, so
its resolver is the importer's. Answers are cached briefly (a fleet of VMs shares one mirror) and a name that
does not resolve in time is judged by its spelling only: the import of an unresolvable host fails anyway.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Callable

from uds_vm_operator.controller.ssrf import source_host

RESOLVE_TIMEOUT_S = 2.0
CACHE_TTL_S = 60.0


class SourceResolver:
    """Addresses of source hosts, cached for ``ttl_s`` (failures too: a dead DNS costs one wait a minute)."""

    def __init__(self, ttl_s: float = CACHE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[tuple[str, ...], float]] = {}

    async def addresses(self, source: tuple[str, str] | None) -> tuple[str, ...]:
        """Every address the host of ``(kind, url)`` resolves to; () for IP literals and failures."""
        host = source_host(source[1]) if source is not None else None
        if host is None:
            return ()
        try:
            ipaddress.ip_address(host)
            return ()
        except ValueError:
            pass
        now = self._clock()
        cached = self._cache.get(host)
        if cached is not None and now - cached[1] < self.ttl_s:
            return cached[0]
        try:
            infos = await asyncio.wait_for(
                asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
            )
            found = tuple(sorted({str(info[4][0]) for info in infos}))
        except (OSError, TimeoutError, UnicodeError):
            found = ()
        self._cache[host] = (found, now)
        return found

"""Real packets from inside a pod: TCP connects and DNS queries run in the pod's own network namespace.

The host enters the pod's namespace with `nsenter -t <container pid> -n` and runs a few lines of Python there,
so each probe is a real connection attempt through the node's bridge, kube-proxy's DNAT and the policy
engine's filters, and its outcome is what a process in the pod would see: connected, refused or timed out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Literal

Outcome = Literal["connected", "refused", "timeout", "unreachable", "error"]

_TCP = r"""
import json, socket, sys
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(timeout)
try:
    s.connect((host, port)); print("connected")
except socket.timeout: print("timeout")
except ConnectionRefusedError: print("refused")
except OSError as e: print("unreachable" if e.errno in (101, 113) else "error:" + str(e))
"""

_DNS = r"""
import json, random, socket, struct, sys
name, server, proto, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
qid = random.randrange(65536)
query = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
labels = name.rstrip(".").split(".")
query += b"".join(bytes([len(p)]) + p.encode() for p in labels) + b"\0" + struct.pack(">HH", 1, 1)
try:
    if proto == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(timeout)
        s.sendto(query, (server, 53)); data = s.recv(4096)
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.settimeout(timeout)
        s.connect((server, 53)); s.sendall(struct.pack(">H", len(query)) + query)
        size = struct.unpack(">H", s.recv(2))[0]; data = b""
        while len(data) < size: data += s.recv(size - len(data))
except socket.timeout:
    print(json.dumps({"outcome": "timeout"})); sys.exit()
except OSError as e:
    print(json.dumps({"outcome": "error", "error": str(e)})); sys.exit()
rcode = data[3] & 0x0F
answers = struct.unpack(">H", data[6:8])[0]
# skip the question, then read A records
pos = 12
while data[pos]: pos += data[pos] + 1
pos += 5
addresses = []
for _ in range(answers):
    if data[pos] & 0xC0 == 0xC0: pos += 2
    else:
        while data[pos]: pos += data[pos] + 1
        pos += 1
    rtype, _, _, length = struct.unpack(">HHIH", data[pos:pos + 10]); pos += 10
    if rtype == 1 and length == 4: addresses.append(".".join(str(b) for b in data[pos:pos + 4]))
    pos += length
print(json.dumps({"outcome": "answered", "rcode": rcode, "addresses": addresses}))
"""


def _in_netns(pid: int, script: str, *args: str, timeout_s: float) -> str:
    result = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s + 10,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"probe in the netns of pid {pid} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def tcp(pid: int, host: str, port: int, timeout_s: float = 2.0) -> Outcome:
    """One TCP connect from the pod whose container runs as `pid`."""
    out = _in_netns(pid, _TCP, host, str(port), str(timeout_s), timeout_s=timeout_s)
    return out if out in ("connected", "refused", "timeout", "unreachable") else "error"  # type: ignore[return-value]


POLICY_BLOCKED = ("refused", "timeout")
"""kube-router rejects what a policy denies (ICMP port unreachable: "refused"); a drop would time out. Only a
verdict where the target is known to listen and was reached otherwise."""


def tcp_blocked(pid: int, host: str, port: int) -> bool:
    """The connection was refused or timed out (see POLICY_BLOCKED for when that means a policy)."""
    return tcp(pid, host, port) in POLICY_BLOCKED


def dns(pid: int, name: str, server: str, protocol: str = "udp", timeout_s: float = 2.0) -> dict[str, object]:
    """One A query from inside the pod: {"outcome": "answered", "rcode": 0, "addresses": [...]}."""
    result: dict[str, object] = json.loads(
        _in_netns(pid, _DNS, name, server, protocol, str(timeout_s), timeout_s=timeout_s)
    )
    return result


def routes(pid: int) -> str:
    """The pod's routing table as `ip route` prints it (no packet sent)."""
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "ip", "route"], capture_output=True, text=True, check=True
    ).stdout


def route_to(pid: int, address: str) -> str:
    """`ip route get` for an address: a lookup in the pod's table, no packet sent."""
    result = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "ip", "route", "get", address],
        capture_output=True,
        text=True,
        check=False,
    )
    return (result.stdout + result.stderr).strip()


_HTTP = r"""
import http.client, json, sys
host, port, path, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
try:
    c = http.client.HTTPConnection(host, port, timeout=timeout); c.request("GET", path); r = c.getresponse()
    print(json.dumps({"status": r.status, "body": r.read(2_000_000).decode(errors="replace")}))
except OSError as e:
    print(json.dumps({"status": 0, "body": str(e)}))
"""


def http_get(pid: int, host: str, port: int, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """An HTTP GET from inside the pod (status 0 when the connection failed)."""
    answer = json.loads(_in_netns(pid, _HTTP, host, str(port), path, str(timeout_s), timeout_s=timeout_s))
    return int(answer["status"]), str(answer["body"])

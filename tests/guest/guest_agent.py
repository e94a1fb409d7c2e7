"""A client for qemu-guest-agent on the guest's virtio-serial port (the host end is a unix socket).

The protocol is QMP-style JSON, one object per line. ``guest-sync-delimited`` resynchronises: the agent
answers it after a 0xFF byte, so anything left from an earlier client (or a half-started agent) is skipped.
``guest-exec`` runs a program as root inside the guest with stdin from ``input-data`` and captures its
output; ``guest-exec-status`` is polled until it exits; ``guest-file-open/read/close`` read a file.
Every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import random
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class AgentError(AssertionError):
    """The agent did not answer, or answered with an error."""


@dataclass
class ExecResult:
    """One guest-exec run."""

    exitcode: int
    stdout: str
    stderr: str


class GuestAgent:
    """One connection to the agent socket (QEMU's chardev accepts a single client at a time)."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._sock: socket.socket | None = None
        self._buffer = b""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _send(self, command: str, arguments: dict[str, Any] | None = None) -> None:
        assert self._sock is not None
        message: dict[str, Any] = {"execute": command}
        if arguments is not None:
            message["arguments"] = arguments
        self._sock.sendall(json.dumps(message).encode() + b"\n")

    def _read_object(self, timeout_s: float) -> dict[str, Any]:
        assert self._sock is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError(f"no answer from the guest agent in {timeout_s:.0f} s")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                raise AgentError("the guest agent socket closed")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        # guest-sync-delimited's answer comes after a 0xFF byte: drop it (and anything before it).
        answer: dict[str, Any] = json.loads(line.rsplit(b"\xff", 1)[-1].decode())
        return answer

    def connect(self, timeout_s: float) -> float:
        """Connect and resynchronise (bounded); returns the seconds it took for the agent to answer."""
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            self.close()
            try:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._sock.connect(str(self.socket_path))
                token = random.randrange(1, 2**31)
                self._sock.sendall(b"\xff")
                self._send("guest-sync-delimited", {"id": token})
                self._buffer = b""
                if self._await_sync(token, min(20.0, max(1.0, deadline - time.monotonic()))):
                    return time.monotonic() - started
            except (OSError, AgentError, ValueError):  # ValueError: a half-written or non-UTF-8 line
                pass
            time.sleep(2)
        self.close()
        raise AgentError(f"the guest agent did not answer within {timeout_s:.0f} s")

    def _await_sync(self, token: int, timeout_s: float) -> bool:
        assert self._sock is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            answer = self._read_object(max(0.1, deadline - time.monotonic()))
            if answer.get("return") == token:
                return True
        return False

    def call(self, command: str, arguments: dict[str, Any] | None = None, timeout_s: float = 60.0) -> Any:
        """One command; its ``return`` value, or AgentError with the agent's error."""
        self._send(command, arguments)
        answer = self._read_object(timeout_s)
        if "error" in answer:
            raise AgentError(f"{command}: {answer['error']}")
        return answer.get("return")

    def exec(self, argv: list[str], stdin: str | None = None, timeout_s: float = 900.0) -> ExecResult:
        """Run ``argv`` as root in the guest and wait (bounded) for it to exit."""
        arguments: dict[str, Any] = {"path": argv[0], "arg": argv[1:], "capture-output": True}
        if stdin is not None:
            arguments["input-data"] = base64.b64encode(stdin.encode()).decode()
        pid = self.call("guest-exec", arguments)["pid"]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.call("guest-exec-status", {"pid": pid})
            if status.get("exited"):
                return ExecResult(
                    int(status.get("exitcode", -1)),
                    base64.b64decode(status.get("out-data", "")).decode(errors="replace"),
                    base64.b64decode(status.get("err-data", "")).decode(errors="replace"),
                )
            time.sleep(1)
        raise AgentError(f"{argv} did not exit within {timeout_s:.0f} s")

    def read_file(self, path: str, limit: int = 4 << 20) -> bytes | None:
        """The file's bytes (at most ``limit``), or None when the guest cannot open it."""
        try:
            handle = self.call("guest-file-open", {"path": path, "mode": "r"})
        except AgentError:
            return None
        data = b""
        try:
            for _ in range(limit // 65536 + 1):
                chunk = self.call("guest-file-read", {"handle": handle, "count": 65536})
                data += base64.b64decode(chunk.get("buf-b64", ""))
                if chunk.get("eof") or len(data) >= limit:
                    break
        finally:
            self.call("guest-file-close", {"handle": handle})
        return data[:limit]

"""Run a command (containerd) as the only child of PID 1 in a new PID namespace: the node's "host" PIDs.

Why: virt-handler is a hostPID pod and reaches the host through ``/proc/1/ns/mnt`` and ``/proc/1/root`` (its
virt-chroot, SELinux probe, cgroup and hotplug code). On a machine whose own PID 1 is a sandbox init that
hides its namespaces (``open /proc/1/ns/mnt: permission denied``) that fails, so the node gives its pods a PID
namespace of their own whose PID 1 is this process (hostPID pods join containerd's PID namespace). Its mount
namespace is the host's copy with only ``/proc`` replaced, so ``/proc/1/root`` is still the host's root and
the
node's shared mounts stay peers of the host's.

Process tree (host view): launcher (this script, recorded by node.py; forwards SIGTERM/SIGINT) → init (PID 1
in the new namespace; reaps orphans, forwards signals) → the command. When the command exits, init exits with
its status, and the kernel ends whatever is left in the namespace: nothing the node started outlives it.

Usage: python pid_namespace_init.py COMMAND [ARG...]
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from types import FrameType

CLONE_NEWPID = 0x20000000
CLONE_NEWNS = 0x00020000
PR_SET_PDEATHSIG = 1
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_PRIVATE = 0x2, 0x4, 0x8, 1 << 18


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _exit_code(status: int) -> int:
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else 1


def _forward_signals_to(pid: int) -> None:
    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)


def _die_with_parent() -> None:
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _mount_own_proc() -> None:
    """containerd looks itself up as /proc/<its PID>: give this namespace a /proc that shows its own PIDs.

    Only /proc changes (made private first, so nothing propagates to the host); every other mount stays as
    on the host, shared ones (the kubelet's and virt-handler's directories) still peers of the host's.
    """
    libc = _libc()
    if libc.mount(b"none", b"/proc", None, MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making /proc private")
    if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        raise OSError(ctypes.get_errno(), "mounting this namespace's /proc")


def run_init(argv: list[str]) -> int:
    """PID 1: start argv, pass signals on, reap every orphan, and return argv's exit code."""
    _die_with_parent()
    try:
        _mount_own_proc()
    except OSError as error:
        print(f"pid_namespace_init: {error.strerror}: {error.filename}", file=sys.stderr)
        return 1
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.execvp(argv[0], argv)
    _forward_signals_to(child)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if pid == child:
            return _exit_code(status)


def main(argv: list[str]) -> int:
    """Unshare the PID namespace, fork its init, and wait for it (passing signals on)."""
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if _libc().unshare(CLONE_NEWPID | CLONE_NEWNS) != 0:
        error = ctypes.get_errno()
        print(
            f"pid_namespace_init: unshare(CLONE_NEWPID|CLONE_NEWNS) failed: {os.strerror(error)}",
            file=sys.stderr,
        )
        return 1
    init = os.fork()
    if init == 0:
        os._exit(run_init(argv))
    _forward_signals_to(init)
    while True:
        try:
            _, status = os.waitpid(init, 0)
            return _exit_code(status)
        except InterruptedError:
            continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Relay one guest connection (QEMU ``guestfwd ... cmd:``: the socket is stdin/stdout) to 127.0.0.1:PORT.

QEMU's user network hands each guest connection to a fresh process with the connection on fds 0, 1 and 2, so
this never writes to stderr. It ends when either side closes; it can only reach the loopback port given.
"""

import os
import select
import socket
import sys


def main() -> None:
    port = int(sys.argv[1])
    upstream = socket.create_connection(("127.0.0.1", port), timeout=30)
    upstream.settimeout(None)
    guest_in, guest_out = 0, 1
    open_ends = {guest_in, upstream.fileno()}
    for _ in range(10_000_000):  # bounded: far more chunks than any index or .deb needs
        if guest_in not in open_ends and upstream.fileno() not in open_ends:
            break
        readable, _, _ = select.select(list(open_ends), [], [], 300)
        if not readable:
            break  # idle for 5 minutes: apt has long gone
        for fd in readable:
            if fd == guest_in:
                data = os.read(guest_in, 65536)
                if not data:
                    open_ends.discard(guest_in)
                    upstream.shutdown(socket.SHUT_WR)
                else:
                    upstream.sendall(data)
            else:
                data = upstream.recv(65536)
                if not data:
                    return
                view = memoryview(data)
                while view:
                    view = view[os.write(guest_out, view) :]


if __name__ == "__main__":
    try:
        main()
    except OSError:
        sys.exit(1)

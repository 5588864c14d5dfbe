#!/usr/bin/env python3
"""One client that PINGs a server every millisecond and times each round trip.

    python bench/pinger.py PORT

It prints "ready" once its first PONG is back, pings until its standard input
is closed, then prints the longest round trip in milliseconds. A process of its
own, so the load a benchmark script drives from its own threads (the GIL) does
not delay it (common.PingStall runs it).
"""

from __future__ import annotations

import socket
import sys
import threading
import time

PING = b"*1\r\n$4\r\nPING\r\n"


def round_trip(s: socket.socket) -> float:
    t0 = time.perf_counter()
    s.sendall(PING)
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = s.recv(64)
        if not chunk:
            raise ConnectionError("server closed the connection")
        reply += chunk
    return time.perf_counter() - t0


def main() -> None:
    port = int(sys.argv[1])
    stop = threading.Event()
    # Standard input closing is the signal to stop (read in a thread that only waits).
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), stop.set()), daemon=True).start()
    worst = 0.0
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        round_trip(s)
        print("ready", flush=True)
        while not stop.is_set():
            worst = max(worst, round_trip(s))
            time.sleep(0.001)
    print(f"{worst * 1000:.3f}", flush=True)


if __name__ == "__main__":
    main()

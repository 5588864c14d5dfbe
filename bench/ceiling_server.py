#!/usr/bin/env python3
"""The ceiling: a RESP server that does nothing, on the same event loop our
node runs (uvloop when installed), so a benchmark shows how far the real path
is from what plain Python can serve at all.

    python bench/ceiling_server.py PORT

``data_received`` splits the multibulk requests in its buffer (enough parsing
to find where each one ends, as any server must) and answers every one with
the same 42-byte status line (the size of ADDJOB's reply, a job id), in one
``transport.write`` per read. No command table, no job, no reply encoding:
what is left is the loop, the socket and the split.

    python bench/ceiling_server.py PORT --hold

holds instead what a job store cannot do without, the plainest way Python
can: each ADDJOB's body and a new 40-byte id (two ``bytes``), the id as the
key of a dict whose values are the bodies, and the id appended to a deque (the
queue); it answers ADDJOB with that id and QLEN with the deque's length. Its
RSS per ADDJOB is the memory row's ceiling: what a store of Python objects pays
before any field of a job.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque

# A status line the size of ADDJOB's reply (a job id): 42 bytes.
REPLY = b"+" + b"D" * 39 + b"\r\n"


class Ceiling(asyncio.Protocol):
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos, end, answered = 0, len(buf), 0
        while pos < end:
            if buf[pos] != 42:                       # inline command: up to CRLF
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    break
                pos, answered = nl + 1, answered + 1
                continue
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            args, p = int(buf[pos + 1:nl]), nl + 2
            for _ in range(args):
                nl = buf.find(b"\r\n", p)
                if nl < 0:
                    break
                p = nl + 2 + int(buf[p + 1:nl]) + 2
                if p > end:
                    break
            else:
                pos, answered = p, answered + 1
                continue
            break
        self.buf = buf[pos:]
        if answered:
            self.transport.write(REPLY * answered if answered > 1 else REPLY)


class Holding(asyncio.Protocol):
    """--hold: every ADDJOB's id and body kept; one reply per request."""

    def __init__(self, jobs: dict[bytes, bytes], queue: deque[bytes]) -> None:
        self.jobs, self.queue = jobs, queue

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos, out = 0, []
        while True:
            request = read_multibulk(buf, pos)
            if request is None:
                break
            args, pos = request
            out.append(self.answer(args))
        self.buf = buf[pos:]
        if out:
            self.transport.write(b"".join(out))

    def answer(self, args: list[bytes]) -> bytes:
        name = args[0].upper() if args else b""
        if name == b"ADDJOB" and len(args) >= 3:
            jid = b"D-%038x" % (len(self.jobs) + 1)      # 40 bytes, like a job id
            self.jobs[jid] = args[2]
            self.queue.append(jid)
            return b"+" + jid + b"\r\n"
        if name == b"QLEN":
            return b":%d\r\n" % len(self.queue)
        return b"+OK\r\n"


def read_multibulk(buf: bytes, pos: int) -> tuple[list[bytes], int] | None:
    """One whole multibulk request at pos: (its arguments, where the next
    starts), or None when it has not all arrived."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    args, p = [], nl + 2
    for _ in range(int(buf[pos + 1:nl])):
        nl = buf.find(b"\r\n", p)
        if nl < 0:
            return None
        start = nl + 2
        p = start + int(buf[p + 1:nl]) + 2
        if p > len(buf):
            return None
        args.append(buf[start:p - 2])
    return args, p


def main() -> None:
    port = int(sys.argv[1])
    hold = "--hold" in sys.argv[2:]
    try:
        import uvloop  # optional: not on Windows
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    loop = asyncio.new_event_loop()
    if hold:
        jobs: dict[bytes, bytes] = {}
        queue: deque[bytes] = deque()
        factory = lambda: Holding(jobs, queue)  # noqa: E731
    else:
        factory = Ceiling
    server = loop.run_until_complete(loop.create_server(factory, "127.0.0.1", port))
    try:
        loop.run_forever()
    finally:
        server.close()


if __name__ == "__main__":
    main()

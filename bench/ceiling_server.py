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
"""

from __future__ import annotations

import asyncio
import sys

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


def main() -> None:
    port = int(sys.argv[1])
    try:
        import uvloop  # optional: not on Windows
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(Ceiling, "127.0.0.1", port))
    try:
        loop.run_forever()
    finally:
        server.close()


if __name__ == "__main__":
    main()

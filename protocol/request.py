"""RESP requests: what a client sends, read as Redis's ``networking.c`` reads it.

A client sends either *multibulk* requests (``*N\\r\\n`` followed by N
``$len\\r\\n<bytes>\\r\\n`` elements, what every client library sends) or
*inline* commands (a plain text line, as telnet sends). The readers follow
Redis's ``processMultibulkBuffer`` / ``processInlineBuffer``: same accepted
inputs, same error texts, same limits::

    reader = Reader(max_bulk_len=..., max_query_buffer=..., max_multibulk_len=...)
    reader.feed(data)                  # may raise ProtocolError
    while (argv := reader.gets()) is not False:
        ...                            # argv: list[bytes], one command
    # a ProtocolError from feed()/gets() means: reply with it, close the connection
    for argv in reader.commands():     # the same, all the read's commands in one call
        ...

``PyReader`` here is the reference, pure Python. ``protocol/request_c.pyx`` is
the same reader written for the compiler (it walks the buffer with ``memchr``
and C integers); tests/unit/protocol/test_request.py feeds both the same random, hostile
and split-at-every-byte streams and demands the same commands and errors.
protocol/resp.py picks the compiled one unless ``DISQUETTE_NO_EXTENSIONS=1``.

Deliberate differences from Redis (all make the parser stricter or
deterministic; none affects a well-behaved client):

* The CRLF that ends a bulk body must really be ``\\r\\n`` (Redis skips two bytes
  without looking): "ERR Protocol error: expected CRLF after bulk data".
  Likewise a ``*``/``$`` header's ``\\r`` must be followed by ``\\n``, else the
  header is an invalid (multi)bulk length.
* Header and inline lines: Redis rejects a line only when more than 64 KB are
  buffered without a terminator, so whether a 70 KB line passes depends on how
  it was split into reads. Here the rule is applied to the line itself: no
  terminator within the first 64 KB + 1 bytes is an error, however the bytes
  arrived. Results never depend on how the input was split (except for the
  query buffer limit, which is about what is buffered).
* Redis looks for line ends with ``strchr``, which stops at a NUL byte, so a
  NUL inside a header line makes it wait forever; here a NUL is just an invalid
  header byte. In inline commands a NUL ends the line's content, as in
  ``sdssplitargs``.
* The query buffer limit counts every byte of the incomplete command, including
  the arguments already parsed (Redis counts only the unparsed part).
* "expected '$', got 'X'": Redis puts the raw byte in the message; here the byte
  is the character ``chr(byte)`` (CR/LF become spaces, as Redis does), so bytes
  over 0x7f come out UTF-8 encoded when the error is written.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------
# Limits and error texts (Redis's, from src/server.h and src/networking.c)
# ---------------------------------------------------------------------------

DEFAULT_MAX_BULK_LEN = 512 * 1024 * 1024        # proto-max-bulk-len
DEFAULT_MAX_QUERY_BUFFER = 1024 * 1024 * 1024   # client-query-buffer-limit
DEFAULT_MAX_MULTIBULK_LEN = 1024 * 1024         # the multibulk count limit of Redis 3

PROTO_INLINE_MAX_SIZE = 64 * 1024
# A header line (from its "*" or "$") or an inline line with no terminator in
# its first SCAN bytes is "too big", however the bytes were split into feeds.
SCAN = PROTO_INLINE_MAX_SIZE + 1

ERR_MBULK_LEN = "ERR Protocol error: invalid multibulk length"
ERR_BULK_LEN = "ERR Protocol error: invalid bulk length"
ERR_MBULK_TOO_BIG = "ERR Protocol error: too big mbulk count string"
ERR_BULK_TOO_BIG = "ERR Protocol error: too big bulk count string"
ERR_INLINE_TOO_BIG = "ERR Protocol error: too big inline request"
ERR_UNBALANCED = "ERR Protocol error: unbalanced quotes in request"
ERR_BULK_CRLF = "ERR Protocol error: expected CRLF after bulk data"
ERR_QUERY_BUFFER = "ERR Protocol error: query buffer limit exceeded"


def err_expected_dollar(byte: int) -> str:
    char = " " if byte in (10, 13) else chr(byte)
    return f"ERR Protocol error: expected '$', got '{char}'"


class ProtocolError(Exception):
    """The client broke the protocol; the connection must be closed.

    ``str(e)`` is the error text to send first, without the leading ``-``, e.g.
    ``ERR Protocol error: invalid bulk length``.
    """


# ---------------------------------------------------------------------------
# Integer and inline-argument parsing, ported from Redis
# ---------------------------------------------------------------------------

_LLONG_MAX = (1 << 63) - 1
_LLONG_MIN = -(1 << 63)


def string2ll(s: bytes) -> int | None:
    """Redis's ``string2ll``: a strict signed 64-bit decimal, else None.

    No sign but ``-``, no leading zeros, no spaces, at most 20 characters.
    """
    if s.isdigit():  # ASCII digits only, for bytes; False for b""
        if (s[0] == 48 and len(s) > 1) or len(s) > 20:
            return None
        v = int(s)
        return v if v <= _LLONG_MAX else None
    if len(s) > 1 and s[0] == 45 and s[1] != 48 and len(s) <= 20:  # '-'
        digits = s[1:]
        if digits.isdigit():
            v = -int(digits)
            return v if v >= _LLONG_MIN else None
    return None


# Lengths seen on the hot path, parsed once. Every key is a valid string2ll
# input, so a hit gives the same answer string2ll would.
_SMALL_INTS: dict[bytes, int] = {b"%d" % i: i for i in range(-1, 4096)}

_C_SPACE = frozenset(b" \t\n\r\x0b\x0c")  # C isspace() in the C locale
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}


def split_args(line: bytes) -> list[bytes] | None:
    """Split a line like Redis's ``sdssplitargs``; None on unbalanced quotes.

    Words are separated by spaces; ``"..."`` strings understand ``\\xHH``,
    ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\a`` and ``\\<any>``; ``'...'`` strings
    only ``\\'``. A closing quote must be followed by a space or the end. Used
    for inline commands (and usable for disque.conf lines).
    """
    nul = line.find(b"\0")
    if nul >= 0:  # sdssplitargs reads a C string: a NUL ends the line
        line = line[:nul]
    # Fast path. Without quotes, \v or \f, sdssplitargs splits on exactly the
    # bytes that bytes.split() splits on (space, \t, \n, \r).
    if not (b'"' in line or b"'" in line or b"\x0b" in line or b"\x0c" in line):
        return line.split()
    return _split_args_slow(line)


def _split_args_slow(s: bytes) -> list[bytes] | None:
    """Character-by-character port of sdssplitargs (src/sds.c)."""
    n = len(s)

    def at(j: int) -> int:  # the C string's byte at j, 0 past the end
        return s[j] if j < n else 0

    out: list[bytes] = []
    i = 0
    while True:
        while i < n and s[i] in _C_SPACE:  # skip blanks
            i += 1
        if i >= n:
            return out
        inq = insq = done = False
        cur = bytearray()
        while not done:
            c = at(i)
            if inq:
                if c == 92 and at(i + 1) == 120 and at(i + 2) in _HEX and at(i + 3) in _HEX:
                    cur.append(int(s[i + 2:i + 4], 16))  # "\xHH"
                    i += 3
                elif c == 92 and at(i + 1):
                    i += 1
                    cur.append(_ESCAPES.get(s[i], s[i]))
                elif c == 34:  # closing "
                    if at(i + 1) and at(i + 1) not in _C_SPACE:
                        return None
                    done = True
                elif not c:  # unterminated "
                    return None
                else:
                    cur.append(c)
            elif insq:
                if c == 92 and at(i + 1) == 39:  # \'
                    i += 1
                    cur.append(39)
                elif c == 39:  # closing '
                    if at(i + 1) and at(i + 1) not in _C_SPACE:
                        return None
                    done = True
                elif not c:  # unterminated '
                    return None
                else:
                    cur.append(c)
            else:
                if c in (32, 10, 13, 9, 0):  # only these end a bare word
                    done = True
                elif c == 34:
                    inq = True
                elif c == 39:
                    insq = True
                else:
                    cur.append(c)
            if at(i):
                i += 1
        out.append(bytes(cur))


# ---------------------------------------------------------------------------
# PyReader
# ---------------------------------------------------------------------------


class PyReader:
    """Pure-Python request reader, the reference for Redis-compatible parsing.

    Buffering: ``_buf[_pos:]`` holds the unparsed bytes. A command that is not
    complete yet is kept as a parse state (``_argv`` so far, ``_left`` elements
    to go, ``_bulk`` length of the body being waited for) so each ``gets()``
    resumes where the last stopped instead of re-parsing. While a bulk body is
    awaited, fed chunks are only collected and joined once the body is complete,
    so a large body costs O(size), not O(size * chunks).
    """

    __slots__ = (
        "_buf", "_pos", "_argv", "_left", "_bulk", "_partial", "_want",
        "_chunks", "_chunks_len", "_error",
        "max_bulk_len", "max_query_buffer", "max_multibulk_len",
    )

    def __init__(
        self,
        max_bulk_len: int = DEFAULT_MAX_BULK_LEN,
        max_query_buffer: int = DEFAULT_MAX_QUERY_BUFFER,
        max_multibulk_len: int = DEFAULT_MAX_MULTIBULK_LEN,
    ) -> None:
        self.max_bulk_len = max_bulk_len
        self.max_query_buffer = max_query_buffer
        self.max_multibulk_len = max_multibulk_len
        self._buf = b""
        self._pos = 0
        self._argv: list[bytes] | None = None  # None: between commands
        self._left = 0        # elements still to read for _argv
        self._bulk = -1       # length of the body being read, -1: header next
        self._partial = 0     # bytes of _argv's elements, dropped from _buf
        self._want = 0        # >0: bytes _buf must hold before parsing resumes
        self._chunks: list[bytes] = []  # fed while _want is unmet
        self._chunks_len = 0
        self._error: ProtocolError | None = None

    def pending(self) -> int:
        """Bytes fed and not yet returned as part of a command."""
        return self._partial + len(self._buf) - self._pos + self._chunks_len

    def _fail(self, text: str):
        self._error = ProtocolError(text)
        raise ProtocolError(text)

    def feed(self, data: bytes) -> None:
        if self._error is not None:
            raise ProtocolError(str(self._error))
        if type(data) is not bytes:
            data = bytes(data)
        n = len(data)
        if not n:
            return
        if self._want:  # waiting for a bulk body: collect, join when complete
            self._chunks.append(data)
            self._chunks_len += n
            if len(self._buf) + self._chunks_len >= self._want:
                self._buf = b"".join([self._buf, *self._chunks])
                self._chunks = []
                self._chunks_len = 0
                self._want = 0
            return
        pos = self._pos
        if pos >= len(self._buf):
            self._buf = data
        else:
            self._buf = self._buf[pos:] + data
        self._pos = 0

    def gets(self):
        """Return the next command's argv (list of bytes), or False if incomplete.

        Raises ProtocolError on malformed input; the reader then stays failed.
        The query buffer limit applies to what is left once every complete
        command was taken (as in Redis): a pipeline of commands that each fit
        is fine, one incomplete command over the limit is not.
        """
        r = self._gets()
        if r is False and self.pending() > self.max_query_buffer:
            self._fail(ERR_QUERY_BUFFER)
        return r

    def commands(self) -> list:
        """Every complete command buffered, in order: ``gets()`` until False.
        A malformed command ends the list, and the next call raises its
        ProtocolError: the commands before it run first, as in Redis."""
        out = []
        while True:
            try:
                argv = self.gets()
            except ProtocolError:
                if out:
                    return out
                raise
            if argv is False:
                return out
            out.append(argv)

    def _gets(self):
        if self._want or self._error is not None:
            if self._error is not None:
                raise ProtocolError(str(self._error))
            return False
        buf = self._buf
        pos = self._pos
        end = len(buf)
        argv = self._argv
        while True:
            if argv is None:
                # ---- between commands: a '*' header, or an inline line ----
                start = pos
                if pos >= end:
                    self._buf = b""
                    self._pos = 0
                    return False
                if buf[pos] != 42:  # not '*': inline command
                    nl = buf.find(b"\n", pos, pos + SCAN)
                    if nl < 0:
                        if end - pos >= SCAN:
                            self._fail(ERR_INLINE_TOO_BIG)
                        self._buf = buf[pos:]
                        self._pos = 0
                        return False
                    line_end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                    args = split_args(buf[pos:line_end])
                    pos = nl + 1
                    if args is None:
                        self._fail(ERR_UNBALANCED)
                    if args:
                        self._pos = pos
                        return args
                    continue  # empty line: skipped
                cr = buf.find(b"\r", pos, pos + SCAN)
                if cr < 0 or cr + 1 >= end:  # header line not complete yet
                    if cr < 0 and end - pos >= SCAN:
                        self._fail(ERR_MBULK_TOO_BIG)
                    self._buf = buf[pos:]
                    self._pos = 0
                    return False
                field = buf[pos + 1:cr]
                n = _SMALL_INTS.get(field)
                if n is None:
                    n = string2ll(field)
                    if n is None:
                        self._fail(ERR_MBULK_LEN)
                if n > self.max_multibulk_len or buf[cr + 1] != 10:
                    self._fail(ERR_MBULK_LEN)
                pos = cr + 2
                if n <= 0:  # *0 and *-1: nothing to run
                    continue
                argv = []
                left = n
                blen = -1
            else:
                # ---- resuming a command left incomplete by the last call ----
                start = pos
                left = self._left
                blen = self._bulk
            # ---- the elements: $len\r\n<bytes>\r\n ----
            while left:
                if blen < 0:
                    cr = buf.find(b"\r", pos, pos + SCAN)
                    if cr < 0 or cr + 1 >= end:
                        if cr < 0 and end - pos >= SCAN:
                            self._fail(ERR_BULK_TOO_BIG)
                        self._suspend(buf, pos, start, argv, left, -1)
                        return False
                    if buf[pos] != 36:  # '$'
                        self._fail(err_expected_dollar(buf[pos]))
                    field = buf[pos + 1:cr]
                    blen = _SMALL_INTS.get(field)
                    if blen is None:
                        blen = string2ll(field)
                        if blen is None:
                            self._fail(ERR_BULK_LEN)
                    if blen < 0 or blen > self.max_bulk_len or buf[cr + 1] != 10:
                        self._fail(ERR_BULK_LEN)
                    pos = cr + 2
                e = pos + blen
                if e + 2 > end:  # body (+ CRLF) not all here yet
                    self._suspend(buf, pos, start, argv, left, blen)
                    return False
                if buf[e] != 13 or buf[e + 1] != 10:
                    self._fail(ERR_BULK_CRLF)
                argv.append(buf[pos:e])
                pos = e + 2
                left -= 1
                blen = -1
            self._argv = None
            self._partial = 0
            self._pos = pos
            return argv

    def _suspend(self, buf, pos, start, argv, left, blen) -> None:
        """Save the state of an incomplete command and drop what was parsed."""
        self._argv = argv
        self._left = left
        self._bulk = blen
        self._partial += pos - start
        self._buf = buf[pos:]
        self._pos = 0
        if blen >= 0:
            self._want = blen + 2

"""RESP wire format for client connections: request readers and reply encoder.

Sans-IO: nothing here touches a socket or an event loop. The connection shell
feeds the bytes it received and asks for complete commands, and turns reply
values into bytes to write.

Request readers
---------------
A client sends either *multibulk* requests (``*N\\r\\n`` followed by N
``$len\\r\\n<bytes>\\r\\n`` elements, what every client library sends) or
*inline* commands (a plain text line, as telnet sends). Both readers below follow
Redis's request parser (``processMultibulkBuffer`` / ``processInlineBuffer`` in
``src/networking.c``): same accepted inputs, same error texts, same limits::

    reader = Reader(max_bulk_len=..., max_query_buffer=..., max_multibulk_len=...)
    reader.feed(data)                  # may raise ProtocolError (query buffer limit)
    while (argv := reader.gets()) is not False:
        ...                            # argv: list[bytes], one command
    # a ProtocolError from feed()/gets() means: reply with it, close the connection

* ``PyReader`` is the reference implementation, pure Python.
* ``HiredisReader`` gives the same results, faster on pipelined traffic, by
  letting ``hiredis.Reader`` cut complete multibulk commands out of the stream.
  hiredis parses *replies*, not requests: it accepts ``+``/``:``/nested arrays
  inside a multibulk, does not check the CRLF after a bulk body, has no size
  limits and knows nothing of inline commands. So every command it returns is
  *verified*: it must be a flat list of bytes whose canonical encoding is exactly
  the bytes it was cut from, within the limits. A command that passes is what
  ``PyReader`` would have returned for those bytes. Anything else - a hiredis
  error, an unexpected type, a mismatch, an inline command, or an incomplete
  command at the end of the buffer (whose headers must be checked now, so that
  ``$99999999999`` fails at once) - hands the unconsumed bytes to an embedded
  ``PyReader``, which gives the authoritative answer; as soon as it has returned
  a command, the remaining bytes go back to a fresh hiredis reader. The two
  readers therefore agree by construction; tests/unit/test_resp.py checks it.

``Reader`` is ``HiredisReader`` when hiredis is importable, else ``PyReader``.

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

Reply encoder
-------------
``encode(value, proto)`` turns a Python value into RESP2 (``proto=2``) or RESP3
(``proto=3``) bytes; ``get_encoder(proto)`` returns the same thing as a
one-argument function for a connection to keep. Plain Python types map to the
obvious reply types (see ``encode``); ``Status``, ``Error``, ``Map``,
``Verbatim``, ``Push``, ``NULL_ARRAY`` and ``Raw`` select the others.
"""

from __future__ import annotations

from typing import Any, Callable

try:  # the fast path; everything works without it
    import hiredis
except ImportError:  # pragma: no cover - hiredis is a declared dependency
    hiredis = None

__all__ = [
    "ProtocolError",
    "PyReader",
    "HiredisReader",
    "Reader",
    "split_args",
    "string2ll",
    "Status",
    "Error",
    "Map",
    "Verbatim",
    "Push",
    "Raw",
    "NULL_ARRAY",
    "OK",
    "PONG",
    "encode",
    "encode_many",
    "get_encoder",
]


# ---------------------------------------------------------------------------
# Limits and error texts (Redis's, from src/server.h and src/networking.c)
# ---------------------------------------------------------------------------

DEFAULT_MAX_BULK_LEN = 512 * 1024 * 1024        # proto-max-bulk-len
DEFAULT_MAX_QUERY_BUFFER = 1024 * 1024 * 1024   # client-query-buffer-limit
DEFAULT_MAX_MULTIBULK_LEN = 1024 * 1024         # the multibulk count limit of Redis 3

PROTO_INLINE_MAX_SIZE = 64 * 1024
# A header line (from its "*" or "$") or an inline line with no terminator in
# its first _SCAN bytes is "too big", however the bytes were split into feeds.
_SCAN = PROTO_INLINE_MAX_SIZE + 1

ERR_MBULK_LEN = "ERR Protocol error: invalid multibulk length"
ERR_BULK_LEN = "ERR Protocol error: invalid bulk length"
ERR_MBULK_TOO_BIG = "ERR Protocol error: too big mbulk count string"
ERR_BULK_TOO_BIG = "ERR Protocol error: too big bulk count string"
ERR_INLINE_TOO_BIG = "ERR Protocol error: too big inline request"
ERR_UNBALANCED = "ERR Protocol error: unbalanced quotes in request"
ERR_BULK_CRLF = "ERR Protocol error: expected CRLF after bulk data"
ERR_QUERY_BUFFER = "ERR Protocol error: query buffer limit exceeded"


def _err_expected_dollar(byte: int) -> str:
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

    def _load(self, data: bytes) -> None:
        """Start from ``data`` with no pending state (used by HiredisReader)."""
        self._buf = data
        self._pos = 0

    def _take_rest(self) -> bytes:
        """Remove and return the unparsed bytes; only between commands."""
        rest = self._buf[self._pos:]
        self._buf = b""
        self._pos = 0
        return rest

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
                    nl = buf.find(b"\n", pos, pos + _SCAN)
                    if nl < 0:
                        if end - pos >= _SCAN:
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
                cr = buf.find(b"\r", pos, pos + _SCAN)
                if cr < 0 or cr + 1 >= end:  # header line not complete yet
                    if cr < 0 and end - pos >= _SCAN:
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
                    cr = buf.find(b"\r", pos, pos + _SCAN)
                    if cr < 0 or cr + 1 >= end:
                        if cr < 0 and end - pos >= _SCAN:
                            self._fail(ERR_BULK_TOO_BIG)
                        self._suspend(buf, pos, start, argv, left, -1)
                        return False
                    if buf[pos] != 36:  # '$'
                        self._fail(_err_expected_dollar(buf[pos]))
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


# ---------------------------------------------------------------------------
# HiredisReader
# ---------------------------------------------------------------------------

# Checking hiredis's results means re-encoding each command the way a client
# writes it and comparing with the bytes it came from. That check is the main
# cost of the fast path, so for the usual argument counts it is a generated
# function doing one %-format:
#   canonical(r) == b"*3\r\n$%d\r\n%b\r\n$%d..." % (len(a0), a0, len(a1), ...)
# Any element that is not bytes-like makes the format raise TypeError.
def _make_canonical(n: int) -> Callable[[list], bytes]:
    names = ", ".join(f"a{i}" for i in range(n))
    values = ", ".join(f"len(a{i}), a{i}" for i in range(n))
    src = f"def canonical(r, fmt=fmt, len=len):\n    {names}, = r\n    return fmt % ({values})\n"
    namespace = {"fmt": b"*%d\r\n" % n + b"$%d\r\n%b\r\n" * n}
    exec(src, namespace)
    return namespace["canonical"]


def _canonical_any(r: list) -> bytes:
    return b"*%d\r\n" % len(r) + b"".join([b"$%d\r\n%b\r\n" % (len(a), a) for a in r])


_CANONICAL_MAX = 16
_CANONICAL = {n: _make_canonical(n) for n in range(1, _CANONICAL_MAX + 1)}


# An incomplete command at the end of the buffer must be checked now, not when
# it completes ("$99999999999" fails at once). For small tails of the usual
# shape that check is done here without leaving the fast path; anything else
# goes to PyReader. Big tails go to PyReader too: it resumes where it stopped,
# where re-scanning a big tail after every feed would cost O(n^2).
_TAIL_SCAN_MAX_BYTES = 8192
_TAIL_SCAN_MAX_ELEMENTS = 64


def _tail_is_waiting(buf: bytes, pos: int, max_multibulk_len: int, max_bulk_len: int) -> bool:
    """True only if PyReader, given buf[pos:], would return False without error.

    Mirrors PyReader's checks for a multibulk command; when unsure it answers
    False, which is always safe (the caller then asks PyReader itself). The
    tail is shorter than a header line may be, so "too big" errors cannot occur.
    """
    end = len(buf)
    if end - pos > _TAIL_SCAN_MAX_BYTES or buf[pos] != 42:
        return False
    cr = buf.find(b"\r", pos)
    if cr < 0 or cr + 1 >= end:
        return True
    n = _SMALL_INTS.get(buf[pos + 1:cr])
    if n is None or n <= 0 or n > max_multibulk_len or n > _TAIL_SCAN_MAX_ELEMENTS or buf[cr + 1] != 10:
        return False
    p = cr + 2
    for _ in range(n):
        if p >= end:
            return True
        cr = buf.find(b"\r", p)
        if cr < 0 or cr + 1 >= end:
            return True
        if buf[p] != 36 or buf[cr + 1] != 10:
            return False
        blen = string2ll(buf[p + 1:cr])
        if blen is None or blen < 0 or blen > max_bulk_len:
            return False
        e = cr + 2 + blen
        if e + 2 > end:
            return True
        if buf[e] != 13 or buf[e + 1] != 10:
            return False
        p = e + 2
    return False  # complete after all: let PyReader answer


class HiredisReader:
    """Same interface and results as PyReader, using hiredis for the bulk work.

    Two modes. *Fast*: bytes go to ``hiredis.Reader`` and are also kept in
    ``_buf`` (from ``_pos``) so each command hiredis returns can be checked
    against its canonical encoding. *Python*: the embedded PyReader ``_py``
    owns the unconsumed bytes. See the module docstring for when the modes switch.
    """

    __slots__ = ("_py", "_hr", "_hr_clean", "_buf", "_pos", "_fast", "_error",
                 "max_bulk_len", "max_query_buffer", "max_multibulk_len")

    def __init__(
        self,
        max_bulk_len: int = DEFAULT_MAX_BULK_LEN,
        max_query_buffer: int = DEFAULT_MAX_QUERY_BUFFER,
        max_multibulk_len: int = DEFAULT_MAX_MULTIBULK_LEN,
    ) -> None:
        if hiredis is None:  # pragma: no cover
            raise RuntimeError("hiredis is not installed")
        self.max_bulk_len = max_bulk_len
        self.max_query_buffer = max_query_buffer
        self.max_multibulk_len = max_multibulk_len
        self._py = PyReader(max_bulk_len, max_query_buffer, max_multibulk_len)
        self._hr = hiredis.Reader()
        self._hr_clean = True  # _hr has never been fed
        self._buf = b""
        self._pos = 0
        self._fast = True
        self._error: ProtocolError | None = None

    def pending(self) -> int:
        """Bytes fed and not yet returned as part of a command."""
        if self._fast:
            return len(self._buf) - self._pos
        return self._py.pending()

    def feed(self, data: bytes) -> None:
        if self._error is not None:
            raise ProtocolError(str(self._error))
        if not self._fast:
            try:
                self._py.feed(data)
            except ProtocolError as e:
                self._error = e
                raise
            return
        if type(data) is not bytes:
            data = bytes(data)
        n = len(data)
        if not n:
            return
        buf = self._buf
        pos = self._pos
        pending = len(buf) - pos
        if not pending:
            if data[0] != 42:  # inline command: let Python read it
                self._fast = False
                self._py._load(data)
                return
            self._buf = data
        else:
            self._buf = buf[pos:] + data
        self._pos = 0
        self._hr.feed(data)
        self._hr_clean = False

    def gets(self):
        """Return the next command's argv (list of bytes), or False if incomplete."""
        if not self._fast:
            return self._py_gets()
        try:
            r = self._hr.gets()
        except hiredis.ProtocolError:
            return self._to_python()
        if r is False:
            pos = self._pos
            if pos == len(self._buf):  # all consumed: drop the chunk
                self._buf = b""
                self._pos = 0
                return False
            if len(self._buf) - pos > self.max_query_buffer:
                # PyReader decides: a malformed tail is reported before the limit.
                return self._to_python()
            if _tail_is_waiting(self._buf, pos, self.max_multibulk_len, self.max_bulk_len):
                return False
            # A tail that is big or unusual: PyReader checks it and keeps it.
            return self._to_python()
        if type(r) is list and 0 < len(r) <= self.max_multibulk_len:
            try:
                enc = _CANONICAL.get(len(r), _canonical_any)(r)
            except TypeError:  # an element that is not bytes
                return self._to_python()
            pos = self._pos
            if self._buf.startswith(enc, pos) and (
                len(enc) <= self.max_bulk_len or max(map(len, r)) <= self.max_bulk_len
            ):
                self._pos = pos + len(enc)
                return r
        return self._to_python()

    def _to_python(self):
        """Hand the unconsumed bytes to the PyReader and let it answer."""
        self._py._load(self._buf[self._pos:])
        self._buf = b""
        self._pos = 0
        self._fast = False
        return self._py_gets()

    def _py_gets(self):
        if self._error is not None:
            raise ProtocolError(str(self._error))
        py = self._py
        try:
            r = py.gets()
        except ProtocolError as e:
            self._error = e
            raise
        if r is not False:
            # PyReader is between commands: back to hiredis unless the next
            # command is inline (then PyReader keeps going).
            if py._pos >= len(py._buf) or py._buf[py._pos] == 42:
                rest = py._take_rest()
                if not self._hr_clean:
                    self._hr = hiredis.Reader()
                    self._hr_clean = True
                if rest:
                    self._hr.feed(rest)
                    self._hr_clean = False
                self._buf = rest
                self._pos = 0
                self._fast = True
        return r


Reader = HiredisReader if hiredis is not None else PyReader


# ---------------------------------------------------------------------------
# Reply encoder
# ---------------------------------------------------------------------------


class Status(str):
    """A status reply: ``Status("OK")`` -> ``+OK``."""

    __slots__ = ()


class Error(str):
    """An error reply, text without the ``-``: ``Error("ERR x")`` -> ``-ERR x``."""

    __slots__ = ()


class Map(dict):
    """RESP3 map (``%``); under RESP2 a flat array k1 v1 k2 v2 ..."""

    __slots__ = ()


class Verbatim(str):
    """RESP3 verbatim text (``=``, format ``txt``); under RESP2 a bulk string."""

    __slots__ = ()


class Push(list):
    """RESP3 push (``>``); under RESP2 an array."""

    __slots__ = ()


class Raw:
    """Bytes that are already RESP, written as they are (precomputed replies).

    Deliberately not a bytes subclass, so it can never pass for a bulk string.
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def __repr__(self) -> str:
        return f"Raw({self.data!r})"


class _NullArray:
    """Type of NULL_ARRAY: the null array, RESP2 ``*-1``, RESP3 ``_``."""

    __slots__ = ()
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NULL_ARRAY"

    def __reduce__(self):
        return "NULL_ARRAY"


NULL_ARRAY = _NullArray()
OK = Status("OK")
PONG = Status("PONG")

# Precomputed replies, identical in RESP2 and RESP3.
ENCODED_OK = b"+OK\r\n"
ENCODED_PONG = b"+PONG\r\n"
ENCODED_ZERO = b":0\r\n"
ENCODED_ONE = b":1\r\n"
# Precomputed nulls per protocol.
ENCODED_NULL = {2: b"$-1\r\n", 3: b"_\r\n"}
ENCODED_NULL_ARRAY = {2: b"*-1\r\n", 3: b"_\r\n"}

_I64_MIN = -(1 << 63)
_I64_LIMIT = 1 << 63


def _line(text: str) -> bytes:
    """Status/error text as one line: CR and LF become spaces (as in Redis)."""
    if "\r" in text or "\n" in text:
        text = text.replace("\r", " ").replace("\n", " ")
    return text.encode()


def _enc_bytes(v) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(v), v)


def _enc_memoryview(v: memoryview) -> bytes:
    return _enc_bytes(v.tobytes())


def _enc_str(v: str) -> bytes:
    b = v.encode()
    return b"$%d\r\n%b\r\n" % (len(b), b)


def _enc_status(v: str) -> bytes:
    return b"+%b\r\n" % _line(v)


def _enc_error(v) -> bytes:
    return b"-%b\r\n" % _line(str(v))


def _enc_raw(v: Raw) -> bytes:
    return v.data


def _build_encoder(proto: int) -> Callable[[Any], bytes]:
    """Build the encoder function and its type table for one protocol version."""
    resp3 = proto == 3
    table: dict[type, Callable[[Any], bytes]] = {}

    def resolve(t: type) -> Callable[[Any], bytes]:
        # A subclass of a known type (IntEnum, a str subclass...): encode as
        # its nearest registered base, and remember the answer.
        for base in t.__mro__:
            f = table.get(base)
            if f is not None:
                table[t] = f
                return f
        raise TypeError(f"cannot encode a {t.__name__} as RESP")

    def enc(v) -> bytes:
        f = table.get(type(v))
        if f is None:
            f = resolve(type(v))
        return f(v)

    def enc_seq(v, head: bytes = b"*") -> bytes:
        # The common case, a list of bytes, avoids a function call per element.
        return head + b"%d\r\n" % len(v) + b"".join([
            b"$%d\r\n%b\r\n" % (len(x), x) if type(x) is bytes else enc(x) for x in v
        ])

    def enc_list(v) -> bytes:
        # Fastest case, a short flat list of bytes ([queue, id, body]): one
        # %-format by the generated functions the HiredisReader uses. The
        # first/last element test keeps mixed lists off this path most of the
        # time; when it guesses wrong, the format raises TypeError.
        n = len(v)
        if 0 < n <= _CANONICAL_MAX:
            first = v[0]
            if type(first) is bytes and type(v[-1]) is bytes:
                try:
                    return _CANONICAL[n](v)
                except TypeError:
                    pass
            elif n == 1 and type(first) is list:
                # [[queue, id, body]], GETJOB's usual reply: skip enc_seq's
                # generic per-element dispatch (half the cost of this reply).
                return b"*1\r\n" + enc_list(first)
        return enc_seq(v)

    def enc_int(v: int) -> bytes:
        if _I64_MIN <= v < _I64_LIMIT:
            return b":%d\r\n" % v
        # Outside 64 bits: what Redis's addReplyBigNum does.
        if resp3:
            return b"(%d\r\n" % v
        return _enc_bytes(b"%d" % v)

    def enc_map(v: dict) -> bytes:
        if resp3:
            head = b"%%%d\r\n" % len(v)
        else:
            head = b"*%d\r\n" % (2 * len(v))
        return head + b"".join([enc(k) + enc(x) for k, x in v.items()])

    if resp3:
        def enc_none(v) -> bytes:
            return b"_\r\n"

        enc_null_array = enc_none

        def enc_bool(v: bool) -> bytes:
            return b"#t\r\n" if v else b"#f\r\n"

        def enc_float(v: float) -> bytes:
            return b",%b\r\n" % repr(v).encode()

        def enc_verbatim(v: str) -> bytes:
            b = v.encode()
            return b"=%d\r\ntxt:%b\r\n" % (len(b) + 4, b)

        def enc_push(v) -> bytes:
            return enc_seq(v, b">")

        def enc_set(v) -> bytes:
            return enc_seq(v, b"~")
    else:
        def enc_none(v) -> bytes:
            return b"$-1\r\n"

        def enc_null_array(v) -> bytes:
            return b"*-1\r\n"

        def enc_bool(v: bool) -> bytes:
            return b":1\r\n" if v else b":0\r\n"

        def enc_float(v: float) -> bytes:
            return _enc_bytes(repr(v).encode())

        enc_verbatim = _enc_str
        enc_push = enc_seq
        enc_set = enc_seq

    table.update({
        bytes: _enc_bytes,
        bytearray: _enc_bytes,
        memoryview: _enc_memoryview,
        str: _enc_str,
        int: enc_int,
        bool: enc_bool,
        float: enc_float,
        type(None): enc_none,
        list: enc_list,
        tuple: enc_list,
        set: enc_set,
        frozenset: enc_set,
        dict: enc_map,
        Map: enc_map,
        Status: _enc_status,
        Error: _enc_error,
        ProtocolError: _enc_error,
        Verbatim: enc_verbatim,
        Push: enc_push,
        Raw: _enc_raw,
        _NullArray: enc_null_array,
    })
    return enc


_ENCODERS = {2: _build_encoder(2), 3: _build_encoder(3)}


def get_encoder(proto: int = 2) -> Callable[[Any], bytes]:
    """The encoder function for a protocol version (2 or 3), for a connection to keep."""
    try:
        return _ENCODERS[proto]
    except KeyError:
        raise ValueError(f"unsupported protocol version {proto!r}") from None


def encode(value: Any, proto: int = 2) -> bytes:
    """Encode one reply.

    =====================  ======================  =====================
    value                  RESP2                   RESP3
    =====================  ======================  =====================
    bytes, bytearray, str  ``$`` bulk (str: UTF-8) same
    int                    ``:`` (``$`` if > 64 b) ``:`` (``(`` if > 64 b)
    bool                   ``:1`` / ``:0``         ``#t`` / ``#f``
    float                  ``$`` bulk of repr()    ``,`` double
    None                   ``$-1``                 ``_``
    NULL_ARRAY             ``*-1``                 ``_``
    list, tuple            ``*`` array             same
    set, frozenset         ``*`` array             ``~`` set
    Map, dict              flat ``*`` array        ``%`` map
    Status / Error         ``+text`` / ``-text``   same
    Verbatim               ``$`` bulk              ``=`` with ``txt:``
    Push                   ``*`` array             ``>`` push
    Raw                    as is                   as is
    =====================  ======================  =====================

    A memoryview must have a byte format (``"B"``, ``"b"``, ``"c"``).
    """
    return get_encoder(proto)(value)


def encode_many(values, proto: int = 2) -> bytes:
    """Encode several replies back to back (pipelined answers)."""
    return b"".join(map(get_encoder(proto), values))

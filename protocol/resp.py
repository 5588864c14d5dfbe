"""RESP wire format for client connections: request readers and reply encoder.

Sans-IO: nothing here touches a socket or an event loop. The connection shell
feeds the bytes it received and asks for complete commands, and turns reply
values into bytes to write.

Request readers
---------------
protocol/request.py reads what clients send: ``PyReader`` (pure Python, the
reference) and, when the extension is built, its compiled twin ``CReader``
(protocol/request_c.pyx). ``Reader`` is the one a connection uses: the
compiled one unless the pure build runs (``DISQUETTE_NO_EXTENSIONS=1``,
protocol/build.py); ``READER`` names it for INFO (``resp_parser``).

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

from mypy_extensions import mypyc_attr

from protocol.build import EXTENSIONS
from protocol.request import (
    DEFAULT_MAX_BULK_LEN, DEFAULT_MAX_MULTIBULK_LEN, DEFAULT_MAX_QUERY_BUFFER, ProtocolError,
    PyReader, split_args, string2ll,
)

if EXTENSIONS:
    try:
        from protocol.request_c import CReader
    except ImportError:     # not built (a source checkout without a compiler step)
        CReader = None
else:
    CReader = None

Reader = CReader if CReader is not None else PyReader
READER = "c" if CReader is not None else "python"

__all__ = [
    "ProtocolError",
    "PyReader",
    "CReader",
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
# Reply encoder
# ---------------------------------------------------------------------------

# A short flat list of bytes ([queue, id, body]) is encoded by one %-format:
#   canonical(r) == b"*3\r\n$%d\r\n%b\r\n$%d..." % (len(a0), a0, len(a1), ...)
# Any element that is not bytes-like makes the format raise TypeError.
def _make_canonical(n: int) -> Callable[[list], bytes]:
    names = ", ".join(f"a{i}" for i in range(n))
    values = ", ".join(f"len(a{i}), a{i}" for i in range(n))
    src = f"def canonical(r, fmt=fmt, len=len):\n    {names}, = r\n    return fmt % ({values})\n"
    namespace: dict[str, Any] = {"fmt": b"*%d\r\n" % n + b"$%d\r\n%b\r\n" * n}
    exec(src, namespace)
    return namespace["canonical"]


_CANONICAL_MAX = 16
_CANONICAL = {n: _make_canonical(n) for n in range(1, _CANONICAL_MAX + 1)}


@mypyc_attr(native_class=False)   # mypyc: stays a Python class (a builtin's subclass)
class Status(str):
    """A status reply: ``Status("OK")`` -> ``+OK``."""

    __slots__ = ()


@mypyc_attr(native_class=False)   # mypyc: stays a Python class (a builtin's subclass)
class Error(str):
    """An error reply, text without the ``-``: ``Error("ERR x")`` -> ``-ERR x``."""

    __slots__ = ()


@mypyc_attr(native_class=False)   # mypyc: stays a Python class (a builtin's subclass)
class Map(dict):
    """RESP3 map (``%``); under RESP2 a flat array k1 v1 k2 v2 ..."""

    __slots__ = ()


@mypyc_attr(native_class=False)   # mypyc: stays a Python class (a builtin's subclass)
class Verbatim(str):
    """RESP3 verbatim text (``=``, format ``txt``); under RESP2 a bulk string."""

    __slots__ = ()


@mypyc_attr(native_class=False)   # mypyc: stays a Python class (a builtin's subclass)
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


@mypyc_attr(native_class=False)   # mypyc: stays a Python class (its own __new__)
class _NullArray:
    """Type of NULL_ARRAY: the null array, RESP2 ``*-1``, RESP3 ``_``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"

    def __reduce__(self):
        return "NULL_ARRAY"


NULL_ARRAY = _NullArray()   # the only one (copies and pickles too: __reduce__)
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
        # %-format by the generated functions above. The
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

# compiled: mypyc (setup.py builds each module whose first line this is)
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

from typing import Any, Callable, Final

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

_I64_MIN: Final = -(1 << 63)
_I64_LIMIT: Final = 1 << 63


def _line(text: str) -> bytes:
    """Status/error text as one line: CR and LF become spaces (as in Redis)."""
    if "\r" in text or "\n" in text:
        text = text.replace("\r", " ").replace("\n", " ")
    return text.encode()


# What a value is encoded as: its type's kind (a subclass takes the kind of its
# nearest listed base, found through its MRO at each value: an IntEnum is an
# int, a str subclass a bulk string; no reply of ours is one).
K_BYTES: Final = 0
K_STR: Final = 1
K_INT: Final = 2
K_BOOL: Final = 3
K_FLOAT: Final = 4
K_NONE: Final = 5
K_ARRAY: Final = 6
K_SET: Final = 7
K_MAP: Final = 8
K_STATUS: Final = 9
K_ERROR: Final = 10
K_VERBATIM: Final = 11
K_PUSH: Final = 12
K_RAW: Final = 13
K_NULL_ARRAY: Final = 14
K_MEMORYVIEW: Final = 15

_KIND: Final[dict[type, int]] = {
    bytes: K_BYTES, bytearray: K_BYTES, memoryview: K_MEMORYVIEW, str: K_STR,
    int: K_INT, bool: K_BOOL, float: K_FLOAT, type(None): K_NONE,
    list: K_ARRAY, tuple: K_ARRAY, set: K_SET, frozenset: K_SET, dict: K_MAP, Map: K_MAP,
    Status: K_STATUS, Error: K_ERROR, ProtocolError: K_ERROR, Verbatim: K_VERBATIM,
    Push: K_PUSH, Raw: K_RAW, _NullArray: K_NULL_ARRAY,
}

# "$<n>\r\n" for the lengths of short bulk strings (ids, queue names, small
# bodies): a tuple index instead of a %-format per element.
_BULK_HEADS: Final = tuple(b"$%d\r\n" % n for n in range(1024))
_CRLF: Final = b"\r\n"


def _kind(t: type) -> int:
    k = _KIND.get(t)
    if k is None:
        for base in t.__mro__:
            k = _KIND.get(base)
            if k is not None:
                return k
        raise TypeError(f"cannot encode a {t.__name__} as RESP")
    return k


def _bulk_into(out: list, v: bytes) -> None:
    n = len(v)
    out.append(_BULK_HEADS[n] if n < 1024 else b"$%d\r\n" % n)
    out.append(v)
    out.append(_CRLF)


# "*<n>\r\n" for the lengths of short arrays (GETJOB's replies...), as above.
_ARRAY_HEADS: Final = tuple(b"*%d\r\n" % n for n in range(1024))


def _list_into(out: list, v: list, resp3: bool) -> None:
    """_array_into for a list (the usual array): a C loop over its items and
    its head from a table."""
    n = len(v)
    out.append(_ARRAY_HEADS[n] if n < 1024 else b"*%d\r\n" % n)
    for x in v:
        if type(x) is bytes:
            n = len(x)
            out.append(_BULK_HEADS[n] if n < 1024 else b"$%d\r\n" % n)
            out.append(x)
            out.append(_CRLF)
        elif type(x) is list:       # GETJOB's [[queue, id, body], ...]
            _list_into(out, x, resp3)
        else:
            _into(out, x, resp3)


def _array_into(out: list, v: Any, head: bytes, resp3: bool) -> None:
    out.append(b"%b%d\r\n" % (head, len(v)))
    for x in v:
        if type(x) is bytes:        # the common element: no kind lookup, no call
            n = len(x)
            out.append(_BULK_HEADS[n] if n < 1024 else b"$%d\r\n" % n)
            out.append(x)
            out.append(_CRLF)
        elif type(x) is list:
            _list_into(out, x, resp3)
        else:
            _into(out, x, resp3)


def _into(out: list, v: Any, resp3: bool) -> None:
    """Append the RESP encoding of ``v`` to ``out`` (a list of bytes to join)."""
    k = _kind(type(v))
    if k == K_BYTES:
        _bulk_into(out, bytes(v) if type(v) is not bytes else v)
    elif k == K_ARRAY:
        if type(v) is list:
            _list_into(out, v, resp3)
        else:
            _array_into(out, v, b"*", resp3)
    elif k == K_INT:
        if _I64_MIN <= v < _I64_LIMIT:
            out.append(b":%d\r\n" % v)
        elif resp3:             # outside 64 bits: what Redis's addReplyBigNum does
            out.append(b"(%d\r\n" % v)
        else:
            _bulk_into(out, b"%d" % v)
    elif k == K_STATUS:
        out.append(b"+%b\r\n" % _line(v))
    elif k == K_ERROR:
        out.append(b"-%b\r\n" % _line(str(v)))
    elif k == K_NONE:
        out.append(b"_\r\n" if resp3 else b"$-1\r\n")
    elif k == K_NULL_ARRAY:
        out.append(b"_\r\n" if resp3 else b"*-1\r\n")
    elif k == K_STR:
        _bulk_into(out, v.encode())
    elif k == K_MAP:
        out.append(b"%%%d\r\n" % len(v) if resp3 else b"*%d\r\n" % (2 * len(v)))
        for key, x in v.items():
            _into(out, key, resp3)
            _into(out, x, resp3)
    elif k == K_BOOL:
        if resp3:
            out.append(b"#t\r\n" if v else b"#f\r\n")
        else:
            out.append(b":1\r\n" if v else b":0\r\n")
    elif k == K_FLOAT:
        if resp3:
            out.append(b",%b\r\n" % repr(v).encode())
        else:
            _bulk_into(out, repr(v).encode())
    elif k == K_SET:
        _array_into(out, v, b"~" if resp3 else b"*", resp3)
    elif k == K_PUSH:
        _array_into(out, v, b">" if resp3 else b"*", resp3)
    elif k == K_VERBATIM:
        b = v.encode()
        if resp3:
            out.append(b"=%d\r\ntxt:%b\r\n" % (len(b) + 4, b))
        else:
            _bulk_into(out, b)
    elif k == K_RAW:
        out.append(v.data)
    else:                       # K_MEMORYVIEW
        _bulk_into(out, v.tobytes())


_STATUS: Final = Status     # (mypyc: a static, not a module dict lookup)


def _encode(v: Any, resp3: bool) -> bytes:
    t = type(v)
    # The replies of the hot commands first: ADDJOB's id, a bulk string, an
    # integer; the rest (GETJOB's [[queue, id, body]]...) into one list joined.
    if t is _STATUS:
        return b"+%b\r\n" % _line(v)
    if t is bytes:
        n = len(v)
        return b"%b%b\r\n" % (_BULK_HEADS[n], v) if n < 1024 else b"$%d\r\n%b\r\n" % (n, v)
    if t is int and _I64_MIN <= v < _I64_LIMIT:
        return b":%d\r\n" % v
    out: list = []
    if t is list:
        _list_into(out, v, resp3)
    else:
        _into(out, v, resp3)
    return b"".join(out)


def encode_resp2(value: Any) -> bytes:
    """``encode(value, 2)``, as one function for a connection to keep."""
    return _encode(value, False)


def encode_resp3(value: Any) -> bytes:
    """``encode(value, 3)``, as one function for a connection to keep."""
    return _encode(value, True)


def get_encoder(proto: int = 2) -> Callable[[Any], bytes]:
    """The encoder function for a protocol version (2 or 3), for a connection to keep."""
    if proto == 2:
        return encode_resp2
    if proto == 3:
        return encode_resp3
    raise ValueError(f"unsupported protocol version {proto!r}")


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
    if proto != 2 and proto != 3:
        raise ValueError(f"unsupported protocol version {proto!r}")
    return _encode(value, proto == 3)


def encode_many(values, proto: int = 2) -> bytes:
    """Encode several replies back to back (pipelined answers)."""
    return b"".join(map(get_encoder(proto), values))

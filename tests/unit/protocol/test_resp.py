"""protocol/resp.py: the reply encoder, byte for byte, and redis-py's parsers
(pure and hiredis) reading what it writes."""

from __future__ import annotations

import enum
import socket

import pytest
from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser
from redis._parsers.encoders import Encoder

from protocol import request as resp_request, resp
from protocol.resp import (
    NULL_ARRAY,
    OK,
    Error,
    Map,
    ProtocolError,
    Push,
    Raw,
    Status,
    Verbatim,
    encode,
    encode_many,
    get_encoder,
)


# ---------------------------------------------------------------------------
# encoder: exact bytes
# ---------------------------------------------------------------------------


class Color(enum.IntEnum):
    RED = 7


class MyStatus(Status):
    pass


ENCODE_CASES = [
    # value, RESP2, RESP3
    (b"abc", b"$3\r\nabc\r\n", b"$3\r\nabc\r\n"),
    (b"", b"$0\r\n\r\n", b"$0\r\n\r\n"),
    (b"a\r\nb", b"$4\r\na\r\nb\r\n", b"$4\r\na\r\nb\r\n"),
    (bytearray(b"xy"), b"$2\r\nxy\r\n", b"$2\r\nxy\r\n"),
    (memoryview(b"xyz"), b"$3\r\nxyz\r\n", b"$3\r\nxyz\r\n"),
    ("é", b"$2\r\n\xc3\xa9\r\n", b"$2\r\n\xc3\xa9\r\n"),
    (0, b":0\r\n", b":0\r\n"),
    (-42, b":-42\r\n", b":-42\r\n"),
    (2**63 - 1, b":9223372036854775807\r\n", b":9223372036854775807\r\n"),
    (2**63, b"$19\r\n9223372036854775808\r\n", b"(9223372036854775808\r\n"),
    (True, b":1\r\n", b"#t\r\n"),
    (False, b":0\r\n", b"#f\r\n"),
    (Color.RED, b":7\r\n", b":7\r\n"),
    (1.5, b"$3\r\n1.5\r\n", b",1.5\r\n"),
    (float("inf"), b"$3\r\ninf\r\n", b",inf\r\n"),
    (float("-inf"), b"$4\r\n-inf\r\n", b",-inf\r\n"),
    (None, b"$-1\r\n", b"_\r\n"),
    (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
    ([], b"*0\r\n", b"*0\r\n"),
    ([b"q", b"id", b"body"], b"*3\r\n$1\r\nq\r\n$2\r\nid\r\n$4\r\nbody\r\n",
     b"*3\r\n$1\r\nq\r\n$2\r\nid\r\n$4\r\nbody\r\n"),
    ((1, [b"a", None]), b"*2\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n", b"*2\r\n:1\r\n*2\r\n$1\r\na\r\n_\r\n"),
    (OK, b"+OK\r\n", b"+OK\r\n"),
    (MyStatus("yes"), b"+yes\r\n", b"+yes\r\n"),
    (Status("a\r\nb"), b"+a  b\r\n", b"+a  b\r\n"),
    (Error("ERR unknown command 'x'"), b"-ERR unknown command 'x'\r\n", b"-ERR unknown command 'x'\r\n"),
    (Error("ERR bad\nline"), b"-ERR bad line\r\n", b"-ERR bad line\r\n"),
    (ProtocolError(resp_request.ERR_BULK_LEN), b"-ERR Protocol error: invalid bulk length\r\n",
     b"-ERR Protocol error: invalid bulk length\r\n"),
    (Map({b"server": b"disque", b"proto": 3}),
     b"*4\r\n$6\r\nserver\r\n$6\r\ndisque\r\n$5\r\nproto\r\n:3\r\n",
     b"%2\r\n$6\r\nserver\r\n$6\r\ndisque\r\n$5\r\nproto\r\n:3\r\n"),
    ({"a": [1]}, b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", b"%1\r\n$1\r\na\r\n*1\r\n:1\r\n"),
    (Verbatim("# Server\r\n"), b"$10\r\n# Server\r\n\r\n", b"=14\r\ntxt:# Server\r\n\r\n"),
    (Push([b"message", b"c", b"hi"]), b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n",
     b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n"),
    (frozenset([b"a"]), b"*1\r\n$1\r\na\r\n", b"~1\r\n$1\r\na\r\n"),
    (Raw(b"+precomputed\r\n"), b"+precomputed\r\n", b"+precomputed\r\n"),
    ([Raw(b":1\r\n"), Status("x")], b"*2\r\n:1\r\n+x\r\n", b"*2\r\n:1\r\n+x\r\n"),
]


@pytest.mark.parametrize("value, r2, r3", ENCODE_CASES)
def test_encode_exact(value, r2, r3):
    assert encode(value) == r2
    assert encode(value, 2) == r2
    assert encode(value, 3) == r3
    assert get_encoder(2)(value) == r2
    assert get_encoder(3)(value) == r3


def test_encode_many_and_errors():
    assert encode_many([OK, 1, None], 2) == b"+OK\r\n:1\r\n$-1\r\n"
    assert encode_many([OK, 1, None], 3) == b"+OK\r\n:1\r\n_\r\n"
    assert encode_many([]) == b""
    with pytest.raises(ValueError):
        encode(1, 4)
    with pytest.raises(TypeError):
        encode(object())
    with pytest.raises(TypeError):
        encode([b"ok", object()], 3)
    assert repr(NULL_ARRAY) == "NULL_ARRAY"
    assert resp.ENCODED_OK == encode(OK)
    assert resp.ENCODED_NULL[3] == encode(None, 3)


# ---------------------------------------------------------------------------
# encoder: redis-py's parsers read what we write
# ---------------------------------------------------------------------------


class _Conn:
    """The few attributes redis-py parsers read from a connection."""

    def __init__(self, sock):
        self._sock = sock
        self.socket_timeout = 5
        self.encoder = Encoder("utf-8", "strict", False)


def redis_py_parse(parser_cls, data: bytes, count: int = 1, push=False):
    a, b = socket.socketpair()
    try:
        a.sendall(data)
        parser = parser_cls(socket_read_size=65536)
        parser.on_connect(_Conn(b))
        try:
            kwargs = {"push_request": True} if push else {}
            return [parser.read_response(**kwargs) for _ in range(count)]
        finally:
            parser.on_disconnect()
    finally:
        a.close()
        b.close()


PARSERS = {2: [_RESP2Parser, _HiredisParser], 3: [_RESP3Parser, _HiredisParser]}

ROUND_TRIP = [
    # value, decoded by RESP2 parsers, decoded by RESP3 parsers
    (b"bin\r\n\x00", b"bin\r\n\x00", b"bin\r\n\x00"),
    ("text", b"text", b"text"),
    (12, 12, 12),
    (-(2**63), -(2**63), -(2**63)),
    (True, 1, True),
    (2.5, b"2.5", 2.5),
    (None, None, None),
    (NULL_ARRAY, None, None),
    (OK, b"OK", b"OK"),
    ([b"q", b"D-1", b"body", b"nacks", 0], [b"q", b"D-1", b"body", b"nacks", 0],
     [b"q", b"D-1", b"body", b"nacks", 0]),
    ([[b"a", [None, 1]], []], [[b"a", [None, 1]], []], [[b"a", [None, 1]], []]),
    (Map({b"proto": 3, b"modules": []}), [b"proto", 3, b"modules", []], {b"proto": 3, b"modules": []}),
    (Verbatim("info"), b"info", b"info"),
]


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("value, d2, d3", ROUND_TRIP)
def test_redis_py_parsers_decode(proto, value, d2, d3):
    expected = d2 if proto == 2 else d3
    data = encode(value, proto) + encode(b"sentinel", proto)
    for parser_cls in PARSERS[proto]:
        got = redis_py_parse(parser_cls, data, count=2)
        assert got == [expected, b"sentinel"], parser_cls.__name__


@pytest.mark.parametrize("proto", [2, 3])
def test_redis_py_parsers_decode_errors_and_push(proto):
    for parser_cls in PARSERS[proto]:
        err, = redis_py_parse(parser_cls, encode(Error("ERR unknown command 'x'"), proto))
        assert isinstance(err, Exception) and str(err) == "unknown command 'x'"
    for parser_cls in PARSERS[proto]:
        got, = redis_py_parse(parser_cls, encode(Push([b"message", b"ch", b"hi"]), proto), push=proto == 3)
        assert list(got) == [b"message", b"ch", b"hi"]

"""protocol/request.py and request_c.pyx: the request readers (PyReader == CReader).

Reader tests run every input through both readers and require the same
*trace*: after each feed, the commands returned and the error raised (if any).
Comparing traces, not just final results, also checks that errors appear at the
same moment ("$99999999999" must fail before its body arrives).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis._parsers.encoders import Encoder

from protocol import request as resp_request
from protocol.request_c import CReader  # built by `make venv`: a missing build fails here
from protocol.resp import ProtocolError, PyReader, split_args, string2ll

READERS = [PyReader, CReader]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def trace(reader_cls, chunks, batch=False, **limits):
    """Feed chunks one by one, draining gets() after each (commands() with
    ``batch``: a read's commands in one call, until it returns none).

    Returns [(chunk index, [argv, ...]), ...] and, last, ("error", text) if a
    ProtocolError was raised (feeding stops there).
    """
    r = reader_cls(**limits)
    out = []
    for i, chunk in enumerate(chunks):
        got = []
        try:
            r.feed(chunk)
            if batch:
                while cmds := r.commands():
                    got += cmds
            else:
                while (argv := r.gets()) is not False:
                    got.append(argv)
        except ProtocolError as e:
            out.append((i, got))
            out.append(("error", str(e)))
            return out
        out.append((i, got))
    out.append(("pending", r.pending()))
    return out


def both(chunks, **limits):
    """The trace both readers give, command by command and a read's commands
    at once; fails if any two differ."""
    a = trace(PyReader, chunks, **limits)
    b = trace(CReader, chunks, **limits)
    assert a == b, f"PyReader {a!r} != CReader {b!r}"
    for cls in READERS:
        batched = trace(cls, chunks, batch=True, **limits)
        assert batched == a, f"{cls.__name__}.commands() {batched!r} != gets() {a!r}"
    return a


def commands(t):
    """All commands of a trace, flattened."""
    return [argv for item in t if isinstance(item[0], int) for argv in item[1]]


def error(t):
    return t[-1][1] if t[-1][0] == "error" else None


def parse(data: bytes, **limits):
    """(commands, error text or None) for data fed at once, checked on both readers."""
    t = both([data], **limits)
    return commands(t), error(t)


def multibulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def splits(data: bytes):
    """Every two-piece split and the byte-by-byte feed."""
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]
    yield [data[i:i + 1] for i in range(len(data))]


# ---------------------------------------------------------------------------
# multibulk requests
# ---------------------------------------------------------------------------

BATCH = (
    multibulk(b"ADDJOB", b"queue", b"body", b"0")
    + multibulk(b"GETJOB", b"FROM", b"queue")
    + b"*0\r\n*-1\r\n"
    + multibulk(b"SET", b"", b"bin\r\n\x00\xff\r\n")
    + b"PING\r\n\r\n  \r\nECHO \"a b\"\n"
    + multibulk(b"X" * 300)
)
BATCH_COMMANDS = [
    [b"ADDJOB", b"queue", b"body", b"0"],
    [b"GETJOB", b"FROM", b"queue"],
    [b"SET", b"", b"bin\r\n\x00\xff\r\n"],
    [b"PING"],
    [b"ECHO", b"a b"],
    [b"X" * 300],
]


def test_batch_at_once():
    assert parse(BATCH) == (BATCH_COMMANDS, None)


def test_batch_every_split_point_and_byte_by_byte():
    for chunks in splits(BATCH):
        t = both(chunks)
        assert error(t) is None
        assert commands(t) == BATCH_COMMANDS
        assert t[-1] == ("pending", 0)


def test_command_returned_as_soon_as_complete():
    data = multibulk(b"PING")
    t = both([data[:-1], data[-1:]])
    assert t[:2] == [(0, []), (1, [[b"PING"]])]


def test_zero_length_and_binary_bulks():
    body = b"\r\n$3\r\n*1\r\n\x00\r"
    assert parse(multibulk(b"", body, b"")) == ([[b"", body, b""]], None)


def test_empty_and_null_multibulk_are_skipped():
    assert parse(b"*0\r\n*-1\r\n*-5\r\n*-9223372036854775808\r\n" + multibulk(b"A")) == ([[b"A"]], None)


@pytest.mark.parametrize("data, text", [
    (b"*x\r\n", resp_request.ERR_MBULK_LEN),
    (b"*\r\n", resp_request.ERR_MBULK_LEN),
    (b"*01\r\n", resp_request.ERR_MBULK_LEN),
    (b"*+1\r\n", resp_request.ERR_MBULK_LEN),
    (b"* 1\r\n", resp_request.ERR_MBULK_LEN),
    (b"*-0\r\n", resp_request.ERR_MBULK_LEN),
    (b"*-\r\n", resp_request.ERR_MBULK_LEN),
    (b"*99999999999\r\n", resp_request.ERR_MBULK_LEN),
    (b"*1048577\r\n", resp_request.ERR_MBULK_LEN),
    (b"*-9223372036854775809\r\n", resp_request.ERR_MBULK_LEN),
    (b"*99999999999999999999999\r\n", resp_request.ERR_MBULK_LEN),
    (b"*1\rX$1\r\na\r\n", resp_request.ERR_MBULK_LEN),   # CR must be followed by LF
    (b"*1\x00\r\n", resp_request.ERR_MBULK_LEN),
    (b"*1\r\n$99999999999\r\n", resp_request.ERR_BULK_LEN),
    (b"*1\r\n$-1\r\n", resp_request.ERR_BULK_LEN),
    (b"*1\r\n$-5\r\n", resp_request.ERR_BULK_LEN),
    (b"*1\r\n$x\r\n", resp_request.ERR_BULK_LEN),
    (b"*1\r\n$\r\n", resp_request.ERR_BULK_LEN),
    (b"*1\r\n$03\r\nabc\r\n", resp_request.ERR_BULK_LEN),
    (b"*1\r\n$3\rXabc\r\n", resp_request.ERR_BULK_LEN),
    (b"*1\r\n$536870913\r\n", resp_request.ERR_BULK_LEN),    # > 512 MB default
    (b"*1\r\n+OK\r\n", "ERR Protocol error: expected '$', got '+'"),
    (b"*1\r\n:1\r\n", "ERR Protocol error: expected '$', got ':'"),
    (b"*2\r\n$1\r\na\r\n*1\r\n$1\r\nb\r\n", "ERR Protocol error: expected '$', got '*'"),
    (b"*1\r\n\r\n", "ERR Protocol error: expected '$', got ' '"),
    (b"*1\r\n-ERR\r\n", "ERR Protocol error: expected '$', got '-'"),
    (b"*1\r\n%1\r\n$1\r\na\r\n$1\r\nb\r\n", "ERR Protocol error: expected '$', got '%'"),
    (b"*1\r\n$3\r\nfooXY", resp_request.ERR_BULK_CRLF),
    (b"*1\r\n$3\r\nfoo\rX", resp_request.ERR_BULK_CRLF),
    (b"*1\r\n$3\r\nfoo\n\r", resp_request.ERR_BULK_CRLF),
])
def test_malformed_multibulk(data, text):
    for chunks in splits(data):
        assert error(both(chunks)) == text, chunks


def test_huge_lengths_fail_before_the_body():
    # Only the header has arrived: no waiting for 99999999999 bytes.
    t = both([b"*1\r\n", b"$99999999999\r\n"])
    assert t == [(0, []), (1, []), ("error", resp_request.ERR_BULK_LEN)]
    t = both([b"*99999999999\r\n"])
    assert error(t) == resp_request.ERR_MBULK_LEN
    # The same, after complete commands in the same chunk.
    t = both([multibulk(b"A") * 3 + b"*2\r\n$1\r\nx\r\n$99999999999\r\n"])
    assert t == [(0, [[b"A"]] * 3), ("error", resp_request.ERR_BULK_LEN)]


def test_custom_limits():
    lim = dict(max_bulk_len=10, max_multibulk_len=3)
    assert parse(multibulk(b"x" * 10), **lim) == ([[b"x" * 10]], None)
    assert parse(multibulk(b"x" * 11), **lim)[1] == resp_request.ERR_BULK_LEN
    assert parse(multibulk(b"a", b"b", b"c"), **lim) == ([[b"a", b"b", b"c"]], None)
    assert parse(multibulk(b"a", b"b", b"c", b"d"), **lim)[1] == resp_request.ERR_MBULK_LEN
    # A big multibulk count is fine while within the limit: it just waits.
    assert both([b"*1048576\r\n$1\r\na\r\n"])[-1] == ("pending", 17)


def test_too_big_count_strings():
    # No CR within 64 KB (+1) of a header's start is an error, however the
    # bytes arrive; a shorter header line simply waits.
    line = b"1" * (64 * 1024 - 1)  # with the '*' or '$': 64 KB exactly
    assert error(both([b"*" + line])) is None
    assert error(both([b"*" + line + b"1"])) == resp_request.ERR_MBULK_TOO_BIG
    assert error(both([b"*1\r\n$" + line])) is None
    assert error(both([b"*1\r\n$" + line + b"1"])) == resp_request.ERR_BULK_TOO_BIG
    # A CR found in time but with garbage before it: the length is invalid.
    assert error(both([b"*" + line[:100] + b"\r\n"])) == resp_request.ERR_MBULK_LEN
    assert error(both([b"*" + line + b"1\r\n"])) == resp_request.ERR_MBULK_TOO_BIG
    pieces = [b"*1\r\n$"] + [b"1" * 4096] * 17
    assert error(both(pieces)) == resp_request.ERR_BULK_TOO_BIG


def test_large_body_in_small_chunks():
    body = bytes(range(256)) * 4096  # 1 MiB
    data = multibulk(b"ADDJOB", b"q", body) + multibulk(b"PING")
    chunks = [data[i:i + 16384] for i in range(0, len(data), 16384)]
    t = both(chunks)
    assert commands(t) == [[b"ADDJOB", b"q", body], [b"PING"]]
    for r_cls in READERS:  # pending counts the incomplete command's bytes
        r = r_cls()
        r.feed(chunks[0])
        assert r.gets() is False
        r.feed(chunks[1])
        assert r.gets() is False
        assert r.pending() == 2 * 16384


def test_many_arguments_in_small_chunks():
    args = [b"%d" % i for i in range(20000)]
    data = multibulk(*args)
    chunks = [data[i:i + 1000] for i in range(0, len(data), 1000)]
    assert commands(both(chunks)) == [args]


def test_query_buffer_limit():
    lim = dict(max_query_buffer=100)
    # Incomplete data over the limit in one feed.
    assert both([b"*1\r\n$200\r\n" + b"x" * 100], **lim)[-1] == ("error", resp_request.ERR_QUERY_BUFFER)
    # Growing past the limit over several feeds, parsed arguments included.
    chunks = [b"*3\r\n$40\r\n" + b"a" * 40 + b"\r\n", b"$40\r\n" + b"b" * 40, b"\r\n$5\r\n"]
    t = both(chunks, **lim)
    assert t[-1] == ("error", resp_request.ERR_QUERY_BUFFER)
    assert t[-2] == (2, [])
    # Complete commands are consumed, so a long session stays under it.
    t = both([multibulk(b"x" * 50)] * 50, **lim)
    assert error(t) is None and len(commands(t)) == 50
    # Only what is left incomplete counts: a complete command and the start
    # of the next, together over the limit, arrive in one read.
    t = both([multibulk(b"x" * 90) + b"*1\r\n$20\r\n" + b"y" * 15], **lim)
    assert error(t) is None and commands(t) == [[b"x" * 90]]
    # Inline data without a newline counts too.
    assert error(both([b"a" * 60, b"b" * 41], **lim)) == resp_request.ERR_QUERY_BUFFER


def test_reader_stays_failed():
    for r_cls in READERS:
        r = r_cls()
        r.feed(b"*1\r\n+x\r\n")
        with pytest.raises(ProtocolError):
            r.gets()
        with pytest.raises(ProtocolError):
            r.gets()
        with pytest.raises(ProtocolError):
            r.feed(multibulk(b"PING"))
    for r_cls in READERS:
        r = r_cls(max_query_buffer=10)
        r.feed(b"x" * 11)
        with pytest.raises(ProtocolError) as e:
            r.gets()
        assert str(e.value) == resp_request.ERR_QUERY_BUFFER
        with pytest.raises(ProtocolError):
            r.gets()
        with pytest.raises(ProtocolError):
            r.feed(b"PING\r\n")


def test_commands_before_an_error_come_first():
    """commands(): the good commands of a read, then, on the next call, the
    error that followed them (the connection runs them, then replies with it)."""
    for r_cls in READERS:
        r = r_cls()
        r.feed(multibulk(b"PING") + multibulk(b"ECHO", b"x") + b"*1\r\n+x\r\n")
        assert r.commands() == [[b"PING"], [b"ECHO", b"x"]]
        with pytest.raises(ProtocolError) as e:
            r.commands()
        assert str(e.value) == resp_request.err_expected_dollar(ord("+"))
        with pytest.raises(ProtocolError):
            r.commands()


def test_a_repeated_command_name_is_one_object():
    """The compiled reader hands a repeated command name back as the same
    object (the node's dispatch then knows it by identity); the arguments
    after it are always new objects."""
    r = CReader()
    r.feed(multibulk(b"ADDJOB", b"queue", b"a", b"0") * 2 + multibulk(b"addjob", b"queue", b"b", b"0"))
    first, second, third = r.commands()
    assert first[0] is second[0] and first[1] is not second[1]
    assert third[0] == b"addjob" and third[0] is not first[0]


def test_feed_accepts_bytes_like_and_empty():
    data = multibulk(b"PING")
    for r_cls in READERS:
        r = r_cls()
        r.feed(b"")
        r.feed(bytearray(data[:3]))
        r.feed(memoryview(data)[3:])
        assert r.gets() == [b"PING"]
        assert r.gets() is False
        assert r.gets() is False
        assert r.pending() == 0


def test_returned_args_are_bytes():
    for r_cls in READERS:
        r = r_cls()
        r.feed(multibulk(b"A", b"bc") + b"X y\r\n")
        for argv in (r.gets(), r.gets()):
            assert type(argv) is list and all(type(a) is bytes for a in argv)


def test_reply_types_are_not_requests():
    # Reply types (nested arrays, +, :, RESP3 types) a request parser must refuse,
    # and top-level reply types that are inline commands for a server.
    cases = [
        b"*3\r\n+OK\r\n:5\r\n$-1\r\n",
        b"*1\r\n=7\r\ntxt:foo\r\n",
        b"*1\r\n(123\r\n",
        b"*1\r\n,1.5\r\n",
        b"*1\r\n#t\r\n",
        b"*1\r\n_\r\n",
        b"*1\r\n~1\r\n$1\r\na\r\n",
        b">2\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"~2\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"%1\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"+OK\r\n",
        b":1\r\n",
        b"$3\r\nfoo\r\n",
        b"-ERR x\r\n",
        b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n$1\r\na\r\n",
    ]
    for data in cases:
        for chunks in splits(data + multibulk(b"NEXT")):
            both(chunks)


# ---------------------------------------------------------------------------
# inline commands
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("line, argv", [
    (b"PING", [b"PING"]),
    (b"  set  a   b  ", [b"set", b"a", b"b"]),
    (b"\tA\tB", [b"A", b"B"]),
    (b'ECHO "hello world"', [b"ECHO", b"hello world"]),
    (b'ECHO "a\\x41\\x4a\\n\\r\\t\\b\\a\\"\\\\\\q"', [b"ECHO", b"aAJ\n\r\t\b\a\"\\q"]),
    (b'ECHO "\\x4"', [b"ECHO", b"x4"]),
    (b'ECHO "\\xzz"', [b"ECHO", b"xzz"]),
    (b"ECHO 'it''s'", None),
    (b"ECHO 'it\\'s' 'a\\nb'", [b"ECHO", b"it's", b"a\\nb"]),
    (b'ECHO ""', [b"ECHO", b""]),
    (b"ECHO ''", [b"ECHO", b""]),
    (b'ECHO a"b c"d', None),          # closing quote must be followed by a space
    (b'ECHO a"b c" d', [b"ECHO", b"ab c", b"d"]),
    (b'ECHO "abc', None),
    (b"ECHO 'abc", None),
    (b'ECHO "abc\\', None),
    (b"A\x0bB \x0cC", [b"A\x0bB", b"C"]),  # \v and \f: blanks between words, not word ends
    (b"\x0b\x0cA", [b"A"]),
    (b"A\rB", [b"A", b"B"]),
    (b"A\x00B C", [b"A"]),            # a C string: NUL ends it
    (b"\xff\xfe x", [b"\xff\xfe", b"x"]),
    (b'"\xff"', [b"\xff"]),
    (b"A\x1cB", [b"A\x1cB"]),
])
def test_split_args(line, argv):
    assert split_args(line) == argv


@pytest.mark.parametrize("data, cmds, err", [
    (b"PING\r\n", [[b"PING"]], None),
    (b"PING\n", [[b"PING"]], None),
    (b"PING\r\r\n", [[b"PING"]], None),
    (b"\r\n\n  \r\n\t\nPING\r\n", [[b"PING"]], None),
    (b"PING", [], None),
    (b'SET k "v 1"\r\nGET k\r\n', [[b"SET", b"k", b"v 1"], [b"GET", b"k"]], None),
    (b'PING\r\nECHO "x\r\nPING\r\n', [[b"PING"]], resp_request.ERR_UNBALANCED),
    (b"$3\r\nfoo\r\n", [[b"$3"], [b"foo"]], None),
    (b"PING\r\n" + multibulk(b"A") + b"B\r\n", [[b"PING"], [b"A"], [b"B"]], None),
])
def test_inline(data, cmds, err):
    for chunks in splits(data):
        t = both(chunks)
        assert commands(t) == cmds
        assert error(t) == err


def test_inline_too_big():
    line = b"a" * (64 * 1024)
    assert commands(both([line + b"\n"])) == [[line]]
    assert error(both([line])) is None
    assert error(both([line + b"a"])) == resp_request.ERR_INLINE_TOO_BIG
    assert error(both([line + b"a\n"])) == resp_request.ERR_INLINE_TOO_BIG
    assert error(both([b"a" * 30000] * 3)) == resp_request.ERR_INLINE_TOO_BIG


# ---------------------------------------------------------------------------
# string2ll
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("s, v", [
    (b"0", 0), (b"1", 1), (b"-1", -1), (b"123", 123),
    (b"9223372036854775807", 2**63 - 1), (b"-9223372036854775808", -2**63),
    (b"9223372036854775808", None), (b"-9223372036854775809", None),
    (b"", None), (b"-", None), (b"-0", None), (b"01", None), (b"+1", None),
    (b" 1", None), (b"1 ", None), (b"1_0", None), (b"\xd9\xa1", None), (b"00", None),
    (b"1" * 21, None), (b"1e3", None),
])
def test_string2ll(s, v):
    assert string2ll(s) == v


# ---------------------------------------------------------------------------
# property tests: both readers, random inputs, random split points
# ---------------------------------------------------------------------------

args_st = st.lists(st.binary(max_size=40), min_size=1, max_size=6)
# Words that an inline command carries unchanged.
inline_word = st.text(alphabet="abcXYZ019:-_", min_size=1, max_size=8).map(str.encode)


@st.composite
def request_stream(draw):
    """A list of commands, their serialization, and a random way to cut it."""
    cmds, parts = [], []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["multibulk", "multibulk", "inline", "skip"]))
        if kind == "multibulk":
            argv = draw(args_st)
            cmds.append(argv)
            parts.append(multibulk(*argv))
        elif kind == "inline":
            argv = draw(st.lists(inline_word, min_size=1, max_size=4))
            cmds.append(argv)
            parts.append(b" ".join(argv) + draw(st.sampled_from([b"\r\n", b"\n"])))
        else:
            parts.append(draw(st.sampled_from([b"*0\r\n", b"*-1\r\n", b"\r\n", b"\n", b"  \n"])))
    data = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=10)))
    return cmds, data, cut(data, cuts)


def cut(data, cuts):
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_stream())
def test_property_valid_streams_round_trip(stream):
    cmds, data, chunks = stream
    t = both(chunks)
    assert error(t) is None
    assert commands(t) == cmds
    assert t[-1] == ("pending", 0)


# Garbage built from RESP-looking tokens finds far more parser paths than
# uniform random bytes.
TOKENS = [b"*", b"$", b"\r\n", b"\r", b"\n", b"0", b"1", b"2", b"3", b"-", b"-1",
          b"+", b":", b"~", b">", b"%", b"=", b"_", b"#", b",", b"(", b"!",
          b" ", b'"', b"'", b"\\", b"x", b"A", b"\x00", b"\xff", b"99999999999",
          b"*1\r\n", b"*2\r\n", b"$1\r\n", b"$3\r\n", b"$0\r\n", b"foo", b"\r\n\r\n",
          b"PING\r\n", b"txt:"]

garbage_st = st.one_of(
    st.binary(max_size=60),
    st.lists(st.sampled_from(TOKENS), max_size=30).map(b"".join),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage_st, st.lists(st.integers(0, 200), max_size=6), st.sampled_from([None, 5, 40]))
def test_property_garbage_same_in_both_readers(data, cuts, limit):
    cuts = sorted(c for c in cuts if c <= len(data))
    limits = {} if limit is None else dict(max_bulk_len=limit, max_multibulk_len=limit,
                                           max_query_buffer=limit * 3)
    t = both(cut(data, cuts), **limits)
    # Splitting never changes the outcome, only the query buffer limit is about
    # what is buffered at one time.
    if limit is None:
        whole = both([data])
        assert commands(t) == commands(whole)
        assert error(t) == error(whole)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_stream(), garbage_st, st.lists(st.integers(0, 400), max_size=6))
def test_property_valid_then_garbage(stream, garbage, cuts):
    cmds, data, _ = stream
    data += garbage
    t = both(cut(data, sorted(c for c in cuts if c <= len(data))))
    assert commands(t)[:len(cmds)] == cmds


# Integers at the edges of a C int64 and of Redis's string2ll rules: the
# compiled reader parses lengths with C integers, the reference with Python's.
EDGE_NUMBERS = [b"0", b"1", b"-1", b"00", b"-0", b"01", b"+1", b" 1", b"1 ", b"",
                b"-", b"9223372036854775807", b"9223372036854775808",
                b"-9223372036854775808", b"-9223372036854775809",
                b"18446744073709551615", b"18446744073709551616",
                b"99999999999999999999", b"999999999999999999999", b"-99999999999999999999",
                b"4294967296", b"2147483648", b"1048576", b"1048577", b"1\x00", b"\xff"]


@pytest.mark.parametrize("number", EDGE_NUMBERS)
def test_edge_numbers_same_in_both_readers(number):
    top = 2**63 - 1
    for limits in ({}, dict(max_bulk_len=top, max_multibulk_len=top, max_query_buffer=top)):
        both([b"*" + number + b"\r\n$1\r\na\r\n"], **limits)
        both([b"*1\r\n$" + number + b"\r\n"], **limits)
        both([b"*2\r\n$1\r\na\r\n$" + number + b"\r\nxyz\r\n"], **limits)


def test_seeded_hostile_streams_split_at_every_byte():
    """Random hostile streams (valid commands, RESP-looking garbage, huge and
    negative lengths, inline lines with quotes) fed whole, cut at random and,
    for the short ones, at every byte: both readers give the same trace."""
    rng = random.Random(20261125)
    pieces = TOKENS + [b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$1\r\nx\r\n",
                       b"$-5\r\n", b"*-5\r\n", b"$9223372036854775808\r\n",
                       b'SET "a b" \'c\'\r\n', b'"unbalanced\r\n', b"\x00\r\n",
                       b"*1\r\n$5\r\nhello\r\n", b"*1\r\n$5\r\nhelloXY", b"\n\n"]
    for _ in range(3000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        limits = rng.choice([{}, dict(max_bulk_len=8, max_multibulk_len=4,
                                      max_query_buffer=24)])
        both([data], **limits)
        cuts = sorted(rng.randint(0, len(data)) for _ in range(rng.randint(1, 5)))
        both(cut(data, cuts), **limits)
        if len(data) <= 48:
            both([data[i:i + 1] for i in range(len(data))], **limits)


def test_reader_reads_what_clients_send():
    # What redis-py itself writes for commands is what the readers accept.
    from redis.connection import PythonRespSerializer

    packed = PythonRespSerializer(65536, Encoder("utf-8", "strict", False).encode).pack(
        "ADDJOB", "queue", b"\x00body\r\n", 0, "REPLICATE", 1)
    assert parse(b"".join(packed)) == ([[b"ADDJOB", b"queue", b"\x00body\r\n", b"0", b"REPLICATE", b"1"]], None)

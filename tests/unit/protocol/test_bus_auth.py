"""Authenticated bus links, the wire format alone (protocol/bus.py): the
handshake messages, the proofs and keys, and the frame tags a reader checks."""

from __future__ import annotations

import pytest

from protocol import bus as B

ND, NL = b"d" * 32, b"l" * 32
ME = "a" * 40


def frame(n: int = 0) -> bytes:
    return B.encode_frame(B.BusMessage(B.PING, ME, "127.0.0.1", 7711 + n, 17711, 0, [], None))


def signed(frames, key) -> bytes:
    signer = B.FrameSigner(key)
    return b"".join(f + signer.tag(f) for f in frames)


def test_handshake_messages_round_trip():
    for msg in (B.AuthMessage(B.AUTH_HELLO, nonce=ND),
                B.AuthMessage(B.AUTH_PROOF, macs=(b"x" * 32, b"y" * 32)),
                B.AuthMessage(B.AUTH_ACCEPT, index=1, mac=b"z" * 32)):
        r = B.FrameReader()
        data = B.encode_auth(msg)
        r.feed(data[:-1])
        assert r.next_auth() is None                  # incomplete: wait
        r.feed(data[-1:])
        assert r.next_auth() == msg


@pytest.mark.parametrize("body, error", [
    (["disquette-bus-auth", 2, "hello", ND], "unsupported bus authentication version"),
    (["disquette-bus-auth", 1, "hello", b"short"], "malformed"),
    (["disquette-bus-auth", 1, "proof", []], "malformed"),
    (["disquette-bus-auth", 1, "proof", [b"m" * 32] * 5], "malformed"),
    (["disquette-bus-auth", 1, "accept", 9, b"m" * 32], "malformed"),
    (["disquette-bus-auth", 1, "ready?"], "without authenticating"),
    ([1, 1, ME, "", 0, 0, 0, [], None], "without authenticating"),
])
def test_malformed_handshake_messages_are_the_peers_fault(body, error):
    import msgpack

    data = msgpack.packb(body, use_bin_type=True)
    r = B.FrameReader()
    r.feed(len(data).to_bytes(4, "big") + data)
    with pytest.raises(B.BusProtocolError, match=error):
        r.next_auth()
    with pytest.raises(B.BusProtocolError):         # the reader stays broken
        r.next_auth()


def test_a_node_without_authentication_names_the_problem():
    r = B.FrameReader()
    r.feed(B.encode_auth(B.AuthMessage(B.AUTH_HELLO, nonce=ND)))
    with pytest.raises(B.BusProtocolError, match="this node does not"):
        list(r)


def test_proofs_and_keys_depend_on_everything():
    base = B.auth_proof("s", "dialer", ND, NL)
    assert len(base) == 32
    assert base != B.auth_proof("s", "listener", ND, NL)
    assert base != B.auth_proof("t", "dialer", ND, NL)
    assert base != B.auth_proof("s", "dialer", NL, ND)
    assert base != B.auth_proof("s", "dialer", ND, b"m" * 32)
    to_l, to_d = B.session_keys("s", ND, NL)
    assert to_l != to_d
    assert (to_l, to_d) == B.session_keys("s", ND, NL)
    assert to_l not in B.session_keys("s", ND, b"m" * 32)
    assert to_l not in B.session_keys("t", ND, NL)
    assert base not in (to_l, to_d)              # the proof is not a key


def test_signed_frames_are_read_in_order():
    key = B.session_keys("s", ND, NL)[0]
    data = signed([frame(0), frame(1), frame(2)], key)
    r = B.FrameReader()
    r.authenticate(key)
    got = []
    for i in range(0, len(data), 7):               # any split of the stream
        r.feed(data[i:i + 7])
        got += [m.port for m in r]
    assert got == [7711, 7712, 7713]


def test_bytes_buffered_with_the_handshake_are_checked_after_it():
    key = B.session_keys("s", ND, NL)[1]
    r = B.FrameReader()
    r.feed(B.encode_auth(B.AuthMessage(B.AUTH_ACCEPT, index=0, mac=b"m" * 32))
           + signed([frame(0)], key))
    assert r.next_auth().kind == B.AUTH_ACCEPT
    r.authenticate(key)
    assert [m.port for m in r] == [7711]


def _tamper(data: bytes, what: str, key: bytes, other_key: bytes) -> bytes:
    f0, f1 = frame(0), frame(1)
    if what == "replayed":                        # frame 0 again, as frame 1
        return data + data
    if what == "reordered":
        s = B.FrameSigner(key)
        t0, t1 = s.tag(f0), s.tag(f1)
        return f1 + t1 + f0 + t0
    if what == "dropped":                         # frame 1 without frame 0
        s = B.FrameSigner(key)
        s.tag(f0)
        return f1 + s.tag(f1)
    if what == "other link":
        return signed([f0], other_key)
    if what == "flipped body":
        return data[:10] + bytes([data[10] ^ 1]) + data[11:]
    if what == "flipped tag":
        return data[:-1] + bytes([data[-1] ^ 1])
    if what == "no tag":
        return f0 + f1 + b"\0" * 16
    raise AssertionError(what)


@pytest.mark.parametrize("what", ["replayed", "reordered", "dropped", "other link",
                                  "flipped body", "flipped tag", "no tag"])
def test_forged_or_replayed_frames_are_refused(what):
    key = B.session_keys("s", ND, NL)[0]
    other = B.session_keys("s", ND, b"m" * 32)[0]     # same secret, another link
    data = _tamper(signed([frame(0)], key), what, key, other)
    r = B.FrameReader()
    r.authenticate(key)
    r.feed(data)
    delivered = []
    with pytest.raises(B.BusProtocolError, match="fails its authentication tag"):
        for m in r:
            delivered.append(m)
    if what == "replayed":
        assert len(delivered) == 1                    # the original, not the copy
    else:
        assert delivered == []


def test_large_signed_frames_are_checked_too():
    """A frame over 64 KiB is read from a view of the buffer, not a copy: its
    tag is checked all the same."""
    key = B.session_keys("s", ND, NL)[0]
    big = B.encode_frame(B.BusMessage(B.PING, ME, "127.0.0.1", 7711, 17711, 0, [],
                                      b"x" * 100_000))
    data = signed([frame(0), big, frame(2)], key)
    r = B.FrameReader()
    r.authenticate(key)
    r.feed(data)
    assert [m.port for m in r] == [7711, 7711, 7713]
    mid = len(data) // 2                            # inside the big frame's body
    flipped = data[:mid] + bytes([data[mid] ^ 1]) + data[mid + 1:]
    r = B.FrameReader()
    r.authenticate(key)
    r.feed(flipped)
    with pytest.raises(B.BusProtocolError, match="fails its authentication tag"):
        list(r)

"""Every error type, as a user of both clients meets it (real replies from a
real node; LOADING and MISCONF are mapped from redis-py's exceptions)."""

from __future__ import annotations

import time

import pytest
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

import disquette
from disquette import (
    AuthenticationError, BadJobIdError, DisqueConnectionError, DisqueError, LeavingError,
    LoadingError, MaxLenError, NoJobError, NoNodeAvailableError, NoReplicationError,
    OutOfMemoryError, PersistenceError, QueuePausedError, ReplyError, TooLateError,
)
from disquette.errors import reply_error
from tests.harness import WAIT_TIMEOUT, free_port
from tests.sdk.conftest import make_api

KINDS = ["sync", "async"]


@pytest.fixture(params=KINDS)
def api(request, dnode):
    c = make_api(request.param, dnode.addr)
    yield c
    c.close()


def raises(exc_type, fn, *args, **kwargs):
    with pytest.raises(exc_type) as ei:
        fn(*args, **kwargs)
    assert isinstance(ei.value, DisqueError)
    return ei.value


def test_reply_errors(api, dnode):
    e = raises(NoReplicationError, api.add_job, "q", 1, replicate=2)
    assert e.code == "NOREPL" and e.node == dnode.addr
    assert str(e) == "NOREPL Not enough reachable nodes for the requested replication level"
    api.pause("q", "in")
    e = raises(QueuePausedError, api.add_job, "q", 1)
    assert e.message == "PAUSED Queue paused in input, try later"
    api.pause("q", "none")
    api.add_job("q", 1)
    e = raises(MaxLenError, api.add_job, "q", 2, maxlen=1)
    assert e.code == "MAXLEN"
    e = raises(NoJobError, api.working, "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001")
    assert str(e) == "NOJOB Job not known in the context of this node."
    e = raises(BadJobIdError, api.ack_job, "D-good-looking-but-not")
    assert str(e) == "BADID Invalid Job ID format."
    e = raises(ReplyError, api.add_job, "q", 1, retry=0, replicate=2)
    assert type(e) is ReplyError and e.code == "ERR"
    e = raises(ReplyError, api.execute_command, "NOSUCHCOMMAND")
    assert str(e).startswith("ERR unknown command")
    dnode.client().execute_command("CONFIG", "SET", "maxmemory", "1")
    e = raises(OutOfMemoryError, api.add_job, "q", 1)
    assert e.code == "OOM" and str(e).startswith("OOM ")


def test_too_late(api, wait_until):
    jid = api.add_job("q", 1, ttl=2, retry=1)
    api.get_jobs("q", nohang=True)
    assert api.working(jid) == 1
    e = wait_until(lambda: pytest.raises(TooLateError, api.working, jid).value,
                   ignore=pytest.fail.Exception)
    assert e.code == "TOOLATE" and "Half of job TTL already elapsed" in str(e)


@pytest.mark.parametrize("kind", KINDS)
def test_leaving(kind, dnode):
    """-LEAVING on a GETJOB that would block: the client moves on; with no
    other node left it raises LeavingError, and HELLO priorities say why."""
    c = make_api(kind, dnode.addr, retry=Retry(NoBackoff(), 1))
    raw = dnode.client()
    assert raw.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    try:
        e = raises(LeavingError, c.get_jobs, "q", timeout_ms=5000)
        assert e.code == "LEAVING" and e.node == dnode.addr
        assert c.hello().nodes[0].priority == 100
        assert c.get_jobs("q", nohang=True) == []  # NOHANG never blocks: served
    finally:
        raw.execute_command("CLUSTER", "LEAVING", "no")
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_authentication(kind, node_factory):
    n = node_factory(requirepass="s3cret")
    nopass = make_api(kind, n.addr)
    e = raises(AuthenticationError, nopass.qlen, "q")
    assert e.code == "NOAUTH"
    wrong = make_api(kind, n.addr, password="nope")
    raises(AuthenticationError, wrong.qlen, "q")
    right = make_api(kind, f"disque://:s3cret@{n.addr}")
    assert right.qlen("q") == 0
    for c in (nopass, wrong, right):
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_no_node_available(kind):
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    c = make_api(kind, dead, retry=Retry(NoBackoff(), 3))
    t0 = time.monotonic()
    e = raises(NoNodeAvailableError, c.add_job, "q", 1)
    assert isinstance(e, DisqueConnectionError) and e.sent is False and e.node in dead
    assert time.monotonic() - t0 < WAIT_TIMEOUT / 2     # no endless retrying
    c.close()


def test_mapped_from_redis_py():
    """LOADING and MISCONF cannot be provoked cheaply here: check the mapping
    from what redis-py's parser produces for those replies."""
    from redis._parsers.base import BaseParser

    cases = {
        "LOADING Disquette is loading the AOF in memory": LoadingError,
        "MISCONF Errors writing to the AOF file: No space left on device": PersistenceError,
        "NOAUTH Authentication required.": AuthenticationError,
        "WRONGPASS invalid username-password pair": AuthenticationError,
        "OOM command not allowed when used memory > 'maxmemory'.": OutOfMemoryError,
        "LEAVING This node is leaving the cluster": LeavingError,
    }
    for text, cls in cases.items():
        exc = BaseParser.parse_error(text)
        assert isinstance(exc, redis.exceptions.RedisError)
        err = reply_error(exc, "h:1")
        assert type(err) is cls and str(err) == text and err.node == "h:1", text
    assert all(issubclass(getattr(disquette, n), DisqueError) for n in disquette.__all__
               if n.endswith("Error"))

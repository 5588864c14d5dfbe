"""JobList (broker/queue.py) against a plain sorted-list model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.job import ACTIVE, Job
from broker.queue import JobList, Queue


def J(ctime: int, n: int) -> Job:
    """A job with this ctime (queues take real Jobs: a typed field in the compiled build)."""
    return Job(b"job-%d" % n, b"q", b"", ACTIVE, 1, 0, ctime, 0, 0)


# add a new job with a ctime offset from the newest one (mostly increasing), re-add a
# job that was taken out, pop the oldest, remove a queued one, peek.
ops = st.lists(st.one_of(
    st.tuples(st.just("new"), st.integers(-5, 20)),
    st.tuples(st.just("readd"), st.integers(0, 1000)),
    st.tuples(st.just("pop"), st.just(0)),
    st.tuples(st.just("remove"), st.integers(0, 1000)),
    st.tuples(st.just("peek"), st.integers(-6, 6)),
), max_size=300)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_joblist_behaves_like_a_sorted_list(ops):
    jl = JobList()
    queued: list[Job] = []     # the model: the live jobs
    out: list[Job] = []        # jobs taken out, may come back
    last = 1000
    n = 0
    for op, arg in ops:
        if op == "new":
            last += arg
            n += 1
            j = J(last, n)
            jl.add(j)
            queued.append(j)
        elif op == "readd" and out:
            j = out.pop(arg % len(out))
            jl.add(j)
            queued.append(j)
        elif op == "pop":
            j = jl.popleft()
            if not queued:
                assert j is None
                continue
            assert j in queued and j.ctime == min(x.ctime for x in queued)
            queued.remove(j)
            out.append(j)
        elif op == "remove" and queued:
            j = queued.pop(arg % len(queued))
            jl.remove(j)
            out.append(j)
        elif op == "peek":
            q = Queue(b"q", 0)
            q.jobs = jl
            got = q.peek(arg)
            want = sorted(queued, key=lambda x: x.ctime, reverse=arg < 0)[:abs(arg)]
            assert [x.ctime for x in got] == [x.ctime for x in want]
        assert len(jl) == len(queued)
        assert sorted(map(id, jl)) == sorted(map(id, queued))
        assert [x.ctime for x in jl] == sorted(x.ctime for x in queued)
    while queued:
        j = jl.pop(0)
        assert j.ctime == min(x.ctime for x in queued)
        queued.remove(j)
    assert jl.popleft() is None and not jl


def test_dead_entries_are_compacted():
    jl = JobList()
    jobs = [J(i, i) for i in range(5000)]
    for j in jobs:
        jl.add(j)
    for j in jobs[:4000]:
        jl.remove(j)
    assert len(jl) == 1000
    # The run was rebuilt once the dead outnumbered the live by the slack.
    assert len(jl._run) < 5000 and len(jl._dead) <= len(jl) + 1024
    assert [j.ctime for j in jl] == list(range(4000, 5000))
    jl.clear()
    assert len(jl) == 0 and list(jl) == [] and jl.popleft() is None


def test_popped_slots_are_cut_off_in_order():
    """Thousands of jobs in, then out, new ones arriving meanwhile: the popped
    slots at the run's front are cut off (the run never holds more than about
    twice what is still in it), and the jobs come out oldest first."""
    jl = JobList()
    n = 0
    for _ in range(6000):
        jl.add(J(n, n))
        n += 1
    out = []
    for k in range(6000):
        out.append(jl.popleft().ctime)
        if k % 3 == 0:
            jl.add(J(n, n))
            n += 1
        assert len(jl._run) - jl._head == len(jl)
        assert len(jl._run) <= max(2 * len(jl), 1024) + 1024
    rest = [j.ctime for j in jl]
    assert out + rest == list(range(n))
    assert [j.ctime for j in jl.newest_first()] == rest[::-1]
    while jl.popleft() is not None:
        pass
    assert jl._run == [] and jl._head == 0


def test_import_rate_as_disque():
    """Disque's getQueueImportRate: (prev + current count) * 1000 / ms since the
    previous window began (at least 50), rounded up; 0 once the current window
    is more than 5 s old."""
    t0 = 1_000_000
    q = Queue(b"q", t0)
    assert q.import_rate(t0) == 0                   # nothing imported yet
    q.count_imports(4, t0 + 100)                    # same window as the creation
    assert q.import_rate(t0 + 100) == 40            # 4 jobs / 100 ms
    assert q.import_rate(t0 + 10) == 80             # at least 50 ms: 4000 / 50
    assert q.import_rate(t0 + 3000) == 2            # ceil(4000 / 3000)
    assert q.import_rate(t0 + 5000) == 1
    assert q.import_rate(t0 + 5001) == 0            # window began more than 5 s ago
    # A second later a new window begins; the old one is the previous one.
    q.count_imports(2, t0 + 1500)
    assert (q.prev_import_jobs_count, q.current_import_jobs_count) == (4, 2)
    assert q.import_rate(t0 + 2000) == 3            # 6 jobs / 2000 ms
    assert q.import_rate(t0 + 6500) == 1            # ceil(6000 / 6500): windows at t0, t0+1500
    assert q.import_rate(t0 + 6501) == 0

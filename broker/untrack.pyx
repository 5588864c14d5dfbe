# cython: language_level=3
"""Take an object out of the cyclic GC's lists (PyObject_GC_UnTrack).

A node holds millions of Jobs; tracked, every collection of an older generation
walks them all (a pause that grows with the live jobs) and every young
collection walks the ones just created, although a job is freed by reference
counting alone: its one cycle, job <-> timer chunk, is broken when its timer
slot is cleared (broker/timers.py). So the compiled build untracks each Job as
it is made (broker/job.py). Compiled only: the pure build leaves jobs tracked,
which changes nothing but the collector's work.
"""

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void *op)
    int PyObject_IS_GC(object op)


def untrack(obj) -> None:
    """Stop the cyclic GC from walking ``obj`` (it must form no reference cycle
    that only the collector could free)."""
    if PyObject_IS_GC(obj):
        PyObject_GC_UnTrack(<void *>obj)

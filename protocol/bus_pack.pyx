# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The bus bodies' msgpack, written for the compiler: the bytes
``msgpack.Packer(use_bin_type=True).pack`` makes, for the values the bus
carries (None, bools, ints, floats, bytes, str, lists, tuples, dicts).

protocol/bus.py packs a job-layer payload (a BATCH of REPLJOBs: a list of
lists of ids, bodies, ints and holder ids) with this where it is built, and
with msgpack itself in the pure build; msgpack stays the reference:
tests/unit/test_bus_pack.py feeds both the same random and boundary values and
demands the same bytes. A value this does not know (another type, an int
beyond 64 bits, nesting past ``MAX_DEPTH``) raises ``Unsupported`` and the
caller hands the whole payload to msgpack, which packs it or raises its own
error: what goes on the wire never depends on which build runs.

The format is the MessagePack specification's (github.com/msgpack/msgpack,
spec.md), with msgpack-python's choices: the smallest int encoding, positive
ints as unsigned; floats as float 64; bytes as bin 8/16/32; str as UTF-8 in
fixstr/str 8/16/32; lists and tuples as arrays; dicts as maps in their order.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uint8_t, uint64_t


class Unsupported(Exception):
    """A value this packer leaves to msgpack (see the module's docstring)."""


cdef extern from "Python.h":
    bint PyLong_Check(object o)
    bint PyFloat_Check(object o)
    bint PyBytes_Check(object o)
    bint PyByteArray_Check(object o)
    bint PyUnicode_Check(object o)
    bint PyList_Check(object o)
    bint PyList_CheckExact(object o)
    bint PyTuple_Check(object o)
    Py_ssize_t PyList_GET_SIZE(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    void *PyList_GET_ITEM(object o, Py_ssize_t i)
    void *PyTuple_GET_ITEM(object o, Py_ssize_t i)
    bint PyDict_Check(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    unsigned long long PyLong_AsUnsignedLongLong(object o) except? -1
    double PyFloat_AS_DOUBLE(object o)


#: Deeper than this, msgpack packs it (its own limit is 1024).
MAX_DEPTH = 512
cdef int C_MAX_DEPTH = MAX_DEPTH
cdef size_t ITEM_LIMIT = 0xFFFFFFFF     # msgpack's 32-bit lengths
# The buffer kept between calls; one bigger than this (a body of many MB) is
# given back after the call that grew it.
cdef size_t KEEP = 1 << 20


cdef struct Buf:
    char *data
    size_t len
    size_t cap


cdef Buf _buf = Buf(NULL, 0, 0)


cdef int _grow(size_t need) except -1:
    cdef size_t cap = _buf.cap if _buf.cap else 4096
    cdef char *p
    while cap < _buf.len + need:
        cap *= 2
    p = <char *>PyMem_Realloc(_buf.data, cap)
    if p == NULL:
        raise MemoryError()
    _buf.data = p
    _buf.cap = cap
    return 0


cdef inline int _put(const char *src, size_t n) except -1:
    if _buf.len + n > _buf.cap:
        _grow(n)
    memcpy(_buf.data + _buf.len, src, n)
    _buf.len += n
    return 0


cdef inline int _head(uint8_t tag, uint64_t v, int width) except -1:
    """``tag`` then ``v`` big-endian in ``width`` bytes (0, 1, 2, 4 or 8)."""
    cdef unsigned char *p
    if _buf.len + 9 > _buf.cap:
        _grow(9)
    p = <unsigned char *>_buf.data + _buf.len
    p[0] = tag
    if width == 1:
        p[1] = <unsigned char>v
    elif width == 2:
        p[1] = <unsigned char>(v >> 8)
        p[2] = <unsigned char>v
    elif width == 4:
        p[1] = <unsigned char>(v >> 24)
        p[2] = <unsigned char>(v >> 16)
        p[3] = <unsigned char>(v >> 8)
        p[4] = <unsigned char>v
    elif width == 8:
        p[1] = <unsigned char>(v >> 56)
        p[2] = <unsigned char>(v >> 48)
        p[3] = <unsigned char>(v >> 40)
        p[4] = <unsigned char>(v >> 32)
        p[5] = <unsigned char>(v >> 24)
        p[6] = <unsigned char>(v >> 16)
        p[7] = <unsigned char>(v >> 8)
        p[8] = <unsigned char>v
    _buf.len += 1 + width
    return 0


cdef inline int _uint(uint64_t v) except -1:
    if v < 0x80:
        return _head(<uint8_t>v, 0, 0)
    if v < 0x100:
        return _head(0xcc, v, 1)
    if v < 0x10000:
        return _head(0xcd, v, 2)
    if v < 0x100000000:
        return _head(0xce, v, 4)
    return _head(0xcf, v, 8)


cdef inline int _int(int64_t v) except -1:
    # v <= 0 here (a positive int is packed unsigned, as msgpack-python does)
    if v >= -32:
        return _head(<uint8_t>(v & 0xff), 0, 0)
    if v >= -128:
        return _head(0xd0, <uint64_t>v & 0xff, 1)
    if v >= -32768:
        return _head(0xd1, <uint64_t>v & 0xffff, 2)
    if v >= -2147483648:
        return _head(0xd2, <uint64_t>v & 0xffffffff, 4)
    return _head(0xd3, <uint64_t>v, 8)


cdef inline int _sized(size_t n, uint8_t fix, size_t fix_max, uint8_t t8, uint8_t t16,
                       uint8_t t32) except -1:
    """A length head: ``fix | n`` below ``fix_max`` (fix 0: none), then the 8
    (t8 0: none), 16 and 32-bit forms."""
    if n > ITEM_LIMIT:
        raise Unsupported("too large")
    if fix and n < fix_max:
        return _head(<uint8_t>(fix | n), 0, 0)
    if t8 and n < 0x100:
        return _head(t8, n, 1)
    if n < 0x10000:
        return _head(t16, n, 2)
    return _head(t32, n, 4)


cdef int _pack(object o, int depth) except -1:
    cdef int overflow = 0
    cdef long long ll
    cdef Py_ssize_t n, i
    cdef const char *s
    cdef double d
    cdef uint64_t bits
    if depth > C_MAX_DEPTH:
        raise Unsupported("too deep")
    if o is None:
        return _head(0xc0, 0, 0)
    if o is True:
        return _head(0xc3, 0, 0)
    if o is False:
        return _head(0xc2, 0, 0)
    if PyLong_Check(o):
        ll = PyLong_AsLongLongAndOverflow(o, &overflow)
        if overflow == 0:
            if ll > 0:
                return _uint(<uint64_t>ll)
            return _int(ll)
        if overflow > 0 and o <= 0xFFFFFFFFFFFFFFFF:
            return _uint(PyLong_AsUnsignedLongLong(o))
        raise Unsupported("int out of range")
    if PyFloat_Check(o):
        d = PyFloat_AS_DOUBLE(o)
        memcpy(&bits, &d, 8)
        return _head(0xcb, bits, 8)
    if PyBytes_Check(o):
        n = PyBytes_GET_SIZE(o)
        _sized(n, 0, 0, 0xc4, 0xc5, 0xc6)
        return _put(PyBytes_AS_STRING(o), n)
    if PyByteArray_Check(o):
        n = PyByteArray_GET_SIZE(o)
        _sized(n, 0, 0, 0xc4, 0xc5, 0xc6)
        return _put(PyByteArray_AS_STRING(o), n)
    if PyUnicode_Check(o):
        s = PyUnicode_AsUTF8AndSize(o, &n)
        _sized(n, 0xa0, 32, 0xd9, 0xda, 0xdb)
        return _put(s, n)
    if PyList_CheckExact(o):
        n = PyList_GET_SIZE(o)
        _sized(n, 0x90, 16, 0, 0xdc, 0xdd)
        for i in range(n):
            _pack(<object>PyList_GET_ITEM(o, i), depth + 1)
        return 0
    if PyTuple_Check(o):
        n = PyTuple_GET_SIZE(o)
        _sized(n, 0x90, 16, 0, 0xdc, 0xdd)
        for i in range(n):
            _pack(<object>PyTuple_GET_ITEM(o, i), depth + 1)
        return 0
    if PyList_Check(o):
        _sized(len(o), 0x90, 16, 0, 0xdc, 0xdd)
        for item in o:
            _pack(item, depth + 1)
        return 0
    if PyDict_Check(o):
        _sized(len(o), 0x80, 16, 0, 0xde, 0xdf)
        for k, v in o.items():
            _pack(k, depth + 1)
            _pack(v, depth + 1)
        return 0
    raise Unsupported(type(o).__name__)


def pack(bytes prefix, object obj, bint framed=False):
    """``prefix`` followed by ``obj`` packed, as one bytes object; ``framed``:
    led by the 4-byte big-endian length of the rest (a bus frame, protocol/bus.py).
    Raises Unsupported where msgpack must do it (see the module's docstring)."""
    cdef Py_ssize_t body
    _buf.len = 0
    try:
        if framed:
            _put("\0\0\0\0", 4)
        _put(PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix))
        _pack(obj, 0)
        if framed:
            body = _buf.len - 4
            if <size_t>body > ITEM_LIMIT:
                raise Unsupported("frame too large")
            _buf.data[0] = <char>(body >> 24)
            _buf.data[1] = <char>(body >> 16)
            _buf.data[2] = <char>(body >> 8)
            _buf.data[3] = <char>body
        return PyBytes_FromStringAndSize(_buf.data, _buf.len)
    finally:
        _buf.len = 0
        if _buf.cap > KEEP:
            PyMem_Free(_buf.data)
            _buf.data = NULL
            _buf.cap = 0

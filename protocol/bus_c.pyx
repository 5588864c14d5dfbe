# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The bus bodies' msgpack, written for the compiler: the bytes
``msgpack.Packer(use_bin_type=True).pack`` makes and the values
``msgpack.unpackb(raw=False, use_list=True, strict_map_key=False)`` gives, for
the values the bus carries (None, bools, ints, floats, bytes, str, lists,
tuples, dicts).

protocol/bus.py packs and reads its bodies with these where they are built,
and with msgpack itself in the pure build; msgpack stays the reference:
tests/unit/test_bus_c.py feeds both the same random, boundary and broken
values and bodies and demands the same results. What these do not know (a
value of another type, an int beyond 64 bits, nesting past ``MAX_DEPTH``; an
ext type, a truncated or otherwise invalid body) raises ``Unsupported`` (or
the error met on the way) and the caller hands the whole thing to msgpack,
which does it or raises its own error: what goes on the wire, and what is
read from it, never depends on which build runs.

The format is the MessagePack specification's (github.com/msgpack/msgpack,
spec.md), with msgpack-python's choices: the smallest int encoding, positive
ints as unsigned; floats as float 64; bytes as bin 8/16/32; str as UTF-8 in
fixstr/str 8/16/32; lists and tuples as arrays; dicts as maps in their order.
Reading, arrays are lists, str is strict UTF-8, bin is bytes.

One thing ``unpack`` adds: a str of 40 bytes (a node id: the sender of every
frame, the holders every REPLJOB lists) read again is the same str object as
the last time those 40 bytes were read (a small cache), so it is neither
decoded nor hashed again, and compares with its twin by identity.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.string cimport memcmp, memcpy
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t


class Unsupported(Exception):
    """What this module leaves to msgpack (see the module's docstring)."""


cdef extern from "Python.h":
    bint PyLong_Check(object o)
    bint PyFloat_Check(object o)
    bint PyBytes_Check(object o)
    bint PyByteArray_Check(object o)
    bint PyUnicode_Check(object o)
    bint PyList_Check(object o)
    bint PyTuple_Check(object o)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    void *PySequence_Fast_GET_ITEM(object o, Py_ssize_t i)
    bint PyDict_Check(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    unsigned long long PyLong_AsUnsignedLongLong(object o) except? -1
    double PyFloat_AS_DOUBLE(object o)
    bint PyBytes_CheckExact(object o)
    bint PyByteArray_CheckExact(object o)
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)
    object PyLong_FromLong(long v)
    object PyLong_FromLongLong(long long v)
    object PyLong_FromUnsignedLongLong(unsigned long long v)
    object PyFloat_FromDouble(double v)
    object PyList_New(Py_ssize_t n)
    void PyList_SET_ITEM(object o, Py_ssize_t i, object v)
    void Py_INCREF(object o)
    object PyDict_New()
    int PyDict_SetItem(object d, object k, object v) except -1


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
    if PyList_Check(o) or PyTuple_Check(o):
        n = PySequence_Fast_GET_SIZE(o)
        _sized(n, 0x90, 16, 0, 0xdc, 0xdd)
        for i in range(n):
            _pack(<object>PySequence_Fast_GET_ITEM(o, i), depth + 1)
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


# -- reading --------------------------------------------------------------------------
cdef struct Input:
    const unsigned char *p
    Py_ssize_t pos
    Py_ssize_t end


# Node ids read lately: 64 slots, each the 40 bytes and the str made of them,
# found by the bytes' first 8 (ids are random hex: they spread).
cdef enum:
    ID_LEN = 40
    ID_SLOTS = 64
cdef unsigned char _id_keys[ID_SLOTS][ID_LEN]
cdef list _id_strs = [None] * ID_SLOTS


cdef inline uint64_t _be_n(const unsigned char *p, int width) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(width):
        v = (v << 8) | p[i]
    return v


cdef inline const unsigned char *_take(Input *inp, Py_ssize_t n) except NULL:
    """The next ``n`` bytes (their start), or Unsupported past the end."""
    cdef const unsigned char *at
    if n > inp.end - inp.pos:
        raise Unsupported("incomplete")
    at = inp.p + inp.pos
    inp.pos += n
    return at


cdef object _str(Input *inp, Py_ssize_t n):
    cdef const unsigned char *s = _take(inp, n)
    cdef uint64_t first
    cdef int slot
    cdef object found
    if n != ID_LEN:
        return PyUnicode_DecodeUTF8(<const char *>s, n, NULL)
    memcpy(&first, s, 8)
    slot = <int>((first * 0x9E3779B97F4A7C15ULL) >> 58)     # 6 bits: ID_SLOTS
    found = _id_strs[slot]
    if found is not None and memcmp(_id_keys[slot], s, ID_LEN) == 0:
        return found
    found = PyUnicode_DecodeUTF8(<const char *>s, n, NULL)
    memcpy(_id_keys[slot], s, ID_LEN)
    _id_strs[slot] = found
    return found


cdef object _array(Input *inp, Py_ssize_t n, int depth):
    cdef Py_ssize_t i
    cdef object item
    if n > inp.end - inp.pos:       # each item takes a byte at least
        raise Unsupported("incomplete")
    out = PyList_New(n)
    for i in range(n):
        item = _unpack(inp, depth + 1)
        Py_INCREF(item)             # PyList_SET_ITEM steals it
        PyList_SET_ITEM(out, i, item)
    return out


cdef object _map(Input *inp, Py_ssize_t n, int depth):
    cdef Py_ssize_t i
    if n > (inp.end - inp.pos) // 2:
        raise Unsupported("incomplete")
    out = PyDict_New()
    for i in range(n):
        k = _unpack(inp, depth + 1)
        v = _unpack(inp, depth + 1)
        PyDict_SetItem(out, k, v)
    return out


cdef object _unpack(Input *inp, int depth):
    cdef unsigned char b
    cdef const unsigned char *at
    cdef uint64_t u
    cdef double d
    cdef float f
    cdef uint32_t u32
    if depth > C_MAX_DEPTH:
        raise Unsupported("too deep")
    b = _take(inp, 1)[0]
    if b < 0x80:
        return PyLong_FromLong(b)
    if b >= 0xe0:
        return PyLong_FromLong(<long>b - 256)
    if b >= 0xa0 and b <= 0xbf:
        return _str(inp, b & 0x1f)
    if b >= 0x90 and b <= 0x9f:
        return _array(inp, b & 0x0f, depth)
    if b <= 0x8f:
        return _map(inp, b & 0x0f, depth)
    if b == 0xc0:
        return None
    if b == 0xc2:
        return False
    if b == 0xc3:
        return True
    if b >= 0xc4 and b <= 0xc6:         # bin 8, 16, 32
        u = _be_n(_take(inp, 1 << (b - 0xc4)), 1 << (b - 0xc4))
        at = _take(inp, <Py_ssize_t>u)
        return PyBytes_FromStringAndSize(<const char *>at, <Py_ssize_t>u)
    if b == 0xca:
        u32 = <uint32_t>_be_n(_take(inp, 4), 4)
        memcpy(&f, &u32, 4)
        return PyFloat_FromDouble(f)
    if b == 0xcb:
        u = _be_n(_take(inp, 8), 8)
        memcpy(&d, &u, 8)
        return PyFloat_FromDouble(d)
    if b >= 0xcc and b <= 0xcf:         # uint 8, 16, 32, 64
        return PyLong_FromUnsignedLongLong(_be_n(_take(inp, 1 << (b - 0xcc)), 1 << (b - 0xcc)))
    if b == 0xd0:
        return PyLong_FromLong(<signed char>_take(inp, 1)[0])
    if b == 0xd1:
        return PyLong_FromLong(<short>_be_n(_take(inp, 2), 2))
    if b == 0xd2:
        return PyLong_FromLong(<int>_be_n(_take(inp, 4), 4))
    if b == 0xd3:
        return PyLong_FromLongLong(<long long>_be_n(_take(inp, 8), 8))
    if b >= 0xd9 and b <= 0xdb:         # str 8, 16, 32
        return _str(inp, <Py_ssize_t>_be_n(_take(inp, 1 << (b - 0xd9)), 1 << (b - 0xd9)))
    if b == 0xdc or b == 0xdd:          # array 16, 32
        return _array(inp, <Py_ssize_t>_be_n(_take(inp, 2 << (b - 0xdc)), 2 << (b - 0xdc)),
                      depth)
    if b == 0xde or b == 0xdf:          # map 16, 32
        return _map(inp, <Py_ssize_t>_be_n(_take(inp, 2 << (b - 0xde)), 2 << (b - 0xde)), depth)
    raise Unsupported("type 0x%02x" % b)   # ext types, 0xc1


def unpack(object data):
    """The one value ``data`` (bytes or bytearray) holds, all of it. Raises
    Unsupported, or the error met on the way, where msgpack must read it (see
    the module's docstring)."""
    cdef Input inp
    if PyBytes_CheckExact(data):
        inp.p = <const unsigned char *>PyBytes_AS_STRING(data)
        inp.end = PyBytes_GET_SIZE(data)
    elif PyByteArray_CheckExact(data):
        inp.p = <const unsigned char *>PyByteArray_AS_STRING(data)
        inp.end = PyByteArray_GET_SIZE(data)
    else:
        raise Unsupported(type(data).__name__)
    inp.pos = 0
    value = _unpack(&inp, 0)
    if inp.pos != inp.end:
        raise Unsupported("extra data")
    return value

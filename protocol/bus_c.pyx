# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The bus bodies' msgpack, written for the compiler: the bytes
``msgpack.Packer(use_bin_type=True).pack`` makes and the values
``msgpack.unpackb(raw=False, use_list=True, strict_map_key=False)`` gives, for
the values the bus carries (None, bools, ints, floats, bytes, str, lists,
tuples, dicts).

protocol/bus.py's BusCodec packs and reads its bodies with a ``Codec`` where
it is built, and with msgpack itself in the pure build; msgpack stays the
reference: tests/unit/protocol/test_bus_c.py feeds both the same random,
boundary and broken values and bodies and demands the same results. A ``Codec`` handles
exactly the values the bus carries and says so by the two exceptions it
declares:

- ``Unsupported``: what it leaves to msgpack, which does it or raises its own
  error. Packing: a value of another type, an int beyond 64 bits, nesting past
  ``MAX_DEPTH``, a str with no UTF-8 form (a lone surrogate), a body past
  msgpack's 32-bit lengths. Reading: an ext type, nesting past ``MAX_DEPTH``, a
  map key msgpack cannot hash either (an array or a map), input other than
  bytes or bytearray.
- ``InvalidBody``: a body that is no msgpack value, which msgpack refuses too:
  cut short, more bytes after the value, a byte that starts no value (0xc1), a
  str that is not UTF-8.

Any other exception is a bug of this module, and the caller lets it through.
What goes on the wire, and what is read from it, never depends on which build
runs.

The format is the MessagePack specification's (github.com/msgpack/msgpack,
spec.md), with msgpack-python's choices: the smallest int encoding, positive
ints as unsigned; floats as float 64; bytes as bin 8/16/32; str as UTF-8 in
fixstr/str 8/16/32; lists and tuples as arrays; dicts as maps in their order.
Reading, arrays are lists, str is strict UTF-8, bin is bytes.

One thing ``unpack`` adds: a str of 40 bytes (a node id: the sender of every
frame, the holders every REPLJOB lists) read again by the same ``Codec`` is
the same str object as the last time those 40 bytes were read (a small cache
of the Codec's), so it is neither decoded nor hashed again, and compares with
its twin by identity.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from libc.string cimport memcmp, memcpy
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t


class Unsupported(Exception):
    """What a Codec leaves to msgpack (see the module's docstring)."""


class InvalidBody(ValueError):
    """A body that is no msgpack value (see the module's docstring)."""


cdef extern from "Python.h":
    bint PyLong_Check(object o)
    bint PyFloat_Check(object o)
    bint PyBytes_Check(object o)
    bint PyByteArray_Check(object o)
    bint PyUnicode_Check(object o)
    bint PyList_Check(object o)
    bint PyList_CheckExact(object o)
    bint PyDict_CheckExact(object o)
    bint PyTuple_Check(object o)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    void *PySequence_Fast_GET_ITEM(object o, Py_ssize_t i)
    bint PyDict_Check(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    unsigned long long PyLong_AsUnsignedLongLong(object o) except? -1
    double PyFloat_AS_DOUBLE(object o)
    bint PyBytes_CheckExact(object o)
    bint PyByteArray_CheckExact(object o)
    object PyLong_FromLong(long v)
    object PyLong_FromLongLong(long long v)
    object PyLong_FromUnsignedLongLong(unsigned long long v)
    object PyFloat_FromDouble(double v)
    object PyList_New(Py_ssize_t n)
    void PyList_SET_ITEM(object o, Py_ssize_t i, object v)
    void Py_INCREF(object o)
    object PyDict_New()
    int PyDict_SetItem(object d, object k, object v) except -1
    bint PyErr_ExceptionMatches(object exc)
    void PyErr_Clear()
    # Without Cython's error check: _utf8 and _decoded look at NULL themselves.
    const char *_as_utf8 "PyUnicode_AsUTF8AndSize" (object o, Py_ssize_t *size)
    PyObject *_from_utf8 "PyUnicode_DecodeUTF8" (const char *s, Py_ssize_t size,
                                                 const char *errors)


#: Deeper than this, msgpack packs it (its own limit is 1024).
MAX_DEPTH = 512
cdef int C_MAX_DEPTH = MAX_DEPTH
cdef size_t ITEM_LIMIT = 0xFFFFFFFF     # msgpack's 32-bit lengths
# A Codec's buffer, kept between calls; one bigger than this (a body of many
# MB) is given back after the call that grew it.
cdef size_t KEEP = 1 << 20


cdef struct Buf:
    char *data
    size_t len
    size_t cap


cdef int _grow(Buf *b, size_t need) except -1:
    cdef size_t cap = b.cap if b.cap else 4096
    cdef char *p
    while cap < b.len + need:
        cap *= 2
    p = <char *>PyMem_Realloc(b.data, cap)
    if p == NULL:
        raise MemoryError()
    b.data = p
    b.cap = cap
    return 0


cdef inline int _put(Buf *b, const char *src, size_t n) except -1:
    if b.len + n > b.cap:
        _grow(b, n)
    memcpy(b.data + b.len, src, n)
    b.len += n
    return 0


cdef inline int _head(Buf *b, uint8_t tag, uint64_t v, int width) except -1:
    """``tag`` then ``v`` big-endian in ``width`` bytes (0, 1, 2, 4 or 8)."""
    cdef unsigned char *p
    if b.len + 9 > b.cap:
        _grow(b, 9)
    p = <unsigned char *>b.data + b.len
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
    b.len += 1 + width
    return 0


cdef inline int _uint(Buf *b, uint64_t v) except -1:
    if v < 0x80:
        return _head(b, <uint8_t>v, 0, 0)
    if v < 0x100:
        return _head(b, 0xcc, v, 1)
    if v < 0x10000:
        return _head(b, 0xcd, v, 2)
    if v < 0x100000000:
        return _head(b, 0xce, v, 4)
    return _head(b, 0xcf, v, 8)


cdef inline int _int(Buf *b, int64_t v) except -1:
    # v <= 0 here (a positive int is packed unsigned, as msgpack-python does)
    if v >= -32:
        return _head(b, <uint8_t>(v & 0xff), 0, 0)
    if v >= -128:
        return _head(b, 0xd0, <uint64_t>v & 0xff, 1)
    if v >= -32768:
        return _head(b, 0xd1, <uint64_t>v & 0xffff, 2)
    if v >= -2147483648:
        return _head(b, 0xd2, <uint64_t>v & 0xffffffff, 4)
    return _head(b, 0xd3, <uint64_t>v, 8)


cdef inline int _sized(Buf *b, size_t n, uint8_t fix, size_t fix_max, uint8_t t8,
                       uint8_t t16, uint8_t t32) except -1:
    """A length head: ``fix | n`` below ``fix_max`` (fix 0: none), then the 8
    (t8 0: none), 16 and 32-bit forms."""
    if n > ITEM_LIMIT:
        raise Unsupported("too large")
    if fix and n < fix_max:
        return _head(b, <uint8_t>(fix | n), 0, 0)
    if t8 and n < 0x100:
        return _head(b, t8, n, 1)
    if n < 0x10000:
        return _head(b, t16, n, 2)
    return _head(b, t32, n, 4)


cdef int _reraise_as(object caught, object raised, str why) except -1:
    """With the error a C call just set: ``raised(why)`` instead if it is a
    ``caught``, else that error (a check without a try block, whose setup
    every call would pay)."""
    if PyErr_ExceptionMatches(caught):
        PyErr_Clear()
        raise raised(why)
    return -1


cdef inline const char *_utf8(object o, Py_ssize_t *n) except NULL:
    """A str's UTF-8 bytes; a str that has none (a lone surrogate) is left to
    msgpack, which raises its own error for it."""
    cdef const char *s = _as_utf8(o, n)
    if s == NULL:
        _reraise_as(UnicodeEncodeError, Unsupported, "a str without a UTF-8 form")
    return s


cdef int _pack(Buf *b, object o, int depth) except -1:
    cdef int overflow = 0
    cdef long long ll
    cdef Py_ssize_t n, i
    cdef const char *s
    cdef double d
    cdef uint64_t bits
    if depth > C_MAX_DEPTH:
        raise Unsupported("too deep")
    if o is None:
        return _head(b, 0xc0, 0, 0)
    if o is True:
        return _head(b, 0xc3, 0, 0)
    if o is False:
        return _head(b, 0xc2, 0, 0)
    if PyLong_Check(o):
        ll = PyLong_AsLongLongAndOverflow(o, &overflow)
        if overflow == 0:
            if ll > 0:
                return _uint(b, <uint64_t>ll)
            return _int(b, ll)
        if overflow > 0 and o <= 0xFFFFFFFFFFFFFFFF:
            return _uint(b, PyLong_AsUnsignedLongLong(o))
        raise Unsupported("int out of range")
    if PyFloat_Check(o):
        d = PyFloat_AS_DOUBLE(o)
        memcpy(&bits, &d, 8)
        return _head(b, 0xcb, bits, 8)
    if PyBytes_Check(o):
        n = PyBytes_GET_SIZE(o)
        _sized(b, n, 0, 0, 0xc4, 0xc5, 0xc6)
        return _put(b, PyBytes_AS_STRING(o), n)
    if PyByteArray_Check(o):
        n = PyByteArray_GET_SIZE(o)
        _sized(b, n, 0, 0, 0xc4, 0xc5, 0xc6)
        return _put(b, PyByteArray_AS_STRING(o), n)
    if PyUnicode_Check(o):
        s = _utf8(o, &n)
        _sized(b, n, 0xa0, 32, 0xd9, 0xda, 0xdb)
        return _put(b, s, n)
    if PyList_Check(o) or PyTuple_Check(o):
        n = PySequence_Fast_GET_SIZE(o)
        _sized(b, n, 0x90, 16, 0, 0xdc, 0xdd)
        for i in range(n):
            _pack(b, <object>PySequence_Fast_GET_ITEM(o, i), depth + 1)
        return 0
    if PyDict_Check(o):
        _sized(b, len(o), 0x80, 16, 0, 0xde, 0xdf)
        for k, v in o.items():
            _pack(b, k, depth + 1)
            _pack(b, v, depth + 1)
        return 0
    raise Unsupported(type(o).__name__)


# -- reading --------------------------------------------------------------------------
cdef struct Input:
    const unsigned char *p
    Py_ssize_t pos
    Py_ssize_t end


# A Codec's node ids read lately: 64 slots, each the 40 bytes and the str
# made of them, found by the bytes' first 8 (ids are random hex: they spread).
cdef enum:
    ID_LEN = 40
    ID_SLOTS = 64


cdef inline uint64_t _be_n(const unsigned char *p, int width) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(width):
        v = (v << 8) | p[i]
    return v


cdef inline const unsigned char *_take(Input *inp, Py_ssize_t n) except NULL:
    """The next ``n`` bytes (their start), or InvalidBody past the end."""
    cdef const unsigned char *at
    if n > inp.end - inp.pos:
        raise InvalidBody("the body is cut short")
    at = inp.p + inp.pos
    inp.pos += n
    return at


cdef inline object _decoded(const unsigned char *s, Py_ssize_t n):
    cdef PyObject *made = _from_utf8(<const char *>s, n, NULL)
    if made == NULL:
        _reraise_as(UnicodeDecodeError, InvalidBody, "a str that is not UTF-8")
    value = <object>made
    Py_XDECREF(made)            # the cast took a reference of its own
    return value


cdef object _str(Codec c, Input *inp, Py_ssize_t n):
    cdef const unsigned char *s = _take(inp, n)
    cdef uint64_t first
    cdef int slot
    cdef object found
    if n != ID_LEN:
        return _decoded(s, n)
    memcpy(&first, s, 8)
    slot = <int>((first * 0x9E3779B97F4A7C15ULL) >> 58)     # 6 bits: ID_SLOTS
    found = c.id_strs[slot]
    if found is not None and memcmp(c.id_keys[slot], s, ID_LEN) == 0:
        return found
    found = _decoded(s, n)
    memcpy(c.id_keys[slot], s, ID_LEN)
    c.id_strs[slot] = found
    return found


cdef object _array(Codec c, Input *inp, Py_ssize_t n, int depth):
    cdef Py_ssize_t i
    cdef object item
    if n > inp.end - inp.pos:       # each item takes a byte at least
        raise InvalidBody("the body is cut short")
    out = PyList_New(n)
    for i in range(n):
        item = _unpack(c, inp, depth + 1)
        Py_INCREF(item)             # PyList_SET_ITEM steals it
        PyList_SET_ITEM(out, i, item)
    return out


cdef object _map(Codec c, Input *inp, Py_ssize_t n, int depth):
    cdef Py_ssize_t i
    if n > (inp.end - inp.pos) // 2:
        raise InvalidBody("the body is cut short")
    out = PyDict_New()
    for i in range(n):
        k = _unpack(c, inp, depth + 1)
        v = _unpack(c, inp, depth + 1)
        if PyList_CheckExact(k) or PyDict_CheckExact(k):
            raise Unsupported("a map key that is an array or a map")   # msgpack refuses it
        PyDict_SetItem(out, k, v)
    return out


cdef object _unpack(Codec c, Input *inp, int depth):
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
        return _str(c, inp, b & 0x1f)
    if b >= 0x90 and b <= 0x9f:
        return _array(c, inp, b & 0x0f, depth)
    if b <= 0x8f:
        return _map(c, inp, b & 0x0f, depth)
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
        return _str(c, inp, <Py_ssize_t>_be_n(_take(inp, 1 << (b - 0xd9)), 1 << (b - 0xd9)))
    if b == 0xdc or b == 0xdd:          # array 16, 32
        return _array(c, inp, <Py_ssize_t>_be_n(_take(inp, 2 << (b - 0xdc)), 2 << (b - 0xdc)),
                      depth)
    if b == 0xde or b == 0xdf:          # map 16, 32
        return _map(c, inp, <Py_ssize_t>_be_n(_take(inp, 2 << (b - 0xde)), 2 << (b - 0xde)),
                    depth)
    if b == 0xc1:
        raise InvalidBody("0xc1 starts no value")
    raise Unsupported("ext type 0x%02x" % b)    # msgpack reads them (ExtType)


cdef class Codec:
    """The packer and the reader of one protocol/bus.py BusCodec: the buffer
    bodies are packed in, and the node ids it read lately."""

    cdef Buf buf
    cdef unsigned char id_keys[ID_SLOTS][ID_LEN]
    cdef list id_strs

    def __cinit__(self):
        self.buf.data = NULL
        self.buf.len = 0
        self.buf.cap = 0
        self.id_strs = [None] * ID_SLOTS

    def __dealloc__(self):
        PyMem_Free(self.buf.data)

    def pack(self, bytes prefix, object obj, bint framed=False):
        """``prefix`` followed by ``obj`` packed, as one bytes object; ``framed``:
        led by the 4-byte big-endian length of the rest (a bus frame).
        Raises Unsupported where msgpack must do it (see the module's docstring)."""
        cdef Buf *b = &self.buf
        cdef Py_ssize_t body
        b.len = 0
        try:
            if framed:
                _put(b, "\0\0\0\0", 4)
            _put(b, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix))
            _pack(b, obj, 0)
            if framed:
                body = b.len - 4
                if <size_t>body > ITEM_LIMIT:
                    raise Unsupported("frame too large")
                b.data[0] = <char>(body >> 24)
                b.data[1] = <char>(body >> 16)
                b.data[2] = <char>(body >> 8)
                b.data[3] = <char>body
            return PyBytes_FromStringAndSize(b.data, b.len)
        finally:
            b.len = 0
            if b.cap > KEEP:
                PyMem_Free(b.data)
                b.data = NULL
                b.cap = 0

    def unpack(self, object data):
        """The one value ``data`` (bytes or bytearray) holds, all of it. Raises
        Unsupported where msgpack must read it, InvalidBody where no one can
        (see the module's docstring)."""
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
        value = _unpack(self, &inp, 0)
        if inp.pos != inp.end:
            raise InvalidBody("more bytes after the body's value")
        return value

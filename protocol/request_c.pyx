# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The RESP request reader written for the compiler: protocol/request.py's
``PyReader``, step for step, over the read buffer with C pointers.

Same interface, same commands, same errors as the reference (protocol/request.py
says what is read and what is refused; tests/unit/protocol/test_request.py
fuzzes the two against each other). What changes is only how: line ends are found with
``memchr``, lengths are C integers checked the way Redis's ``string2ll`` checks
them, and each argument is copied once, straight from the buffer into its
bytes object. Nothing is re-encoded.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memchr, memcmp

from protocol.request import (
    DEFAULT_MAX_BULK_LEN, DEFAULT_MAX_MULTIBULK_LEN, DEFAULT_MAX_QUERY_BUFFER,
    ERR_BULK_CRLF, ERR_BULK_LEN, ERR_BULK_TOO_BIG, ERR_INLINE_TOO_BIG, ERR_MBULK_LEN,
    ERR_MBULK_TOO_BIG, ERR_QUERY_BUFFER, ERR_UNBALANCED, SCAN, ProtocolError,
    err_expected_dollar, split_args,
)

cdef Py_ssize_t C_SCAN = SCAN
cdef unsigned long long LLONG_MAX_U = 9223372036854775807ULL


cdef inline bint parse_ll(const char *s, Py_ssize_t n, long long *out) noexcept:
    """Redis's string2ll: a strict signed 64-bit decimal (no '+', no leading
    zeros, no spaces, at most 20 characters)."""
    cdef Py_ssize_t i = 0
    cdef unsigned long long v = 0
    cdef unsigned int d
    cdef bint neg = False
    if n <= 0 or n > 20:
        return False
    if n == 1 and s[0] == b'0':
        out[0] = 0
        return True
    if s[0] == b'-':
        neg = True
        i = 1
        if n == 1:
            return False
    if s[i] < b'1' or s[i] > b'9':
        return False
    while i < n:
        d = <unsigned char>s[i] - 48
        if d > 9:
            return False
        if v > (18446744073709551615ULL - d) // 10:
            return False
        v = v * 10 + d
        i += 1
    if neg:
        if v > LLONG_MAX_U + 1:
            return False
        out[0] = <long long>(0ULL - v)
    else:
        if v > LLONG_MAX_U:
            return False
        out[0] = <long long>v
    return True


cdef inline Py_ssize_t find(const char *p, char c, Py_ssize_t pos, Py_ssize_t end) noexcept:
    """buf.find(c, pos, pos + SCAN): the index, or -1."""
    cdef Py_ssize_t stop = pos + C_SCAN
    if stop > end:
        stop = end
    if pos >= stop:
        return -1
    cdef const char *hit = <const char *>memchr(p + pos, c, stop - pos)
    return hit - p if hit != NULL else -1


cdef class CReader:
    """protocol/request.py's PyReader, compiled: see its docstring for the
    buffering (``_buf[_pos:]`` unparsed; an incomplete command kept as parse
    state; a big body's chunks joined once it is complete)."""

    cdef bytes _buf
    cdef Py_ssize_t _pos
    cdef list _argv             # None: between commands
    cdef Py_ssize_t _left       # elements still to read for _argv
    cdef long long _bulk        # length of the body being read, -1: header next
    cdef Py_ssize_t _partial    # bytes of _argv's elements, dropped from _buf
    cdef Py_ssize_t _want       # >0: bytes _buf must hold before parsing resumes
    cdef list _chunks
    cdef Py_ssize_t _chunks_len
    cdef object _error
    # The last command's name: a request naming the same command gets this very
    # object, so the node's dispatch knows it by identity (no hash, no lookup).
    cdef bytes _name
    cdef public long long max_bulk_len
    cdef public long long max_query_buffer
    cdef public long long max_multibulk_len

    def __init__(self, long long max_bulk_len=DEFAULT_MAX_BULK_LEN,
                 long long max_query_buffer=DEFAULT_MAX_QUERY_BUFFER,
                 long long max_multibulk_len=DEFAULT_MAX_MULTIBULK_LEN):
        self.max_bulk_len = max_bulk_len
        self.max_query_buffer = max_query_buffer
        self.max_multibulk_len = max_multibulk_len
        self._buf = b""
        self._pos = 0
        self._argv = None
        self._left = 0
        self._bulk = -1
        self._partial = 0
        self._want = 0
        self._chunks = []
        self._chunks_len = 0
        self._error = None
        self._name = b""

    cpdef Py_ssize_t pending(self):
        """Bytes fed and not yet returned as part of a command."""
        return self._partial + PyBytes_GET_SIZE(self._buf) - self._pos + self._chunks_len

    cdef int _fail(self, str text) except -1:
        self._error = ProtocolError(text)
        raise ProtocolError(text)

    def feed(self, data):
        if self._error is not None:
            raise ProtocolError(str(self._error))
        if type(data) is not bytes:
            data = bytes(data)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        if not n:
            return
        if self._want:  # waiting for a bulk body: collect, join when complete
            self._chunks.append(data)
            self._chunks_len += n
            if PyBytes_GET_SIZE(self._buf) + self._chunks_len >= self._want:
                self._chunks.insert(0, self._buf)
                self._buf = b"".join(self._chunks)
                self._chunks = []
                self._chunks_len = 0
                self._want = 0
            return
        if self._pos >= PyBytes_GET_SIZE(self._buf):
            self._buf = data
        else:
            self._buf = self._buf[self._pos:] + data
        self._pos = 0

    def gets(self):
        """The next command's argv (list of bytes), or False if incomplete.
        Raises ProtocolError on malformed input; the reader then stays failed."""
        return self._next()

    cdef object _next(self):
        """gets(), as a C call: the query buffer limit applies to what is left
        once every complete command was taken."""
        r = self._gets()
        if r is False and self.pending() > self.max_query_buffer:
            self._fail(ERR_QUERY_BUFFER)
        return r

    def commands(self):
        """Every complete command buffered, in order (PyReader.commands): one
        call per read instead of one per command."""
        cdef list out = []
        while True:
            try:
                r = self._next()
            except ProtocolError:
                if out:
                    return out
                raise
            if r is False:
                return out
            out.append(r)

    cdef object _gets(self):
        if self._want or self._error is not None:
            if self._error is not None:
                raise ProtocolError(str(self._error))
            return False
        cdef bytes buf = self._buf
        cdef const char *p = PyBytes_AS_STRING(buf)
        cdef Py_ssize_t pos = self._pos
        cdef Py_ssize_t end = PyBytes_GET_SIZE(buf)
        cdef list argv = self._argv
        cdef Py_ssize_t start, nl, cr, line_end, e
        cdef long long n = 0, blen = 0
        cdef Py_ssize_t left
        cdef bytes item
        while True:
            if argv is None:
                # ---- between commands: a '*' header, or an inline line ----
                start = pos
                if pos >= end:
                    self._buf = b""
                    self._pos = 0
                    return False
                if p[pos] != b'*':  # inline command
                    nl = find(p, b'\n', pos, end)
                    if nl < 0:
                        if end - pos >= C_SCAN:
                            self._fail(ERR_INLINE_TOO_BIG)
                        self._buf = buf[pos:]
                        self._pos = 0
                        return False
                    line_end = nl - 1 if nl > pos and p[nl - 1] == b'\r' else nl
                    args = split_args(buf[pos:line_end])
                    pos = nl + 1
                    if args is None:
                        self._fail(ERR_UNBALANCED)
                    if args:
                        self._pos = pos
                        return args
                    continue  # empty line: skipped
                cr = find(p, b'\r', pos, end)
                if cr < 0 or cr + 1 >= end:  # header line not complete yet
                    if cr < 0 and end - pos >= C_SCAN:
                        self._fail(ERR_MBULK_TOO_BIG)
                    self._buf = buf[pos:]
                    self._pos = 0
                    return False
                if not parse_ll(p + pos + 1, cr - pos - 1, &n):
                    self._fail(ERR_MBULK_LEN)
                if n > self.max_multibulk_len or p[cr + 1] != b'\n':
                    self._fail(ERR_MBULK_LEN)
                pos = cr + 2
                if n <= 0:  # *0 and *-1: nothing to run
                    continue
                argv = []
                left = <Py_ssize_t>n
                blen = -1
            else:
                # ---- resuming a command left incomplete by the last call ----
                start = pos
                left = self._left
                blen = self._bulk
            # ---- the elements: $len\r\n<bytes>\r\n ----
            while left:
                if blen < 0:
                    cr = find(p, b'\r', pos, end)
                    if cr < 0 or cr + 1 >= end:
                        if cr < 0 and end - pos >= C_SCAN:
                            self._fail(ERR_BULK_TOO_BIG)
                        self._suspend(buf, pos, start, argv, left, -1)
                        return False
                    if p[pos] != b'$':
                        self._fail(err_expected_dollar(<unsigned char>p[pos]))
                    if not parse_ll(p + pos + 1, cr - pos - 1, &blen):
                        self._fail(ERR_BULK_LEN)
                    if blen < 0 or blen > self.max_bulk_len or p[cr + 1] != b'\n':
                        self._fail(ERR_BULK_LEN)
                    pos = cr + 2
                if blen > end - pos - 2:  # body (+ CRLF) not all here yet
                    self._suspend(buf, pos, start, argv, left, blen)
                    return False
                e = pos + <Py_ssize_t>blen
                if p[e] != b'\r' or p[e + 1] != b'\n':
                    self._fail(ERR_BULK_CRLF)
                if len(argv) == 0 and e - pos == PyBytes_GET_SIZE(self._name) \
                        and memcmp(p + pos, PyBytes_AS_STRING(self._name), e - pos) == 0:
                    argv.append(self._name)
                else:
                    item = PyBytes_FromStringAndSize(p + pos, e - pos)
                    if len(argv) == 0 and e - pos <= 32:
                        self._name = item
                    argv.append(item)
                pos = e + 2
                left -= 1
                blen = -1
            self._argv = None
            self._partial = 0
            self._pos = pos
            return argv

    cdef void _suspend(self, bytes buf, Py_ssize_t pos, Py_ssize_t start, list argv,
                       Py_ssize_t left, long long blen):
        """Save the state of an incomplete command and drop what was parsed."""
        self._argv = argv
        self._left = left
        self._bulk = blen
        self._partial += pos - start
        self._buf = buf[pos:]
        self._pos = 0
        if blen >= 0:
            self._want = <Py_ssize_t>blen + 2

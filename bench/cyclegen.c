/* cyclegen: a load generator for command sequences (the job cycle), in C so
 * that it is not the limit (bench/bench_cycle.py checks that: the same
 * generator and redis-benchmark give the same ADDJOB rate on Disque in the
 * same run).
 *
 *   cyclegen HOST PORT CLIENTS CYCLES STEP [; STEP ...]
 *
 * CLIENTS connections, one request in flight each (epoll, one thread, as
 * redis-benchmark); each loops over the STEPs until CYCLES cycles were
 * started in all. A STEP is a command, its words as arguments; a word "{id}"
 * is replaced by the id taken from the previous step's reply: a status or
 * bulk string reply is the id (ADDJOB, BRPOPLPUSH), an array of arrays gives
 * its first array's second item (GETJOB), an array of bulk strings its
 * second item (BRPOP). A nil reply where a later step needs the
 * id ends the cycle there (counted as "empty"). An error reply stops the run.
 *
 * Prints one line of key=value pairs: cycles, seconds, rate (cycles/s),
 * empty, then per step and for the whole cycle: mean, p50 and p99 latency in
 * microseconds (stepN_mean_us..., cycle_p50_us...).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_STEPS 8
#define MAX_WORDS 32
#define HIST 2000000            /* 0.1 us buckets up to 200 ms; above: the last */

typedef struct {
    int nwords;
    const char *words[MAX_WORDS];
    size_t lens[MAX_WORDS];
    int uses_id;
    /* The request encoded once: all of it (no {id}), or what comes before
     * and after the id's bulk string. */
    char *pre, *post;
    size_t pre_len, post_len;
} Step;

typedef struct {
    int fd;
    int step;                   /* the step in flight */
    uint64_t step_start, cycle_start;
    char id[256];
    size_t id_len;
    int has_id;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_len, out_off;
} Conn;

static Step steps[MAX_STEPS];
static int nsteps;
static uint32_t *hist[MAX_STEPS + 1];  /* the last one: whole cycles */
static double sum_us[MAX_STEPS + 1];
static uint64_t count[MAX_STEPS + 1];
static long long started, done, empty, target;
static int epfd;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *msg) {
    fprintf(stderr, "cyclegen: %s\n", msg);
    exit(2);
}

static void record(int k, uint64_t ns) {
    uint64_t b = ns / 100;
    if (b >= HIST) b = HIST - 1;
    hist[k][b]++;
    sum_us[k] += ns / 1000.0;
    count[k]++;
}

static double percentile(int k, double p) {
    uint64_t want = (uint64_t)(p * count[k]), seen = 0;
    for (uint64_t b = 0; b < HIST; b++) {
        seen += hist[k][b];
        if (seen > want) return b / 10.0;
    }
    return (HIST - 1) / 10.0;
}

/* Append to a growing buffer. */
static void put(Conn *c, const char *p, size_t n) {
    if (c->out_len + n > (size_t)1 << 20) die("command too long");
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
}

static void want_write(Conn *c, int on) {
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl");
}

static void flush_out(Conn *c) {
    while (c->out_off < c->out_len) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w < 0) {
            if (errno == EAGAIN) { want_write(c, 1); return; }
            die("write failed");
        }
        c->out_off += (size_t)w;
    }
    c->out_len = c->out_off = 0;
}

static void send_step(Conn *c) {
    Step *s = &steps[c->step];
    put(c, s->pre, s->pre_len);
    if (s->uses_id) {
        char head[32];
        int n = snprintf(head, sizeof head, "$%zu\r\n", c->id_len);
        put(c, head, (size_t)n);
        put(c, c->id, c->id_len);
        put(c, "\r\n", 2);
        put(c, s->post, s->post_len);
    }
    c->step_start = now_ns();
    flush_out(c);
}

/* RESP of words[from:to] into a new buffer (with the array header if from == 0). */
static char *encode_words(Step *s, int from, int to, size_t *len) {
    size_t cap = 32;
    for (int i = from; i < to; i++) cap += s->lens[i] + 32;
    char *buf = malloc(cap), *p = buf;
    if (buf == NULL) die("out of memory");
    if (from == 0) p += sprintf(p, "*%d\r\n", s->nwords);
    for (int i = from; i < to; i++) {
        p += sprintf(p, "$%zu\r\n", s->lens[i]);
        memcpy(p, s->words[i], s->lens[i]);
        p += s->lens[i];
        memcpy(p, "\r\n", 2);
        p += 2;
    }
    *len = (size_t)(p - buf);
    return buf;
}

static void prepare(Step *s) {
    int at = s->nwords;
    for (int i = 0; i < s->nwords; i++)
        if (s->lens[i] == 4 && memcmp(s->words[i], "{id}", 4) == 0) { at = i; break; }
    for (int i = at + 1; i < s->nwords; i++)
        if (s->lens[i] == 4 && memcmp(s->words[i], "{id}", 4) == 0) die("one {id} a step");
    s->pre = encode_words(s, 0, at, &s->pre_len);
    if (s->uses_id) s->post = encode_words(s, at + 1, s->nwords, &s->post_len);
}

static int start_cycle(Conn *c) {
    if (started >= target) return 0;
    started++;
    c->step = 0;
    c->has_id = 0;
    c->cycle_start = now_ns();
    send_step(c);
    return 1;
}

/* The end of the complete RESP reply at p, or NULL when more bytes are needed. */
static const char *reply_end(const char *p, const char *end) {
    if (p >= end) return NULL;
    const char *crlf = memchr(p, '\r', (size_t)(end - p));
    if (crlf == NULL || crlf + 1 >= end) return NULL;
    const char *after = crlf + 2;
    long long n;
    switch (*p) {
    case '+': case '-': case ':':
        return after;
    case '$':
        n = strtoll(p + 1, NULL, 10);
        if (n < 0) return after;
        return end - after >= n + 2 ? after + n + 2 : NULL;
    case '*':
        n = strtoll(p + 1, NULL, 10);
        for (long long i = 0; i < n; i++) {
            after = reply_end(after, end);
            if (after == NULL) return NULL;
        }
        return after;
    default:
        die("unexpected reply type");
    }
    return NULL;
}

/* A bulk string at p: its bytes and length; 0 when p is not a (non-nil) bulk. */
static int bulk_at(const char *p, const char **data, size_t *len) {
    if (*p != '$') return 0;
    long long n = strtoll(p + 1, NULL, 10);
    if (n < 0) return 0;
    *data = strchr(p, '\n') + 1;
    *len = (size_t)n;
    return 1;
}

static const char *skip(const char *p) {
    return reply_end(p, p + (1 << 30));     /* complete: never needs more */
}

/* The id a complete reply carries (see the top), or 0. */
static int take_id(Conn *c, const char *p) {
    const char *data;
    size_t len;
    c->has_id = 0;
    if (*p == '+') {                /* a status: Disque's ADDJOB, the ceiling */
        data = p + 1;
        len = (size_t)(strchr(p, '\r') - data);
    } else if (*p == '*') {
        long long n = strtoll(p + 1, NULL, 10);
        if (n <= 0) return 0;
        const char *first = strchr(p, '\n') + 1;
        const char *item;
        if (*first == '*') {        /* [[queue, id, body], ...] */
            if (strtoll(first + 1, NULL, 10) < 2) return 0;
            item = skip(strchr(first, '\n') + 1);
        } else {                    /* [key, value] */
            if (n < 2) return 0;
            item = skip(first);
        }
        if (!bulk_at(item, &data, &len)) return 0;
    } else if (!bulk_at(p, &data, &len)) {
        return 0;
    }
    if (len >= sizeof c->id) die("id too long");
    memcpy(c->id, data, len);
    c->id_len = len;
    c->has_id = 1;
    return 1;
}

static void on_reply(Conn *c, const char *p) {
    uint64_t t = now_ns();
    if (*p == '-') {
        const char *e = strchr(p, '\r');
        fprintf(stderr, "cyclegen: error reply to step %d: %.*s\n", c->step + 1,
                (int)(e - p), p);
        exit(3);
    }
    record(c->step, t - c->step_start);
    take_id(c, p);
    c->step++;
    if (c->step < nsteps && steps[c->step].uses_id && !c->has_id) {
        empty++;                /* nothing to go on with: the next cycle */
        start_cycle(c);
        return;
    }
    if (c->step < nsteps) {
        send_step(c);
        return;
    }
    record(nsteps, t - c->cycle_start);
    done++;
    start_cycle(c);
}

static void on_readable(Conn *c) {
    /* One read per event: epoll is level-triggered, what is left comes again. */
    if (c->in_cap - c->in_len < 65536) {
        c->in_cap = c->in_cap * 2 + 65536;
        c->in = realloc(c->in, c->in_cap);
        if (c->in == NULL) die("out of memory");
    }
    ssize_t r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
    if (r < 0) {
        if (errno == EAGAIN) return;
        die("read failed");
    }
    if (r == 0) die("server closed the connection");
    c->in_len += (size_t)r;
    const char *p = c->in, *end = c->in + c->in_len, *next;
    while ((next = reply_end(p, end)) != NULL) {
        on_reply(c, p);
        p = next;
    }
    c->in_len = (size_t)(end - p);
    memmove(c->in, p, c->in_len);
}

int main(int argc, char **argv) {
    if (argc < 6) die("usage: cyclegen HOST PORT CLIENTS CYCLES STEP [; STEP ...]");
    const char *host = argv[1];
    int port = atoi(argv[2]), clients = atoi(argv[3]);
    target = atoll(argv[4]);
    Step *s = &steps[0];
    nsteps = 1;
    for (int i = 5; i < argc; i++) {
        if (strcmp(argv[i], ";") == 0) {
            if (++nsteps > MAX_STEPS) die("too many steps");
            s = &steps[nsteps - 1];
            continue;
        }
        if (s->nwords == MAX_WORDS) die("too many words in a step");
        s->words[s->nwords] = argv[i];
        s->lens[s->nwords] = strlen(argv[i]);
        if (strcmp(argv[i], "{id}") == 0) s->uses_id = 1;
        s->nwords++;
    }
    for (int k = 0; k < nsteps; k++) prepare(&steps[k]);
    for (int k = 0; k <= nsteps; k++)
        if ((hist[k] = calloc(HIST, sizeof(uint32_t))) == NULL) die("out of memory");
    epfd = epoll_create1(0);
    Conn *conns = calloc((size_t)clients, sizeof(Conn));
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) die("bad host");
    for (int i = 0; i < clients; i++) {
        Conn *c = &conns[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect failed");
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(c->fd, F_SETFL, O_NONBLOCK);
        c->out = malloc((size_t)1 << 20);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
    }
    uint64_t t0 = now_ns();
    for (int i = 0; i < clients; i++) start_cycle(&conns[i]);
    struct epoll_event evs[256];
    while (done + empty < started) {
        int n = epoll_wait(epfd, evs, 256, 10000);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        if (n == 0) die("no reply for 10 s");
        for (int i = 0; i < n; i++) {
            Conn *c = evs[i].data.ptr;
            if (evs[i].events & EPOLLOUT) {
                want_write(c, 0);
                flush_out(c);
            }
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) on_readable(c);
        }
    }
    double secs = (now_ns() - t0) / 1e9;
    printf("cycles=%lld seconds=%.4f rate=%.1f empty=%lld", done, secs, done / secs, empty);
    for (int k = 0; k <= nsteps; k++) {
        char name[16];
        if (k < nsteps) snprintf(name, sizeof name, "step%d", k + 1);
        else snprintf(name, sizeof name, "cycle");
        double mean = count[k] ? sum_us[k] / count[k] : 0;
        printf(" %s_mean_us=%.2f %s_p50_us=%.1f %s_p99_us=%.1f", name, mean, name,
               percentile(k, 0.50), name, percentile(k, 0.99));
    }
    printf("\n");
    return 0;
}

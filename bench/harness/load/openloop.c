/*
 * openloop: an open-loop HTTPS load generator for the admission webhook's benchmark.
 *
 * Request k is due at start + k/rate, whether or not earlier requests were answered. A due
 * request goes to an idle keep-alive connection; if none is idle it waits in a FIFO queue, and
 * that wait counts in its latency, which runs from the scheduled time to the last byte of the
 * response (no coordinated omission). The send lag (write done - scheduled time) shows whether
 * the generator kept its schedule.
 *
 * One thread: epoll, a timerfd armed at each next deadline (absolute CLOCK_MONOTONIC, ns) and
 * OpenSSL over non-blocking sockets; every connection is connected and TLS-handshaken before
 * the schedule starts. Bodies are the templates bench/harness/load/wrk.py writes (bodies.tsv, one
 * PATH<TAB>BODY line each), with its Lua script's placeholders filled the same way.
 *
 *   openloop HOST PORT CA BODIES RATE REQUESTS [CONNECTIONS [SEED [TIMEOUT_S]]]
 *
 * HOST must be a numeric loopback address (127.0.0.0/8 or ::1). One JSON object on stdout.
 * Exit status: 0 done, 1 setup failed (connect, TLS), 2 usage, 3 run abandoned (no progress).
 * SEED: request i (0-based) fills its template with counter SEED+i+1, as the Lua script does.
 *
 * JSON: rate (asked), achieved_rate (completed / (last completion - start)), requests, sent,
 * completed (responses read, any status), non_2xx, errors (connections broken with a request
 * in flight), timeouts (no full response TIMEOUT_S after the write), unsent, connect_errors,
 * reconnects, queued (requests that found no idle connection when due), connections,
 * p50/p90/p99/p999/max_ms (latency from the scheduled time, nearest rank over all completed),
 * send_lag_p50/p99/max_ms (write done - scheduled time), cpu_seconds (getrusage, schedule
 * start to end), wall_seconds, cpu_share (= cpu_seconds / wall_seconds), abandoned.
 *
 * Build: cc -O2 -Wall -Wextra -o openloop bench/harness/load/openloop.c -lssl -lcrypto
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define SERVER_NAME "localhost" /* the bench's certificate: localhost and 127.0.0.1 */
#define THREAD_ID 1             /* as bench/harness/load/wrk.py passes to wrk */
#define NS 1000000000LL

/* ---- templates ---------------------------------------------------------------------- */

enum piece_kind { LIT, P_UID, P_SEQ, P_NAME, P_PODUID, P_TIME };

struct piece {
    enum piece_kind kind;
    const char *text; /* LIT only */
    size_t len;
};

struct template {
    char *path;
    struct piece *pieces;
    size_t npieces;
    size_t max_len; /* the longest body it can make */
};

static const struct {
    const char *name;
    enum piece_kind kind;
    size_t max_len;
} PLACEHOLDERS[] = {
    {"@UID@", P_UID, 36},   {"@SEQ@", P_SEQ, 20},       {"@NAME@", P_NAME, 5},
    {"@PODUID@", P_PODUID, 36}, {"@TIME@", P_TIME, 20},
};
#define NPLACEHOLDERS (sizeof PLACEHOLDERS / sizeof PLACEHOLDERS[0])

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("openloop: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die(1, "out of memory");
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die(1, "out of memory");
    return p;
}

static void parse_template(struct template *t, char *body) {
    size_t cap = 8;
    t->pieces = xmalloc(cap * sizeof *t->pieces);
    t->npieces = 0;
    t->max_len = 0;
    char *p = body;
    while (*p) {
        /* the earliest placeholder from p */
        char *best = NULL;
        size_t which = 0;
        for (size_t i = 0; i < NPLACEHOLDERS; i++) {
            char *hit = strstr(p, PLACEHOLDERS[i].name);
            if (hit && (!best || hit < best)) {
                best = hit;
                which = i;
            }
        }
        if (t->npieces + 2 > cap) {
            cap *= 2;
            t->pieces = xrealloc(t->pieces, cap * sizeof *t->pieces);
        }
        size_t lit = best ? (size_t)(best - p) : strlen(p);
        if (lit) {
            t->pieces[t->npieces++] = (struct piece){LIT, p, lit};
            t->max_len += lit;
        }
        if (!best) break;
        t->pieces[t->npieces++] = (struct piece){PLACEHOLDERS[which].kind, NULL, 0};
        t->max_len += PLACEHOLDERS[which].max_len;
        p = best + strlen(PLACEHOLDERS[which].name);
    }
}

static struct template *read_templates(const char *file, size_t *count) {
    FILE *f = fopen(file, "r");
    if (!f) die(1, "cannot open bodies file %s: %s", file, strerror(errno));
    struct template *ts = NULL;
    size_t n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        char *tab = strchr(line, '\t');
        if (!tab) die(1, "%s: line %zu has no tab (PATH<TAB>BODY)", file, n + 1);
        *tab = 0;
        ts = xrealloc(ts, (n + 1) * sizeof *ts);
        ts[n].path = strdup(line);
        char *body = strdup(tab + 1); /* kept: the literal pieces point into it */
        if (!ts[n].path || !body) die(1, "out of memory");
        parse_template(&ts[n], body);
        n++;
    }
    free(line);
    fclose(f);
    if (!n) die(1, "%s has no templates", file);
    *count = n;
    return ts;
}

static const char ALPHABET[] = "bcdfghjklmnpqrstvwxz2456789";

/* The UTC time, as the Lua script's os.date("!%Y-%m-%dT%H:%M:%SZ"), cached per second. */
static const char *utc_now(void) {
    static time_t last = (time_t)-1;
    static char text[32];
    time_t now = time(NULL);
    if (now != last) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
        last = now;
    }
    return text;
}

/* Fill template t for `counter` into out (sized by max_len); returns the body's length. */
static size_t fill(const struct template *t, uint64_t counter, char *out) {
    char *o = out;
    for (size_t i = 0; i < t->npieces; i++) {
        const struct piece *pc = &t->pieces[i];
        switch (pc->kind) {
        case LIT:
            memcpy(o, pc->text, pc->len);
            o += pc->len;
            break;
        case P_UID:
            o += sprintf(o, "%08x-0000-4000-8000-%012" PRIx64, THREAD_ID, counter);
            break;
        case P_PODUID:
            o += sprintf(o, "%08x-1111-4000-8000-%012" PRIx64, THREAD_ID, counter);
            break;
        case P_SEQ:
            o += sprintf(o, "%" PRIu64, counter);
            break;
        case P_NAME: {
            uint64_t v = counter;
            for (int k = 0; k < 5; k++) {
                *o++ = ALPHABET[v % 27];
                v /= 27;
            }
            break;
        }
        case P_TIME: {
            const char *now = utc_now();
            size_t l = strlen(now);
            memcpy(o, now, l);
            o += l;
            break;
        }
        }
    }
    return (size_t)(o - out);
}

/* ---- connections --------------------------------------------------------------------- */

enum state { DEAD, CONNECTING, HANDSHAKE, IDLE, WRITING, READING };

struct conn {
    int fd;
    SSL *ssl;
    enum state state;
    uint32_t events; /* epoll interest now registered */
    int in_idle;     /* in the idle ring */
    int64_t retry_at;
    int64_t since;   /* connect started, or request written */
    /* the request in flight */
    int64_t req;
    char *wbuf;
    size_t wlen, woff;
    char *rbuf;
    size_t rlen, rcap;
};

static struct {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int port;
    SSL_CTX *ctx;
    int epfd, tfd;
    struct conn *conns;
    int nconns;
    int *idle;
    int nidle;
    int idle_head;
    struct template *templates;
    size_t ntemplates;
    double rate;
    int64_t nreq;
    uint64_t seed;
    int64_t timeout_ns;
    int running; /* the schedule has started: failures are counted, not fatal */
    int64_t start;
    int64_t next_due, next_send, done;
    int64_t *latency, *lag;
    int64_t nlatency, nlag;
    int64_t completed, non_2xx, errors, timeouts, connect_errors, reconnects, queued;
    int64_t last_completion, last_progress;
    char setup_error[512];
} G;

static int64_t mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

static int64_t due_at(int64_t k) { return G.start + (int64_t)((double)k * 1e9 / G.rate); }

static void set_events(struct conn *c, uint32_t events) {
    if (c->events == events) return;
    struct epoll_event ev = {.events = events, .data.u32 = (uint32_t)(c - G.conns)};
    if (epoll_ctl(G.epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) die(1, "epoll_ctl: %s", strerror(errno));
    c->events = events;
}

/* Idle connections are used in turn (a FIFO ring, not a stack): with a stack, the connections at
 * its bottom sat idle past the server's keep-alive timeout (5 s for the webhook) at low rates, and
 * a request written just as the server closed one failed (1-4 errors per 20,000 requests). */
static void push_idle(struct conn *c) {
    if (c->in_idle) return;
    c->in_idle = 1;
    G.idle[(G.idle_head + G.nidle++) % G.nconns] = (int)(c - G.conns);
}

static struct conn *pop_idle(void) {
    while (G.nidle) {
        struct conn *c = &G.conns[G.idle[G.idle_head]];
        G.idle_head = (G.idle_head + 1) % G.nconns;
        G.nidle--;
        c->in_idle = 0;
        if (c->state == IDLE) return c;
    }
    return NULL;
}

static void tls_error_text(char *out, size_t size, SSL *ssl) {
    long verify = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    unsigned long e = ERR_peek_last_error();
    char buf[256] = "";
    if (e) ERR_error_string_n(e, buf, sizeof buf);
    if (verify != X509_V_OK)
        snprintf(out, size, "certificate verification failed: %s (%s)",
                 X509_verify_cert_error_string(verify), buf);
    else if (e)
        snprintf(out, size, "%s", buf);
    else
        snprintf(out, size, "%s", errno ? strerror(errno) : "connection closed");
    ERR_clear_error();
}

static void close_conn(struct conn *c) {
    if (c->ssl) {
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0) {
        close(c->fd); /* also leaves the epoll set */
        c->fd = -1;
    }
    c->events = 0;
    c->rlen = 0;
    c->state = DEAD;
}

/* The connection broke: its request in flight failed; it reconnects at `retry_at`. */
static void fail_conn(struct conn *c, const char *why, int timed_out) {
    if (!G.running) {
        snprintf(G.setup_error, sizeof G.setup_error, "%s", why);
        close_conn(c);
        return;
    }
    int64_t now = mono();
    if (c->state == WRITING || c->state == READING) {
        if (timed_out)
            G.timeouts++;
        else
            G.errors++;
        G.done++;
        G.last_progress = now;
    } else if (c->state == CONNECTING || c->state == HANDSHAKE) {
        G.connect_errors++;
    }
    int was_connecting = c->state == CONNECTING || c->state == HANDSHAKE;
    close_conn(c);
    /* back off when connecting failed, at once when an established connection broke */
    c->retry_at = was_connecting ? now + NS / 10 : now;
}

static void do_handshake(struct conn *c);

static void start_connect(struct conn *c) {
    c->fd = socket(G.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) die(1, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->since = mono();
    c->state = CONNECTING;
    c->events = EPOLLOUT;
    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)(c - G.conns)};
    if (epoll_ctl(G.epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) die(1, "epoll_ctl: %s", strerror(errno));
    if (connect(c->fd, (struct sockaddr *)&G.addr, G.addrlen) < 0 && errno != EINPROGRESS) {
        char why[128];
        snprintf(why, sizeof why, "connect: %s", strerror(errno));
        fail_conn(c, why, 0);
    }
}

static void connected(struct conn *c) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        char why[128];
        snprintf(why, sizeof why, "connect: %s", strerror(err));
        fail_conn(c, why, 0);
        return;
    }
    c->ssl = SSL_new(G.ctx);
    if (!c->ssl) die(1, "SSL_new failed");
    SSL_set_fd(c->ssl, c->fd);
    SSL_set_tlsext_host_name(c->ssl, SERVER_NAME);
    SSL_set1_host(c->ssl, SERVER_NAME);
    c->state = HANDSHAKE;
    do_handshake(c);
}

static void do_handshake(struct conn *c) {
    ERR_clear_error();
    errno = 0;
    int r = SSL_connect(c->ssl);
    if (r == 1) {
        c->state = IDLE;
        set_events(c, EPOLLIN); /* to see the server close an idle connection */
        push_idle(c);
        return;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        set_events(c, EPOLLIN);
    else if (e == SSL_ERROR_WANT_WRITE)
        set_events(c, EPOLLOUT);
    else {
        char why[400];
        tls_error_text(why, sizeof why, c->ssl);
        char msg[480];
        snprintf(msg, sizeof msg, "TLS handshake: %s", why);
        fail_conn(c, msg, 0);
    }
}

static void do_write(struct conn *c) {
    while (c->woff < c->wlen) {
        ERR_clear_error();
        int r = SSL_write(c->ssl, c->wbuf + c->woff, (int)(c->wlen - c->woff));
        if (r > 0) {
            c->woff += (size_t)r;
            continue;
        }
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_WRITE) {
            set_events(c, EPOLLOUT);
            return;
        }
        if (e == SSL_ERROR_WANT_READ) {
            set_events(c, EPOLLIN);
            return;
        }
        char why[400];
        tls_error_text(why, sizeof why, c->ssl);
        fail_conn(c, why, 0);
        return;
    }
    int64_t now = mono();
    G.lag[G.nlag++] = now - due_at(c->req);
    G.last_progress = now;
    c->since = now;
    c->state = READING;
    set_events(c, EPOLLIN);
}

static void send_request(struct conn *c, int64_t k) {
    uint64_t counter = G.seed + (uint64_t)k + 1; /* the Lua script increments, then uses */
    const struct template *t = &G.templates[counter % G.ntemplates];
    /* the body first, after room for the head; then the head, right-aligned before it */
    char *body = c->wbuf + 512;
    size_t blen = fill(t, counter, body);
    char head[512];
    int hlen = snprintf(head, sizeof head,
                        "POST %s HTTP/1.1\r\nHost: " SERVER_NAME ":%d\r\n"
                        "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                        t->path, G.port, blen);
    if (hlen < 0 || hlen >= (int)sizeof head) die(1, "request path too long");
    memcpy(body - hlen, head, (size_t)hlen);
    c->req = k;
    c->woff = (size_t)(512 - hlen);
    c->wlen = 512 + blen;
    c->rlen = 0;
    c->state = WRITING;
    c->since = mono(); /* a write the server never takes times out too */
    do_write(c);
}

/* A complete response in rbuf? Returns 1 done (status set), 0 need more, -1 malformed. */
static int parse_response(struct conn *c, int *status, int *close_after, size_t *total) {
    char *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head = (size_t)(end - c->rbuf) + 4;
    if (c->rlen < 12 || strncmp(c->rbuf, "HTTP/1.", 7) != 0) return -1;
    *status = atoi(c->rbuf + 9);
    long long length = -1;
    *close_after = 0;
    for (char *line = (char *)memchr(c->rbuf, '\n', head) + 1; line < end;) {
        char *eol = memchr(line, '\n', (size_t)(end + 2 - line));
        if (!eol) break;
        if (!strncasecmp(line, "content-length:", 15))
            length = strtoll(line + 15, NULL, 10);
        else if (!strncasecmp(line, "transfer-encoding:", 18))
            return -1; /* the server sends Content-Length; chunked bodies are not read */
        else if (!strncasecmp(line, "connection:", 11)) {
            char *v = line + 11;
            while (*v == ' ') v++;
            if (!strncasecmp(v, "close", 5)) *close_after = 1;
        }
        line = eol + 1;
    }
    if (length < 0) return -1;
    *total = head + (size_t)length;
    return c->rlen >= *total ? 1 : 0;
}

static void response_done(struct conn *c, int status, int close_after) {
    int64_t now = mono();
    G.latency[G.nlatency++] = now - due_at(c->req);
    G.completed++;
    if (status < 200 || status > 299) G.non_2xx++;
    G.done++;
    G.last_completion = G.last_progress = now;
    c->rlen = 0;
    if (close_after) {
        G.reconnects++;
        close_conn(c);
        c->retry_at = now;
        return;
    }
    c->state = IDLE;
    push_idle(c);
}

static void do_read(struct conn *c) {
    for (;;) {
        if (c->rcap - c->rlen < 4096) {
            c->rcap *= 2;
            c->rbuf = xrealloc(c->rbuf, c->rcap);
        }
        ERR_clear_error();
        errno = 0;
        int r = SSL_read(c->ssl, c->rbuf + c->rlen, (int)(c->rcap - c->rlen));
        if (r > 0) {
            if (c->state != READING) {
                fail_conn(c, "data from the server with no request in flight", 0);
                return;
            }
            c->rlen += (size_t)r;
            int status, close_after;
            size_t total;
            int p = parse_response(c, &status, &close_after, &total);
            if (p < 0) {
                fail_conn(c, "malformed HTTP response", 0);
                return;
            }
            if (p > 0) {
                if (c->rlen != total) {
                    fail_conn(c, "bytes after the response", 0);
                    return;
                }
                response_done(c, status, close_after);
                if (c->state != IDLE) return;
            }
            continue;
        }
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ) return;
        if (e == SSL_ERROR_WANT_WRITE) {
            set_events(c, EPOLLIN | EPOLLOUT);
            return;
        }
        if (c->state == IDLE && (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL)) {
            /* the server closed an idle keep-alive connection: not a failed request */
            G.reconnects++;
            close_conn(c);
            c->retry_at = mono();
            return;
        }
        char why[400];
        tls_error_text(why, sizeof why, c->ssl);
        fail_conn(c, why, 0);
        return;
    }
}

static void on_event(struct conn *c, uint32_t events) {
    switch (c->state) {
    case CONNECTING:
        connected(c);
        break;
    case HANDSHAKE:
        do_handshake(c);
        break;
    case WRITING:
        do_write(c);
        break;
    case IDLE:
    case READING:
        if (c->state == READING && (events & EPOLLOUT)) set_events(c, EPOLLIN);
        do_read(c);
        break;
    case DEAD:
        break;
    }
}

static void check_connections(int64_t now) {
    for (int i = 0; i < G.nconns; i++) {
        struct conn *c = &G.conns[i];
        if (c->state == DEAD && now >= c->retry_at)
            start_connect(c);
        else if ((c->state == WRITING || c->state == READING || c->state == CONNECTING ||
                  c->state == HANDSHAKE) &&
                 now - c->since > G.timeout_ns)
            fail_conn(c, "timed out", 1);
    }
}

static void arm_timer(int64_t at) {
    struct itimerspec its = {.it_value = {.tv_sec = at / NS, .tv_nsec = at % NS}};
    if (timerfd_settime(G.tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        die(1, "timerfd_settime: %s", strerror(errno));
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array, in ms. */
static double pct_ms(const int64_t *v, int64_t n, double q) {
    if (!n) return 0;
    int64_t rank = (int64_t)((q / 100.0) * (double)n + 0.999999999);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return (double)v[rank - 1] / 1e6;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void usage(void) {
    fprintf(stderr, "usage: openloop HOST PORT CA BODIES RATE REQUESTS "
                    "[CONNECTIONS=64 [SEED=0 [TIMEOUT_S=10]]]\n"
                    "  HOST: a numeric loopback address (127.0.0.0/8 or ::1)\n");
    exit(2);
}

static double number(const char *text, const char *what) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end) {
        fprintf(stderr, "openloop: %s is not a number: %s\n", what, text);
        usage();
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc < 7 || argc > 10) usage();
    /* Loopback only, checked before any socket exists. */
    memset(&G.addr, 0, sizeof G.addr);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&G.addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&G.addr;
    double port = number(argv[2], "PORT");
    if (port < 1 || port > 65535 || port != (int)port) {
        fprintf(stderr, "openloop: bad PORT %s\n", argv[2]);
        usage();
    }
    G.port = (int)port;
    if (inet_pton(AF_INET, argv[1], &v4->sin_addr) == 1) {
        if ((ntohl(v4->sin_addr.s_addr) >> 24) != 127) {
            fprintf(stderr, "openloop: refusing %s: not a loopback address\n", argv[1]);
            return 2;
        }
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)G.port);
        G.addrlen = sizeof *v4;
    } else if (inet_pton(AF_INET6, argv[1], &v6->sin6_addr) == 1) {
        if (!IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) {
            fprintf(stderr, "openloop: refusing %s: not a loopback address\n", argv[1]);
            return 2;
        }
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)G.port);
        G.addrlen = sizeof *v6;
    } else {
        fprintf(stderr, "openloop: refusing %s: not a numeric loopback address\n", argv[1]);
        return 2;
    }
    const char *ca = argv[3];
    G.rate = number(argv[5], "RATE");
    double nreq = number(argv[6], "REQUESTS");
    double nconns = argc > 7 ? number(argv[7], "CONNECTIONS") : 64;
    double seed = argc > 8 ? number(argv[8], "SEED") : 0;
    double timeout = argc > 9 ? number(argv[9], "TIMEOUT_S") : 10;
    if (G.rate <= 0 || nreq < 1 || nreq != (int64_t)nreq || nconns < 1 || nconns > 100000 ||
        nconns != (int)nconns || seed < 0 || seed != (double)(uint64_t)seed || timeout <= 0)
        usage();
    G.nreq = (int64_t)nreq;
    G.nconns = (int)nconns;
    G.seed = (uint64_t)seed;
    G.timeout_ns = (int64_t)(timeout * 1e9);
    G.templates = read_templates(argv[4], &G.ntemplates);
    size_t max_body = 0;
    for (size_t i = 0; i < G.ntemplates; i++)
        if (G.templates[i].max_len > max_body) max_body = G.templates[i].max_len;

    signal(SIGPIPE, SIG_IGN);
    G.ctx = SSL_CTX_new(TLS_client_method());
    if (!G.ctx) die(1, "SSL_CTX_new failed");
    SSL_CTX_set_min_proto_version(G.ctx, TLS1_2_VERSION);
    if (access(ca, R_OK) != 0) die(1, "cannot read the CA file %s: %s", ca, strerror(errno));
    if (SSL_CTX_load_verify_locations(G.ctx, ca, NULL) != 1) {
        char why[256] = "";
        ERR_error_string_n(ERR_peek_last_error(), why, sizeof why);
        die(1, "cannot load the CA file %s: %s", ca, why);
    }
    SSL_CTX_set_verify(G.ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(G.ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);

    G.epfd = epoll_create1(EPOLL_CLOEXEC);
    G.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (G.epfd < 0 || G.tfd < 0) die(1, "epoll/timerfd: %s", strerror(errno));
    struct epoll_event tev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    epoll_ctl(G.epfd, EPOLL_CTL_ADD, G.tfd, &tev);
    G.conns = xmalloc((size_t)G.nconns * sizeof *G.conns);
    G.idle = xmalloc((size_t)G.nconns * sizeof *G.idle);
    for (int i = 0; i < G.nconns; i++) {
        struct conn *c = &G.conns[i];
        memset(c, 0, sizeof *c);
        c->fd = -1;
        c->wbuf = xmalloc(512 + max_body);
        c->rcap = 16384;
        c->rbuf = xmalloc(c->rcap);
    }
    G.latency = xmalloc((size_t)G.nreq * sizeof *G.latency);
    G.lag = xmalloc((size_t)G.nreq * sizeof *G.lag);

    struct epoll_event events[256];
    /* Setup: every connection connected and handshaken before the schedule starts. */
    for (int i = 0; i < G.nconns; i++) start_connect(&G.conns[i]);
    int64_t setup_deadline = mono() + G.timeout_ns;
    while (G.nidle < G.nconns) {
        if (G.setup_error[0]) die(1, "[%s]:%d: %s", argv[1], G.port, G.setup_error);
        if (mono() > setup_deadline) die(1, "[%s]:%d: connecting timed out", argv[1], G.port);
        int n = epoll_wait(G.epfd, events, 256, 100);
        if (n < 0 && errno != EINTR) die(1, "epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++)
            if (events[i].data.u32 != UINT32_MAX)
                on_event(&G.conns[events[i].data.u32], events[i].events);
    }
    if (G.setup_error[0]) die(1, "[%s]:%d: %s", argv[1], G.port, G.setup_error);

    G.running = 1;
    double cpu0 = cpu_seconds();
    G.start = mono() + NS / 100; /* the first request 10 ms from now */
    G.last_progress = G.start;
    int64_t armed = -1, last_check = 0, queued_upto = 0;
    int abandoned = 0;
    while (G.done < G.nreq) {
        int64_t now = mono();
        while (G.next_due < G.nreq && due_at(G.next_due) <= now) G.next_due++;
        while (G.next_send < G.next_due) {
            struct conn *c = pop_idle();
            if (!c) {
                /* each request that found no idle connection when due, counted once */
                if (G.next_due > queued_upto) {
                    int64_t from = queued_upto > G.next_send ? queued_upto : G.next_send;
                    G.queued += G.next_due - from;
                    queued_upto = G.next_due;
                }
                break;
            }
            send_request(c, G.next_send++);
        }
        if (G.next_due < G.nreq && armed != G.next_due) {
            arm_timer(due_at(G.next_due));
            armed = G.next_due;
        }
        if (now - last_check > NS / 100) { /* timeouts and reconnects, every 10 ms */
            check_connections(now);
            last_check = now;
        }
        if (G.next_due >= G.nreq && now - G.last_progress > 2 * G.timeout_ns) {
            abandoned = 1; /* no connection could make progress: give up */
            break;
        }
        int n = epoll_wait(G.epfd, events, 256, 10);
        if (n < 0 && errno != EINTR) die(1, "epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            if (events[i].data.u32 == UINT32_MAX) {
                uint64_t expirations;
                if (read(G.tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                    die(1, "timerfd read: %s", strerror(errno));
                continue;
            }
            on_event(&G.conns[events[i].data.u32], events[i].events);
        }
    }
    int64_t end = mono();
    double cpu = cpu_seconds() - cpu0;

    qsort(G.latency, (size_t)G.nlatency, sizeof *G.latency, cmp64);
    qsort(G.lag, (size_t)G.nlag, sizeof *G.lag, cmp64);
    double span = (double)((G.last_completion > G.start ? G.last_completion : end) - G.start) / 1e9;
    printf("{\"rate\": %.3f, \"achieved_rate\": %.1f, \"requests\": %" PRId64
           ", \"sent\": %" PRId64 ", \"completed\": %" PRId64 ", \"non_2xx\": %" PRId64
           ", \"errors\": %" PRId64 ", \"timeouts\": %" PRId64 ", \"unsent\": %" PRId64
           ", \"connect_errors\": %" PRId64 ", \"reconnects\": %" PRId64
           ", \"queued\": %" PRId64 ", \"connections\": %d"
           ", \"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f"
           ", \"max_ms\": %.3f, \"send_lag_p50_ms\": %.3f, \"send_lag_p99_ms\": %.3f"
           ", \"send_lag_max_ms\": %.3f, \"cpu_seconds\": %.3f, \"wall_seconds\": %.3f"
           ", \"cpu_share\": %.3f, \"abandoned\": %s}\n",
           G.rate, span > 0 ? (double)G.completed / span : 0.0, G.nreq, G.nlag, G.completed,
           G.non_2xx, G.errors, G.timeouts, G.nreq - G.next_send, G.connect_errors, G.reconnects,
           G.queued, G.nconns, pct_ms(G.latency, G.nlatency, 50), pct_ms(G.latency, G.nlatency, 90),
           pct_ms(G.latency, G.nlatency, 99), pct_ms(G.latency, G.nlatency, 99.9),
           G.nlatency ? (double)G.latency[G.nlatency - 1] / 1e6 : 0.0, pct_ms(G.lag, G.nlag, 50),
           pct_ms(G.lag, G.nlag, 99), G.nlag ? (double)G.lag[G.nlag - 1] / 1e6 : 0.0, cpu,
           (double)(end - G.start) / 1e9, (end > G.start) ? cpu / ((double)(end - G.start) / 1e9) : 0.0,
           abandoned ? "true" : "false");
    if (abandoned) {
        fprintf(stderr, "openloop: abandoned: no progress for %.1f s, %" PRId64 " of %" PRId64
                        " requests done\n", 2 * timeout, G.done, G.nreq);
        return 3;
    }
    return 0;
}

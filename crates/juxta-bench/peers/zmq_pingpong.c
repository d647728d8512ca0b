/*
 * ZeroMQ (libzmq) side of `juxta bench pingpong --impl zmq`: REQ/REP over
 * TCP on loopback, one message and a 1-byte reply per pair, as every other
 * implementation in the bench.
 *
 *   zmq_pingpong serve ADDR    bind a REP socket on ADDR (tcp://127.0.0.1:*)
 *                              and a PULL socket beside it, print
 *                              "READY <rep endpoint> <pull endpoint>", answer
 *                              every message on REP with 1 byte and count the
 *                              messages on PULL, until killed. A two-part
 *                              message "END",<count> on REP is answered (8
 *                              bytes, the number of PULL messages counted
 *                              since the last END) once <count> arrived.
 *   zmq_pingpong client REP_ENDPOINT PULL_ENDPOINT
 *                              connect a REQ and a PUSH socket, print "READY",
 *                              then read commands on stdin, one answer line each:
 *     PAIRS <size> <n>         n untimed pairs                -> "DONE"
 *     TIMED <size> <n>         n pairs, each timed with CLOCK_MONOTONIC
 *                                                             -> "TIMED us,us,..."
 *     STREAM <size> <n> <ms>   one-way messages on PUSH, back to back, until
 *                              n were sent (n > 0) or ms passed (ms > 0), then
 *                              END on REP; timed from the first send until
 *                              END is answered  -> "STREAMED <sent> <received> <us>"
 *     QUIT                     exit 0
 *   PUSH/PULL high-water marks: STREAM_HWM messages each way (zmq's default
 *   is 1000; 1 MB messages would then buffer 2 GB).
 *   Errors: "ERROR <what>" and exit 1.
 *
 * Built by juxta-bench at run time (cc -O2, pkg-config libzmq).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define MAX_SIZE (64u << 20)
#define STREAM_HWM 128

static void die(const char *what) {
    printf("ERROR %s: %s\n", what, zmq_strerror(zmq_errno()));
    fflush(stdout);
    exit(1);
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *bind_any(void *ctx, int type, const char *addr, char *ep, size_t room) {
    void *s = zmq_socket(ctx, type);
    if (!s) die("socket");
    int hwm = STREAM_HWM;
    if (type == ZMQ_PULL && zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0) die("hwm");
    if (zmq_bind(s, addr) != 0) die("bind");
    size_t len = room;
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &len) != 0) die("endpoint");
    return s;
}

static int serve(const char *addr) {
    void *ctx = zmq_ctx_new();
    char ep[256], pull_ep[256];
    void *s = bind_any(ctx, ZMQ_REP, addr, ep, sizeof ep);
    void *pull = bind_any(ctx, ZMQ_PULL, addr, pull_ep, sizeof pull_ep);
    printf("READY %s %s\n", ep, pull_ep);
    fflush(stdout);
    zmq_msg_t m;
    const char ack = 1;
    unsigned long long counted = 0;
    zmq_pollitem_t items[2] = {{s, 0, ZMQ_POLLIN, 0}, {pull, 0, ZMQ_POLLIN, 0}};
    for (;;) {
        if (zmq_poll(items, 2, -1) < 0) die("poll");
        while (items[1].revents & ZMQ_POLLIN) {
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, pull, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            zmq_msg_close(&m);
            counted++;
        }
        if (!(items[0].revents & ZMQ_POLLIN)) continue;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) die("recv");
        int more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        if (!more) {
            if (zmq_send(s, &ack, 1, 0) != 1) die("send");
            continue;
        }
        /* END: the count the client sent, then drain PULL up to it (PUSH
         * never drops, so it arrives). */
        unsigned long long want = 0;
        if (zmq_recv(s, &want, sizeof want, 0) != (int)sizeof want) die("end count");
        while (counted < want) {
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, pull, 0) < 0) die("pull");
            zmq_msg_close(&m);
            counted++;
        }
        if (zmq_send(s, &counted, sizeof counted, 0) != (int)sizeof counted) die("send");
        counted = 0;
    }
    return 0;
}

static int pair(void *s, const char *payload, size_t size) {
    char ack[16];
    if (zmq_send(s, payload, size, 0) != (int)size) return -1;
    return zmq_recv(s, ack, sizeof ack, 0) == 1 ? 0 : -1;
}

/* One-way messages on PUSH until n were sent (n > 0) or ms passed (ms > 0),
 * then END on REQ, answered once the responder counted them all. */
static void stream(void *s, void *push, const char *payload, size_t size, unsigned long n,
                   unsigned long ms) {
    double t0 = now_us(), end = t0 + (double)ms * 1e3;
    unsigned long long sent = 0, got = 0;
    for (;;) {
        if (zmq_send(push, payload, size, 0) != (int)size) die("push");
        sent++;
        if (n > 0 && sent >= n) break;
        if (ms > 0 && now_us() >= end) break;
    }
    if (zmq_send(s, "END", 3, ZMQ_SNDMORE) != 3) die("end");
    if (zmq_send(s, &sent, sizeof sent, 0) != (int)sizeof sent) die("end");
    if (zmq_recv(s, &got, sizeof got, 0) != (int)sizeof got) die("end answer");
    double us = now_us() - t0;
    printf("STREAMED %llu %llu %.2f\n", sent, got, us);
}

static int client(const char *ep, const char *pull_ep) {
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_REQ);
    if (!s || zmq_connect(s, ep) != 0) die("connect");
    void *push = zmq_socket(ctx, ZMQ_PUSH);
    int hwm = STREAM_HWM;
    if (!push || zmq_setsockopt(push, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0) die("push socket");
    if (zmq_connect(push, pull_ep) != 0) die("connect push");
    printf("READY\n");
    fflush(stdout);
    char line[256];
    char *payload = NULL;
    size_t have = 0;
    double *samples = NULL;
    size_t room = 0;
    while (fgets(line, sizeof line, stdin)) {
        char cmd[16];
        unsigned long size = 0, n = 0, ms = 0;
        if (sscanf(line, "%15s %lu %lu %lu", cmd, &size, &n, &ms) < 1) continue;
        if (strcmp(cmd, "QUIT") == 0) break;
        if (size > MAX_SIZE || n > 100000000ul || ms > 3600000ul) {
            printf("ERROR out of range: %s", line);
            fflush(stdout);
            return 1;
        }
        if (size > have || !payload) {
            free(payload);
            payload = malloc(size ? size : 1);
            if (!payload) { printf("ERROR out of memory\n"); return 1; }
            for (size_t i = 0; i < size; i++) payload[i] = (char)(i * 31 + 7);
            have = size;
        }
        if (strcmp(cmd, "PAIRS") == 0) {
            for (unsigned long i = 0; i < n; i++)
                if (pair(s, payload, size) != 0) die("pair");
            printf("DONE\n");
        } else if (strcmp(cmd, "TIMED") == 0) {
            if (n > room) {
                free(samples);
                samples = malloc(n * sizeof *samples);
                if (!samples) { printf("ERROR out of memory\n"); return 1; }
                room = n;
            }
            for (unsigned long i = 0; i < n; i++) {
                double t0 = now_us();
                if (pair(s, payload, size) != 0) die("pair");
                samples[i] = now_us() - t0;
            }
            /* Formatting only after the run: nothing else inside the timing. */
            fputs("TIMED ", stdout);
            for (unsigned long i = 0; i < n; i++) printf(i ? ",%.2f" : "%.2f", samples[i]);
            putchar('\n');
        } else if (strcmp(cmd, "STREAM") == 0 && size > 0 && (n > 0 || ms > 0)) {
            stream(s, push, payload, size, n, ms);
        } else {
            printf("ERROR unknown command %s\n", cmd);
        }
        fflush(stdout);
    }
    zmq_close(s);
    int linger = 0;
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(push);
    zmq_ctx_term(ctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "serve") == 0) return serve(argv[2]);
    if (argc == 4 && strcmp(argv[1], "client") == 0) return client(argv[2], argv[3]);
    fprintf(stderr, "usage: %s serve ADDR | client REP_ENDPOINT PULL_ENDPOINT\n", argv[0]);
    return 2;
}

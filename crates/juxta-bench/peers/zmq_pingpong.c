/*
 * ZeroMQ (libzmq) side of `juxta bench pingpong --impl zmq`: REQ/REP over
 * TCP on loopback, one message and a 1-byte reply per pair, as every other
 * implementation in the bench.
 *
 *   zmq_pingpong serve ADDR    bind a REP socket on ADDR (tcp://127.0.0.1:*),
 *                              print "READY <endpoint>", answer every message
 *                              with 1 byte until killed.
 *   zmq_pingpong client ENDPOINT
 *                              connect a REQ socket, print "READY", then read
 *                              commands on stdin, one answer line each:
 *     PAIRS <size> <n>         n untimed pairs                -> "DONE"
 *     TIMED <size> <n>         n pairs, each timed with CLOCK_MONOTONIC
 *                                                             -> "TIMED us,us,..."
 *     QUIT                     exit 0
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

static int serve(const char *addr) {
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_REP);
    if (!s || zmq_bind(s, addr) != 0) die("bind");
    char ep[256];
    size_t len = sizeof ep;
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &len) != 0) die("endpoint");
    printf("READY %s\n", ep);
    fflush(stdout);
    zmq_msg_t m;
    const char ack = 1;
    for (;;) {
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) die("recv");
        zmq_msg_close(&m);
        if (zmq_send(s, &ack, 1, 0) != 1) die("send");
    }
    return 0;
}

static int pair(void *s, const char *payload, size_t size) {
    char ack[16];
    if (zmq_send(s, payload, size, 0) != (int)size) return -1;
    return zmq_recv(s, ack, sizeof ack, 0) == 1 ? 0 : -1;
}

static int client(const char *ep) {
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_REQ);
    if (!s || zmq_connect(s, ep) != 0) die("connect");
    printf("READY\n");
    fflush(stdout);
    char line[256];
    char *payload = NULL;
    size_t have = 0;
    double *samples = NULL;
    size_t room = 0;
    while (fgets(line, sizeof line, stdin)) {
        char cmd[16];
        unsigned long size = 0, n = 0;
        if (sscanf(line, "%15s %lu %lu", cmd, &size, &n) < 1) continue;
        if (strcmp(cmd, "QUIT") == 0) break;
        if (size > MAX_SIZE || n > 100000000ul) {
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
        } else {
            printf("ERROR unknown command %s\n", cmd);
        }
        fflush(stdout);
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "serve") == 0) return serve(argv[2]);
    if (argc == 3 && strcmp(argv[1], "client") == 0) return client(argv[2]);
    fprintf(stderr, "usage: %s serve ADDR | client ENDPOINT\n", argv[0]);
    return 2;
}

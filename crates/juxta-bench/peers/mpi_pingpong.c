/*
 * Open MPI side of `juxta bench pingpong --impl mpi`: two ranks started by
 * mpirun, MPI_Send of the payload from rank 0 to rank 1 and a 1-byte
 * MPI_Send back per pair, as every other implementation in the bench.
 * Rank 0 reads the bench's commands on stdin (mpirun forwards its stdin to
 * rank 0) and answers on stdout:
 *   at start                   "READY <pid of rank 0>"
 *   PAIRS <size> <n>           n untimed pairs                -> "DONE"
 *   TIMED <size> <n>           n pairs, each timed with MPI_Wtime
 *                                                             -> "TIMED us,us,..."
 *   STREAM <size> <n> <ms>     one-way MPI_Send of the payload back to back
 *                              until n were sent (n > 0) or ms passed (ms > 0),
 *                              then an end message with the count; rank 1
 *                              answers it with the number it received
 *                                                  -> "STREAMED <sent> <received> <us>"
 *   QUIT                       both ranks finalize and exit 0
 * Between commands rank 1 polls for the next one every millisecond instead
 * of spinning in MPI_Recv, so it takes no core while other lanes are timed;
 * the pairs themselves use blocking MPI_Send/MPI_Recv as programs do.
 * Errors: "ERROR <what>" and MPI_Abort.
 *
 * Built by juxta-bench at run time with mpicc -O2.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIZE (64ul << 20)
#define TAG_CTL 1
#define TAG_DATA 2
#define TAG_ACK 3
#define TAG_GO 4
#define TAG_END 5

enum { CMD_PAIRS = 1, CMD_QUIT = 2, CMD_STREAM = 3 };

static void fail(const char *what) {
    printf("ERROR %s\n", what);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static char *grow(char *buf, size_t *have, size_t size) {
    if (size <= *have && buf) return buf;
    free(buf);
    buf = malloc(size ? size : 1);
    if (!buf) fail("out of memory");
    for (size_t i = 0; i < size; i++) buf[i] = (char)(i * 31 + 7);
    *have = size;
    return buf;
}

static void responder(void) {
    char *buf = NULL;
    size_t have = 0;
    char ack = 1;
    for (;;) {
        unsigned long ctl[3];
        /* Between commands (while the bench times other implementations) wait
         * without spinning: a blocking MPI_Recv busy-polls a core. */
        MPI_Request req;
        int done = 0;
        MPI_Irecv(ctl, 3, MPI_UNSIGNED_LONG, 0, TAG_CTL, MPI_COMM_WORLD, &req);
        for (;;) {
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (done) break;
            usleep(1000);
        }
        if (ctl[0] == CMD_QUIT) break;
        buf = grow(buf, &have, ctl[1]);
        /* Awake and ready: rank 0 starts its clock only after this. */
        MPI_Send(&ack, 1, MPI_BYTE, 0, TAG_GO, MPI_COMM_WORLD);
        if (ctl[0] == CMD_STREAM) {
            /* Data until the end message; MPI keeps one sender's messages in
             * order, so the end arrives after every data message. */
            unsigned long long got = 0, sent = 0;
            for (;;) {
                MPI_Status st;
                MPI_Probe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                if (st.MPI_TAG == TAG_END) {
                    MPI_Recv(&sent, 1, MPI_UNSIGNED_LONG_LONG, 0, TAG_END, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                    break;
                }
                MPI_Recv(buf, (int)ctl[1], MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                got++;
            }
            MPI_Send(&got, 1, MPI_UNSIGNED_LONG_LONG, 0, TAG_ACK, MPI_COMM_WORLD);
            continue;
        }
        for (unsigned long i = 0; i < ctl[2]; i++) {
            MPI_Recv(buf, (int)ctl[1], MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&ack, 1, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD);
        }
    }
    free(buf);
}

static void pair(char *payload, unsigned long size) {
    char ack;
    MPI_Send(payload, (int)size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD);
    MPI_Recv(&ack, 1, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static void stream(char *payload, unsigned long size, unsigned long n, unsigned long ms) {
    unsigned long ctl[3] = {CMD_STREAM, size, 0};
    char go;
    MPI_Send(ctl, 3, MPI_UNSIGNED_LONG, 1, TAG_CTL, MPI_COMM_WORLD);
    MPI_Recv(&go, 1, MPI_BYTE, 1, TAG_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double t0 = MPI_Wtime(), end = t0 + (double)ms / 1e3;
    unsigned long long sent = 0, got = 0;
    for (;;) {
        MPI_Send(payload, (int)size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD);
        sent++;
        if (n > 0 && sent >= n) break;
        if (ms > 0 && MPI_Wtime() >= end) break;
    }
    MPI_Send(&sent, 1, MPI_UNSIGNED_LONG_LONG, 1, TAG_END, MPI_COMM_WORLD);
    MPI_Recv(&got, 1, MPI_UNSIGNED_LONG_LONG, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("STREAMED %llu %llu %.2f\n", sent, got, (MPI_Wtime() - t0) * 1e6);
}

static void client(void) {
    printf("READY %ld\n", (long)getpid());
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
        if (strcmp(cmd, "STREAM") == 0) {
            if (size == 0 || size > MAX_SIZE || n > 100000000ul || ms > 3600000ul || (n == 0 && ms == 0))
                fail("out of range");
            payload = grow(payload, &have, size);
            stream(payload, size, n, ms);
            fflush(stdout);
            continue;
        }
        int timed = strcmp(cmd, "TIMED") == 0;
        if (!timed && strcmp(cmd, "PAIRS") != 0) {
            printf("ERROR unknown command %s\n", cmd);
            fflush(stdout);
            continue;
        }
        if (size > MAX_SIZE || n > 100000000ul) fail("out of range");
        payload = grow(payload, &have, size);
        if (timed && n > room) {
            free(samples);
            samples = malloc(n * sizeof *samples);
            if (!samples) fail("out of memory");
            room = n;
        }
        unsigned long ctl[3] = {CMD_PAIRS, size, n};
        char go;
        MPI_Send(ctl, 3, MPI_UNSIGNED_LONG, 1, TAG_CTL, MPI_COMM_WORLD);
        MPI_Recv(&go, 1, MPI_BYTE, 1, TAG_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (unsigned long i = 0; i < n; i++) {
            double t0 = MPI_Wtime();
            pair(payload, size);
            if (timed) samples[i] = (MPI_Wtime() - t0) * 1e6;
        }
        if (timed) {
            /* Formatting only after the run: nothing else inside the timing. */
            fputs("TIMED ", stdout);
            for (unsigned long i = 0; i < n; i++) printf(i ? ",%.2f" : "%.2f", samples[i]);
            putchar('\n');
        } else {
            puts("DONE");
        }
        fflush(stdout);
    }
    unsigned long quit[3] = {CMD_QUIT, 0, 0};
    MPI_Send(quit, 3, MPI_UNSIGNED_LONG, 1, TAG_CTL, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fail("run with exactly 2 ranks");
    } else if (rank == 0) {
        client();
    } else {
        responder();
    }
    MPI_Finalize();
    return 0;
}

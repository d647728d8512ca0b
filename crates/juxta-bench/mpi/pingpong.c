/* Open MPI side of `juxta bench mp`: ping-pong of the de Souza sizes and a
 * 1 MB f64 allreduce, timed the same way as the Juxta communicator.
 *
 *   mpirun -np 2 ./mp_pingpong pingpong WARMUP RUNS PAIRS SIZE...
 *     rank 0 prints one line per size: "pingpong SIZE MEDIAN_RTT_US"
 *   mpirun -np N ./mp_pingpong allreduce DOUBLES REPS
 *     rank 0 prints "allreduce BYTES MEDIAN_US"
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof(double), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void pingpong(int rank, int warmup, int runs, int pairs, int argc, char **argv) {
    for (int a = 0; a < argc; a++) {
        int size = atoi(argv[a]);
        char *buf = calloc(size > 0 ? size : 1, 1);
        int w = warmup;
        if ((long)w * size > (256L << 20)) w = (int)((256L << 20) / (size > 0 ? size : 1));
        if (w < 10) w = 10;
        int total = runs * pairs;
        double *t = malloc(sizeof(double) * total);
        for (int i = 0; i < w + total; i++) {
            double t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
            if (i >= w) t[i - w] = (MPI_Wtime() - t0) * 1e6;
        }
        if (rank == 0) printf("pingpong %d %.3f\n", size, median(t, total));
        fflush(stdout);
        free(t);
        free(buf);
    }
}

static void allreduce(int rank, int n, int reps) {
    double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n);
    double *t = malloc(sizeof(double) * reps);
    for (int i = 0; i < n; i++) x[i] = rank + i % 7;
    for (int i = 0; i < 3 + reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(x, y, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (i >= 3) t[i - 3] = (MPI_Wtime() - t0) * 1e6;
    }
    if (rank == 0) printf("allreduce %ld %.3f\n", (long)n * 8, median(t, reps));
    free(x);
    free(y);
    free(t);
}

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc >= 6 && strcmp(argv[1], "pingpong") == 0) {
        pingpong(rank, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc - 5, argv + 5);
    } else if (argc == 4 && strcmp(argv[1], "allreduce") == 0) {
        allreduce(rank, atoi(argv[2]), atoi(argv[3]));
    } else if (rank == 0) {
        fprintf(stderr, "usage: pingpong W R P SIZE... | allreduce DOUBLES REPS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Finalize();
    return 0;
}

/* Parallel matrix multiplication with Open MPI: row blocks of A
 * scattered, B broadcast, C gathered at rank 0 (timed there, from the
 * scatter to the end of the gather; data made before the clock starts).
 *   mpirun -np P ./matmul_mpi N   rank 0 prints "matmul N SECONDS CHECKSUM"
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "matmul_common.h"

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n <= 0 || n % size != 0) {
        if (rank == 0) fprintf(stderr, "usage: matmul_mpi N (N a multiple of the ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rows = n / size;
    double *a = NULL, *c = NULL, *b = malloc(sizeof(double) * n * n);
    double *ab = malloc(sizeof(double) * rows * n), *cb = calloc((size_t)rows * n, sizeof(double));
    if (rank == 0) {
        a = malloc(sizeof(double) * n * n);
        c = malloc(sizeof(double) * n * n);
        fill(a, b, n);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Scatter(a, rows * n, MPI_DOUBLE, ab, rows * n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(b, n * n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    multiply(ab, b, cb, rows, n);
    MPI_Gather(cb, rows * n, MPI_DOUBLE, c, rows * n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double s = MPI_Wtime() - t0;
    if (rank == 0) printf("matmul %d %.6f %.6e\n", n, s, checksum(c, (long)n * n));
    MPI_Finalize();
    return 0;
}

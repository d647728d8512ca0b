/* Sequential matrix multiplication C = A * B (n x n doubles, row-major,
 * i-k-j loop order), the same kernel and data as the Rust `rust-seq` and
 * the parallel versions. Compiled at -O0 and -O3 by `juxta bench mp`.
 *   ./matmul_seq N   prints "matmul N SECONDS CHECKSUM"
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "matmul_common.h"

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n <= 0) {
        fprintf(stderr, "usage: matmul_seq N\n");
        return 2;
    }
    double *a = malloc(sizeof(double) * n * n), *b = malloc(sizeof(double) * n * n);
    double *c = calloc((size_t)n * n, sizeof(double));
    fill(a, b, n);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    multiply(a, b, c, n, n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("matmul %d %.6f %.6e\n", n, s, checksum(c, (long)n * n));
    return 0;
}

/* Shared by the C matrix multiplications: data and kernel identical to
 * the Rust ones in crates/juxta-bench/src/mp.rs. */
static void fill(double *a, double *b, int n) {
    for (long i = 0; i < (long)n * n; i++) {
        a[i] = (double)((i * 7 + 3) % 17) / 16.0;
        b[i] = (double)((i * 5 + 1) % 13) / 12.0;
    }
}

/* rows x n block of A times B into C (zeroed), i-k-j order. */
static void multiply(const double *a, const double *b, double *c, int rows, int n) {
    for (int i = 0; i < rows; i++) {
        double *ci = c + (long)i * n;
        for (int k = 0; k < n; k++) {
            double aik = a[(long)i * n + k];
            const double *bk = b + (long)k * n;
            for (int j = 0; j < n; j++) ci[j] += aik * bk[j];
        }
    }
}

static double checksum(const double *c, long len) {
    double s = 0;
    for (long i = 0; i < len; i++) s += c[i];
    return s;
}

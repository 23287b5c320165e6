// C[M×N] = A[M×K]·B[K×N], float32, row-major. Step 1: one thread per element of C.
// threadIdx.x runs over columns, so a warp reads a row of B and writes a row of C coalesced.
// Block BLOCK_X×BLOCK_Y threads; grid ceil(N/BLOCK_X) × min(ceil(M/BLOCK_Y), 65535).
#ifndef BLOCK_X
#error "BLOCK_X is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
#ifndef BLOCK_Y
#error "BLOCK_Y is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK_X * BLOCK_Y)
gemm_naive(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
           int M, int N, int K)
{
    const int col = blockIdx.x * BLOCK_X + threadIdx.x;
    if (col >= N) return;

    // gridDim.y stops at 65535, so when M needs more row blocks the grid steps down the rows.
    // 64-bit rows and offsets: M·K, K·N and M·N may exceed 2^31 elements.
    for (size_t row = blockIdx.y * BLOCK_Y + threadIdx.y; row < (size_t)M;
         row += (size_t)gridDim.y * BLOCK_Y) {
        const float* a = A + row * K;
        const float* b = B + col;
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) {
            sum += a[k] * *b;
            b += N;
        }
        C[row * N + col] = sum;
    }
}

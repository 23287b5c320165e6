// C[M×N] = A[M×K]·B[K×N], float32, row-major. Step 1: one thread per element of C.
// threadIdx.x runs over columns, so a warp reads a row of B and writes a row of C coalesced.
// Block BLOCK_X×BLOCK_Y threads; grid ceil(N/BLOCK_X) × ceil(M/BLOCK_Y). When M needs more row
// blocks than the grid's y limit (65535), gemm.matmul launches once per chunk of rows.
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
    const int row = blockIdx.y * BLOCK_Y + threadIdx.y;
    const int col = blockIdx.x * BLOCK_X + threadIdx.x;
    if (row >= M || col >= N) return;

    // 64-bit offsets: M·K, K·N and M·N may exceed 2^31 elements.
    const float* a = A + (size_t)row * K;
    const float* b = B + col;
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) {
        sum += a[k] * *b;
        b += N;
    }
    C[(size_t)row * N + col] = sum;
}

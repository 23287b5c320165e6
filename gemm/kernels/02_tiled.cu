// C[M×N] = A[M×K]·B[K×N], float32, row-major. Step 2: TILE×TILE tiles of A and B staged in
// shared memory, so each value read from global memory serves TILE threads instead of one.
// Block TILE×TILE threads, one per element of a TILE×TILE tile of C; grid ceil(N/TILE) × ceil(M/TILE).
#ifndef TILE
#error "TILE is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
gemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
           int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;

    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // Past an edge of A or B a thread stores zero, so the last, partial tile adds nothing.
        const int ka = k0 + tx, kb = k0 + ty;
        As[ty][tx] = (row < M && ka < K) ? A[(size_t)row * K + ka] : 0.0f;
        Bs[ty][tx] = (kb < K && col < N) ? B[(size_t)kb * N + col] : 0.0f;
        __syncthreads();  // the whole tile is loaded before anyone reads it

#pragma unroll
        for (int k = 0; k < TILE; ++k) sum += As[ty][k] * Bs[k][tx];
        __syncthreads();  // everyone is done reading before the next phase overwrites it
    }
    if (row < M && col < N) C[(size_t)row * N + col] = sum;
}

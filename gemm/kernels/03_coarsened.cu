// C[M×N] = A[M×K]·B[K×N], float32, row-major. Step 3: tiled + coarsened. A block computes a BM×BN
// tile of C from BK-deep shared-memory tiles; each thread keeps TM×TN outputs in registers, so one
// value read from shared memory feeds TN (or TM) multiply-adds instead of one; a warp's lanes form
// a WM×WN warp tile. Block (BM/TM)·(BN/TN) threads (1-D); grid ceil(N/BN) × ceil(M/BM) × splits of K.
#ifndef BM
#error "BM is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
#ifndef BN
#error "BN is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
#ifndef BK
#error "BK is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
// The warp tile: WM×WN outputs, one group of four per lane in each of the 32 lanes (LANES_Y·4 ×
// LANES_X·4 elements), repeated TM/4 × TN/4 times across the block tile (see the kernel).
#ifndef WM
#error "WM is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
#ifndef WN
#error "WN is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
#ifndef TM
#error "TM is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
#ifndef TN
#error "TN is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
// Blocks per multiprocessor the compiler must leave registers for (__launch_bounds__).
#ifndef MIN_BLOCKS
#error "MIN_BLOCKS is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
// 1: each k's values of A and B are read from shared memory into registers one k ahead of the
// multiply-adds that use them, so their latency hides behind the previous k's products.
#ifndef PREFETCH
#error "PREFETCH is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif
// K-steps per pass of the step loop. Unrolled twice, the two shared buffers swap at fixed places
// in the code, so their addresses become constants instead of being computed at every step.
#ifndef UNROLL
#error "UNROLL is not defined: compile-time constants come from the registry, gemm/variants.py"
#endif

#define THREADS_X (BN / TN)
#define THREADS_Y (BM / TM)
#define THREADS (THREADS_X * THREADS_Y)
#define A_LOADS (BM * BK / 4 / THREADS)  // float4 loads per thread per A tile
#define B_LOADS (BK * BN / 4 / THREADS)  // float4 loads per thread per B tile
#define WARPS_X (BN / WN)  // warps across the block tile
#define LANES_Y (WM / TM)  // a warp's 32 lanes as LANES_Y rows × LANES_X columns of thread tiles
#define LANES_X (WN / TN)
#define STRIDE_M (4 * BM / TM)  // rows between a thread's groups of four: BM over TM/4 groups
#define STRIDE_N (4 * BN / TN)
// Row padding of the transposed A tile: the 4-float shift spreads the transposing stores over all
// 32 banks, and keeps each row 16-byte aligned for the float4 reads.
#define AS_PAD 4

static_assert(TM % 4 == 0 && TN % 4 == 0, "a thread's outputs come in groups of four (float4)");
static_assert(BM % TM == 0 && BN % TN == 0, "the block tile splits evenly into thread tiles");
static_assert(BK % 4 == 0 && BN % 4 == 0, "tiles are loaded as float4");
static_assert((BM * BK) % (4 * THREADS) == 0, "the A tile splits evenly over the threads");
static_assert((BK * BN) % (4 * THREADS) == 0, "the B tile splits evenly over the threads");
static_assert(BM % WM == 0 && BN % WN == 0, "the block tile splits evenly into warp tiles");
static_assert(WM % TM == 0 && WN % TN == 0, "the warp tile splits evenly into thread tiles");
static_assert(LANES_Y * LANES_X == 32, "a warp tile holds exactly 32 thread tiles");
static_assert(BM / TM % 4 == 0, "C leaves shared memory in whole rows");

// Entry points of one template, compiled apart so no path changes another's registers (a function
// inlined into kernels made <true> 8.5% slower; C staged in <false> cost its deep slices 4%).
// <true>: float4 tiles where a run-time check finds every row of A, B, C on a 16-byte boundary,
// else one float at a time. <false>: one float at a time; <false, true>: B's and C's as float4;
// <false, false, true>: C staged (below); <false, false, true, true>: that, A's as float4 (checked).
template <bool ALIGNED, bool B_ALIGNED = ALIGNED, bool STAGED_C = false, bool A_ALIGNED = false>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
gemm_coarsened(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
               int M, int N, int K)
{
    // Split-K: block z takes one BK-aligned slice of K and writes its partial product to slice z
    // of a workspace C[z][M][N], which gemm_coarsened_sum_splits adds in a fixed order, so results
    // repeat bit for bit (atomics add as blocks finish). With gridDim.z = 1, C is the output.
    const int lda = K;  // A's row stride stays the full depth; K becomes this slice's depth
    const int slice = ((K - 1) / BK / gridDim.z + 1) * BK;
    const int k_first = blockIdx.z * slice;
    A += k_first;
    B += (size_t)k_first * N;
    C += (size_t)blockIdx.z * M * N;
    K = min(slice, K - k_first);

    // Two buffers: one is read while the next step's tiles go to the other; one barrier a step.
    __shared__ __align__(16) float As[2][BK][BM + AS_PAD];  // A tile, transposed: k-major
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    // <true> checks again and takes the one-float path itself where it must (96x192 tiles past
    // shallow slices, gemm/variants.py). The branch also keeps the compiler from sinking its loads
    // (see next_step); without it, tiles narrower than 256 columns ran 17-29% slower on an H200.
    const bool vec = ALIGNED && (lda % 4 == 0) && (N % 4 == 0) &&
                     ((reinterpret_cast<size_t>(A) | reinterpret_cast<size_t>(B) |
                       reinterpret_cast<size_t>(C)) % 16 == 0);
    const bool vec_b = ALIGNED ? vec : B_ALIGNED;  // <false, true>: the caller checked B and C
    const bool vec_a = ALIGNED ? vec : A_ALIGNED && TM != 12;  // TM = 12 would spill with it

    float4 a_next[A_LOADS], b_next[B_LOADS];

    // Fetch the K-step starting at k0 into registers; zero past every edge of A and B.
    auto fetch = [&](int k0) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int f = tid + l * THREADS;
            const int r = row0 + f / (BK / 4), k = k0 + (f % (BK / 4)) * 4;
            const float* p = A + (size_t)r * lda + k;
            if (vec_a) {
                a_next[l] = (r < M && k < K) ? *reinterpret_cast<const float4*>(p)
                                             : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                const bool in = r < M;
                a_next[l] = make_float4(in && k < K ? p[0] : 0.f, in && k + 1 < K ? p[1] : 0.f,
                                        in && k + 2 < K ? p[2] : 0.f, in && k + 3 < K ? p[3] : 0.f);
            }
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int f = tid + l * THREADS;
            const int k = k0 + f / (BN / 4), c = col0 + (f % (BN / 4)) * 4;
            const float* p = B + (size_t)k * N + c;
            if (vec_b) {
                b_next[l] = (k < K && c < N) ? *reinterpret_cast<const float4*>(p)
                                             : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                const bool in = k < K;
                b_next[l] = make_float4(in && c < N ? p[0] : 0.f, in && c + 1 < N ? p[1] : 0.f,
                                        in && c + 2 < N ? p[2] : 0.f, in && c + 3 < N ? p[3] : 0.f);
            }
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int f = tid + l * THREADS;
            const int r = f / (BK / 4), k = (f % (BK / 4)) * 4;
            As[buf][k + 0][r] = a_next[l].x;
            As[buf][k + 1][r] = a_next[l].y;
            As[buf][k + 2][r] = a_next[l].z;
            As[buf][k + 3][r] = a_next[l].w;
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int f = tid + l * THREADS;
            *reinterpret_cast<float4*>(&Bs[buf][f / (BN / 4)][(f % (BN / 4)) * 4]) = b_next[l];
        }
    };

    // Warp tiling: a warp's lanes lie LANES_Y × LANES_X, each a 4×4 piece of C, so per k a warp
    // reads LANES_Y distinct float4s of A and LANES_X of B from shared memory (the rest are
    // broadcasts): a squarer warp needs fewer wavefronts than one across the block's width.
    const int warp = tid / 32, lane = tid % 32;
    const int ly = lane / LANES_X, lx = lane % LANES_X;
    // A thread owns rows row1 + g*STRIDE_M + i and columns col1 + g*STRIDE_N + j (i, j < 4): its
    // TM/4 × TN/4 groups of four repeat across the block tile, so at every group the warp's
    // float4 reads of a row of A or B are contiguous (with WN = BN, thread row after thread row).
    const int row1 = (warp / WARPS_X) * 4 * LANES_Y + ly * 4;
    const int col1 = (warp % WARPS_X) * 4 * LANES_X + lx * 4;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    // Row k of buffer `stage`: this thread's TM values of A and TN of B, into registers.
    auto load_fragments = [&](float (&a)[TM], float (&b)[TN], int stage, int k) {
#pragma unroll
        for (int g = 0; g < TM / 4; ++g) {
            const float4 v = *reinterpret_cast<const float4*>(&As[stage][k][row1 + g * STRIDE_M]);
            a[g * 4 + 0] = v.x; a[g * 4 + 1] = v.y; a[g * 4 + 2] = v.z; a[g * 4 + 3] = v.w;
        }
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            const float4 v = *reinterpret_cast<const float4*>(&Bs[stage][k][col1 + g * STRIDE_N]);
            b[g * 4 + 0] = v.x; b[g * 4 + 1] = v.y; b[g * 4 + 2] = v.z; b[g * 4 + 3] = v.w;
        }
    };
    // The outer product of one k: TM×TN multiply-adds from TM + TN values.
    auto multiply = [&](const float (&a)[TM], const float (&b)[TN]) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    };

    const int steps = (K - 1) / BK + 1;
    int stage = 0;  // the buffer this K-step reads
    fetch(0);
    stash(0);
    if (!ALIGNED && steps > 1) fetch(BK);
    __syncthreads();

    // The end of a K-step: the next step's tiles stored and visible to every thread, and this
    // step's buffer free. The unaligned path issues the loads of the step after next before the
    // barrier, which the compiler moves no load past: with no branch before their stash it would
    // sink them below the multiply-adds, unhidden. The aligned path's measured faster at the top.
    auto next_step = [&](int step) {
        if (step + 1 < steps) stash(stage ^ 1);  // last read before the previous barrier
        if (!ALIGNED && step + 2 < steps) fetch((step + 2) * BK);
        __syncthreads();
        stage ^= 1;
    };

    float a[2][TM], b[2][TN];
#if PREFETCH
    load_fragments(a[0], b[0], 0, 0);
#endif
#pragma unroll UNROLL
    for (int step = 0; step < steps; ++step) {
        // Global loads for a later step in flight while this step computes.
        if (ALIGNED && step + 1 < steps) fetch((step + 1) * BK);

#pragma unroll
        for (int k = 0; k < BK; ++k) {
#if PREFETCH
            // Before the last k's products, move to the next step, so that its first
            // values are read while those products run.
            if (k == BK - 1) next_step(step);
            load_fragments(a[(k + 1) % 2], b[(k + 1) % 2], stage, (k + 1) % BK);
            multiply(a[k % 2], b[k % 2]);
#else
            load_fragments(a[0], b[0], stage, k);
            multiply(a[0], b[0]);
#endif
        }
#if !PREFETCH
        next_step(step);
#endif
    }

    // STAGED_C: C leaves through shared memory (B's tiles, now free) so that a warp stores 32
    // consecutive floats, four or five sectors, not 8 bytes in each of 16 (4x the L2 writes).
    // There the j-th floats of each four sit together: float4 stores would want acc in aligned
    // register quads, whose bank conflicts slowed the multiply-adds 7%.
    constexpr int PASSES = STRIDE_M * STRIDE_N > 2 * BK * BN ? 2 : 1, PER = 4 / PASSES;
    float* const slab = &Bs[0][0][0];  // a pass's rows: PER of each thread's four
#pragma unroll
    for (int g = 0; STAGED_C && g < TM / 4 * (TN / 4) * PASSES; ++g) {
        const int gi = g / (TN / 4 * PASSES), gj = g / PASSES % (TN / 4), pass = g % PASSES;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < PER * 4; ++i)
            slab[(row1 / 4 * PER + i / 4) * STRIDE_N + i % 4 * (STRIDE_N / 4) + col1 / 4] =
                acc[gi * 4 + pass * PER + i / 4][gj * 4 + i % 4];
        __syncthreads();
        const int col = tid % STRIDE_N, c = col0 + gj * STRIDE_N + col;
        const float* from = slab + tid / STRIDE_N * STRIDE_N + col % 4 * (STRIDE_N / 4) + col / 4;
#pragma unroll
        for (int t = 0; t < STRIDE_M / PASSES * STRIDE_N / THREADS; ++t) {
            const int row = tid / STRIDE_N + t * (THREADS / STRIDE_N);  // in the slab
            const int r = row0 + gi * STRIDE_M + row / PER * 4 + pass * PER + row % PER;
            if (r < M && c < N) C[(size_t)r * N + c] = from[t * THREADS];
        }
    }
#pragma unroll
    for (int gi = 0; !STAGED_C && gi < TM / 4; ++gi)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = row0 + row1 + gi * STRIDE_M + i;
            if (r >= M) continue;
#pragma unroll
            for (int gj = 0; gj < TN / 4; ++gj) {
                const int c = col0 + col1 + gj * STRIDE_N;
                const float* v = &acc[gi * 4 + i][gj * 4];
                float* p = C + (size_t)r * N + c;
                if (vec_b && c < N) {
                    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (c + j < N) p[j] = v[j];
                }
            }
        }
}

// The entry points by name (gemm/variants.py: entry_names).
template __global__ void gemm_coarsened<true>(const float*, const float*, float*, int, int, int);
template __global__ void gemm_coarsened<false>(const float*, const float*, float*, int, int, int);
template __global__ void gemm_coarsened<false, true>(const float*, const float*, float*, int,
                                                     int, int);
template __global__ void gemm_coarsened<false, false, true>(const float*, const float*, float*,
                                                            int, int, int);
template __global__ void gemm_coarsened<false, false, true, true>(const float*, const float*,
                                                                  float*, int, int, int);

// Split-K's second pass: C = sum over z of W[z], added in order z = 0, 1, ... for every element.
extern "C" __global__ void gemm_coarsened_sum_splits(const float* __restrict__ W,
                                                     float* __restrict__ C, long long count,
                                                     int splits)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
         i += (long long)gridDim.x * blockDim.x) {
        float sum = W[i];
        for (int z = 1; z < splits; ++z) sum += W[i + z * count];
        C[i] = sum;
    }
}

// y = softmax(x) along each row of a row-major float32 rows×cols matrix. Step 2: one block a
// row; its BLOCK threads read the row with unit stride (coalesced) and combine their partial
// maximum and sum through a tree in shared memory.
#ifndef BLOCK
#error "BLOCK is not defined: compile-time constants come from the registry, softmax/__init__.py"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_shared(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    static_assert((BLOCK & (BLOCK - 1)) == 0, "BLOCK is a power of two");
    __shared__ float part[BLOCK];
    const int t = threadIdx.x;
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;

    float m = __int_as_float(0xff800000);  // -infinity
    for (int j = t; j < cols; j += BLOCK) m = fmaxf(m, in[j]);
    part[t] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) part[t] = fmaxf(part[t], part[t + s]);
        __syncthreads();
    }
    m = part[0];
    __syncthreads();  // everyone has read the maximum before part[] is reused

    float sum = 0.0f;
    for (int j = t; j < cols; j += BLOCK) sum += expf(in[j] - m);
    part[t] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    const float inv = 1.0f / part[0];
    for (int j = t; j < cols; j += BLOCK) out[j] = expf(in[j] - m) * inv;
}

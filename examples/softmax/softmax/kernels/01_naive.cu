// y = softmax(x) along each row of a row-major float32 rows×cols matrix. Step 1: one thread a
// row, three passes over it (maximum, sum of exponentials, output). Neighbouring threads read
// addresses a whole row apart, so no load is coalesced.
#ifndef BLOCK
#error "BLOCK is not defined: compile-time constants come from the registry, softmax/__init__.py"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_naive(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const int row = blockIdx.x * BLOCK + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;

    float m = __int_as_float(0xff800000);  // -infinity
    for (int j = 0; j < cols; ++j) m = fmaxf(m, in[j]);
    float sum = 0.0f;
    for (int j = 0; j < cols; ++j) sum += expf(in[j] - m);
    const float inv = 1.0f / sum;
    for (int j = 0; j < cols; ++j) out[j] = expf(in[j] - m) * inv;
}

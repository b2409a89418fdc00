// Kernels of the driver-API programs (tests/apps/driver_api.c, tests/gpu/driver/*.c), built
// into a fat binary and into PTX that the programs embed (bin2c) and load with cuModule* and
// the JIT linker. extern "C": the programs look them up by these names.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

// C = A * B for n x n row-major matrices, 16 x 16 tiles in shared memory.
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int n) {
  __shared__ float ta[16][16], tb[16][16];
  int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0;
  for (int t = 0; t < (n + 15) / 16; t++) {
    int ac = t * 16 + threadIdx.x, br = t * 16 + threadIdx.y;
    ta[threadIdx.y][threadIdx.x] = row < n && ac < n ? A[row * n + ac] : 0.f;
    tb[threadIdx.y][threadIdx.x] = br < n && col < n ? B[br * n + col] : 0.f;
    __syncthreads();
    for (int k = 0; k < 16; k++) acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) C[row * n + col] = acc;
}

__device__ int counter;
extern "C" __global__ void bump(int by) { atomicAdd(&counter, by); }

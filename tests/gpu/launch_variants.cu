// launch_variants: every way to launch a kernel through the runtime.
//  - cudaLaunchKernel (C API, args array) and its C++ template overload;
//  - cudaLaunchKernelExC with cudaLaunchAttributeClusterDimension (1D and 2D clusters on sm_90,
//    checked through cooperative_groups::this_cluster() and distributed shared memory) plus
//    cudaLaunchAttributeClusterSchedulingPolicyPreference; cudaOccupancyMaxActiveClusters;
//  - the cudaLaunchKernelEx C++ template with cudaLaunchAttributePriority;
//  - cudaLaunchCooperativeKernel and cudaLaunchKernelExC + cudaLaunchAttributeCooperative with
//    a grid-wide cooperative_groups::this_grid().sync() (no -rdc needed with CUDA >= 11);
//  - launches on stream 0 (legacy), cudaStreamLegacy and cudaStreamPerThread, and the implicit
//    synchronisation between the legacy default stream and blocking streams.
#define GPU_TEST_NAME "launch_variants"
#include "gpu_test.h"

#include <cooperative_groups.h>

#include <vector>

namespace cg = cooperative_groups;

__global__ void affine(int* out, const int* in, int n, int mul, int add) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * mul + add;
}

// Per block: {cluster rank, cluster size, rank read from the next block's shared memory,
// cluster dim x, cluster dim y}.
__global__ void cluster_kernel(int* out) {
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ int my_rank;
  const unsigned rank = cluster.block_rank();
  const unsigned size = cluster.num_blocks();
  if (threadIdx.x == 0) my_rank = static_cast<int>(rank);
  cluster.sync();  // every block's my_rank is written
  const int* next = cluster.map_shared_rank(&my_rank, (rank + 1) % size);
  if (threadIdx.x == 0) {
    const int b = blockIdx.y * gridDim.x + blockIdx.x;
    out[b * 5 + 0] = static_cast<int>(rank);
    out[b * 5 + 1] = static_cast<int>(size);
    out[b * 5 + 2] = *next;  // distributed shared memory read
    out[b * 5 + 3] = static_cast<int>(cluster.dim_blocks().x);
    out[b * 5 + 4] = static_cast<int>(cluster.dim_blocks().y);
  }
  cluster.sync();  // keep shared memory alive until the neighbours have read it
}

// Phase 1 writes data, grid-wide barrier, phase 2 reads elements other blocks wrote.
__global__ void coop_kernel(int* data, int* out, int n, int shift, int* valid) {
  cg::grid_group grid = cg::this_grid();
  if (grid.thread_rank() == 0) *valid = grid.is_valid() ? 1 : 0;
  for (unsigned long long i = grid.thread_rank(); i < static_cast<unsigned long long>(n);
       i += grid.size())
    data[i] = static_cast<int>(i) * 3 + shift;
  grid.sync();
  for (unsigned long long i = grid.thread_rank(); i < static_cast<unsigned long long>(n);
       i += grid.size())
    out[i] = data[(i + 7919) % n] - data[n - 1 - i];
}

__global__ void spin_then_write(int* p, int v, uint64_t ns) {
  if (threadIdx.x == 0) {
    gpu_test::spin_ns(ns);
    *p = v;
  }
}

__global__ void copy_one(int* dst, const int* src) { *dst = *src; }

static void check_affine(const std::vector<int>& in, int* d_out, int n, int mul, int add,
                         const char* how) {
  std::vector<int> out(n);
  CK(cudaMemcpy(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i)
    if (out[i] != in[i] * mul + add)
      gpu_test::fail("%s: out[%d] = %d, want %d", how, i, out[i], in[i] * mul + add);
}

static void check_clusters(int* d_out, dim3 grid, dim3 cdim, const char* how) {
  const int blocks = grid.x * grid.y;
  std::vector<int> out(blocks * 5);
  CK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int), cudaMemcpyDeviceToHost));
  const int csize = cdim.x * cdim.y;
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      const int b = by * grid.x + bx;
      const int rank = (bx % cdim.x) + (by % cdim.y) * cdim.x;
      const int* o = &out[b * 5];
      if (o[0] != rank || o[1] != csize || o[2] != (rank + 1) % csize ||
          o[3] != int(cdim.x) || o[4] != int(cdim.y))
        gpu_test::fail("%s: block (%u,%u) saw rank %d size %d neighbour %d dims %dx%d, want "
                       "rank %d size %d neighbour %d dims %ux%u",
                       how, bx, by, o[0], o[1], o[2], o[3], o[4], rank, csize,
                       (rank + 1) % csize, cdim.x, cdim.y);
    }
}

int main() {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  int launches = 0;

  const int n = 100003;
  std::vector<int> in(n);
  gpu_test::Rng rng(0x5eed000d);
  for (auto& v : in) v = rng.range(-50000, 50000);
  int *d_in, *d_out;
  CK(cudaMalloc(&d_in, n * sizeof(int)));
  CK(cudaMalloc(&d_out, n * sizeof(int)));
  CK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  const dim3 grid((n + 255) / 256), block(256);

  // --- cudaLaunchKernel: C API and C++ template -----------------------------------------------
  {
    int mul = 3, add = -11;
    void* args[] = {&d_out, &d_in, const_cast<int*>(&n), &mul, &add};
    CK(cudaLaunchKernel(reinterpret_cast<const void*>(affine), grid, block, args, 0, nullptr));
    ++launches;
    check_affine(in, d_out, n, mul, add, "cudaLaunchKernel (C API)");
    mul = -2;
    add = 5;
    CK(cudaLaunchKernel(affine, grid, block, args, 0, nullptr));  // template overload
    ++launches;
    check_affine(in, d_out, n, mul, add, "cudaLaunchKernel (template)");
  }

  // --- cluster launches ------------------------------------------------------------------------
  if (!prop.clusterLaunch) gpu_test::fail("device reports no cluster launch support (sm_%d%d)",
                                          prop.major, prop.minor);
  int* d_cl;
  CK(cudaMalloc(&d_cl, 64 * 64 * 5 * sizeof(int)));
  int max_clusters = 0;
  {
    const dim3 cgrid(32, 1), cdim(4, 1, 1);
    cudaLaunchAttribute attrs[2] = {};
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = cdim.x;
    attrs[0].val.clusterDim.y = cdim.y;
    attrs[0].val.clusterDim.z = cdim.z;
    attrs[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
    attrs[1].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicySpread;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = cgrid;
    cfg.blockDim = dim3(64);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = nullptr;
    cfg.attrs = attrs;
    cfg.numAttrs = 1;  // the occupancy query gets the cluster dimension only
    CK(cudaOccupancyMaxActiveClusters(&max_clusters, cluster_kernel, &cfg));
    if (max_clusters < 1) gpu_test::fail("cudaOccupancyMaxActiveClusters = %d", max_clusters);
    cfg.numAttrs = 2;
    CK(cudaMemset(d_cl, 0xFF, 64 * 64 * 5 * sizeof(int)));
    void* args[] = {&d_cl};
    CK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(cluster_kernel), args));
    ++launches;
    check_clusters(d_cl, cgrid, cdim, "cudaLaunchKernelExC cluster 4x1x1");
  }
  {
    const dim3 cgrid(8, 6), cdim(2, 2, 1);
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cdim.x;
    attr.val.clusterDim.y = cdim.y;
    attr.val.clusterDim.z = cdim.z;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = cgrid;
    cfg.blockDim = dim3(32);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CK(cudaMemset(d_cl, 0xFF, 64 * 64 * 5 * sizeof(int)));
    CK(cudaLaunchKernelEx(&cfg, cluster_kernel, d_cl));  // C++ template -> ExC
    ++launches;
    check_clusters(d_cl, cgrid, cdim, "cudaLaunchKernelEx cluster 2x2x1");
  }
  {
    // Without a cluster attribute every block is its own 1x1x1 cluster.
    const dim3 cgrid(5, 3);
    CK(cudaMemset(d_cl, 0xFF, 64 * 64 * 5 * sizeof(int)));
    cluster_kernel<<<cgrid, 32>>>(d_cl);
    CK_LAUNCH("cluster_kernel (no cluster)");
    ++launches;
    check_clusters(d_cl, cgrid, dim3(1, 1, 1), "<<<>>> without clusters");
  }

  // --- cudaLaunchKernelEx template with a priority attribute ------------------------------------
  {
    int least = 0, greatest = 0;
    CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributePriority;
    attr.val.priority = greatest;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, affine, d_out, static_cast<const int*>(d_in), n, 7, 100));
    ++launches;
    check_affine(in, d_out, n, 7, 100, "cudaLaunchKernelEx + priority");
  }

  // --- cooperative launches with a grid-wide barrier ----------------------------------------------
  if (!prop.cooperativeLaunch) gpu_test::fail("device reports no cooperative launch support");
  {
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_kernel, 256, 0));
    if (per_sm < 1) gpu_test::fail("coop_kernel occupancy %d", per_sm);
    const int blocks = prop.multiProcessorCount * (per_sm < 2 ? per_sm : 2);
    const int cn = 1 << 20;
    int *d_data, *d_res, *d_valid;
    CK(cudaMalloc(&d_data, cn * sizeof(int)));
    CK(cudaMalloc(&d_res, cn * sizeof(int)));
    CK(cudaMalloc(&d_valid, sizeof(int)));
    std::vector<int> res(cn);
    for (int variant = 0; variant < 2; ++variant) {
      int shift = variant ? -4242 : 17;
      int cnv = cn;
      CK(cudaMemset(d_data, 0xFF, cn * sizeof(int)));
      CK(cudaMemset(d_valid, 0, sizeof(int)));
      void* args[] = {&d_data, &d_res, &cnv, &shift, &d_valid};
      if (variant == 0) {
        CK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop_kernel), dim3(blocks),
                                       dim3(256), args, 0, nullptr));
      } else {
        cudaLaunchAttribute attr{};
        attr.id = cudaLaunchAttributeCooperative;
        attr.val.cooperative = 1;
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(256);
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        CK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(coop_kernel), args));
      }
      ++launches;
      CK(cudaMemcpy(res.data(), d_res, cn * sizeof(int), cudaMemcpyDeviceToHost));
      int valid = 0;
      CK(cudaMemcpy(&valid, d_valid, sizeof valid, cudaMemcpyDeviceToHost));
      if (valid != 1) gpu_test::fail("cooperative variant %d: grid.is_valid() false", variant);
      for (int i = 0; i < cn; ++i) {
        const int a = static_cast<int>((i + 7919LL) % cn), b = cn - 1 - i;
        const int want = (a * 3 + shift) - (b * 3 + shift);
        if (res[i] != want)
          gpu_test::fail("cooperative variant %d (%d blocks): out[%d] = %d, want %d (grid.sync "
                         "not honoured?)",
                         variant, blocks, i, res[i], want);
      }
    }
    CK(cudaFree(d_data));
    CK(cudaFree(d_res));
    CK(cudaFree(d_valid));
  }

  // --- default-stream flavours --------------------------------------------------------------------
  affine<<<grid, block>>>(d_out, d_in, n, 1, 1);  // stream 0 = legacy here
  CK_LAUNCH("affine on stream 0");
  ++launches;
  check_affine(in, d_out, n, 1, 1, "<<<>>> on stream 0");
  affine<<<grid, block, 0, cudaStreamLegacy>>>(d_out, d_in, n, 1, 2);
  CK_LAUNCH("affine on cudaStreamLegacy");
  ++launches;
  CK(cudaStreamSynchronize(cudaStreamLegacy));
  check_affine(in, d_out, n, 1, 2, "<<<>>> on cudaStreamLegacy");
  affine<<<grid, block, 0, cudaStreamPerThread>>>(d_out, d_in, n, 1, 3);
  CK_LAUNCH("affine on cudaStreamPerThread");
  ++launches;
  CK(cudaStreamSynchronize(cudaStreamPerThread));
  check_affine(in, d_out, n, 1, 3, "<<<>>> on cudaStreamPerThread");
  {
    int mul = 1, add = 4;
    void* args[] = {&d_out, &d_in, const_cast<int*>(&n), &mul, &add};
    CK(cudaLaunchKernel(reinterpret_cast<const void*>(affine), grid, block, args, 0,
                        cudaStreamPerThread));
    ++launches;
    CK(cudaStreamSynchronize(cudaStreamPerThread));
    check_affine(in, d_out, n, 1, 4, "cudaLaunchKernel on cudaStreamPerThread");
    add = 5;
    CK(cudaLaunchKernel(reinterpret_cast<const void*>(affine), grid, block, args, 0,
                        cudaStreamLegacy));
    ++launches;
    check_affine(in, d_out, n, 1, 5, "cudaLaunchKernel on cudaStreamLegacy");
  }

  // Implicit synchronisation: blocking stream -> legacy stream -> blocking stream / per-thread.
  {
    cudaStream_t blocking;
    CK(cudaStreamCreate(&blocking));
    int* d_flags;
    CK(cudaMalloc(&d_flags, 8 * sizeof(int)));
    CK(cudaMemset(d_flags, 0, 8 * sizeof(int)));
    CK(cudaDeviceSynchronize());
    const uint64_t spin = 40ull * 1000 * 1000;
    spin_then_write<<<1, 32, 0, blocking>>>(d_flags + 0, 7, spin);
    copy_one<<<1, 1, 0, cudaStreamLegacy>>>(d_flags + 1, d_flags + 0);  // waits for `blocking`
    spin_then_write<<<1, 32>>>(d_flags + 2, 9, spin);                     // legacy
    copy_one<<<1, 1, 0, blocking>>>(d_flags + 3, d_flags + 2);           // waits for legacy
    spin_then_write<<<1, 32, 0, cudaStreamLegacy>>>(d_flags + 4, 11, spin);
    copy_one<<<1, 1, 0, cudaStreamPerThread>>>(d_flags + 5, d_flags + 4);  // waits for legacy
    CK_LAUNCH("implicit-sync kernels");
    launches += 6;
    CK(cudaDeviceSynchronize());
    int flags[8];
    CK(cudaMemcpy(flags, d_flags, sizeof flags, cudaMemcpyDeviceToHost));
    if (flags[1] != 7)
      gpu_test::fail("legacy-stream kernel ran before earlier work on a blocking stream "
                     "finished (read %d, want 7)", flags[1]);
    if (flags[3] != 9)
      gpu_test::fail("blocking-stream kernel ran before earlier legacy-stream work finished "
                     "(read %d, want 9)", flags[3]);
    if (flags[5] != 11)
      gpu_test::fail("cudaStreamPerThread kernel ran before earlier legacy-stream work finished "
                     "(read %d, want 11)", flags[5]);
    CK(cudaStreamDestroy(blocking));
    CK(cudaFree(d_flags));
  }

  CK(cudaFree(d_in));
  CK(cudaFree(d_out));
  CK(cudaFree(d_cl));
  gpu_test::pass("%d launches: cudaLaunchKernel (C/template), cudaLaunchKernelEx[C] with cluster "
                 "4x1/2x2 (max %d active clusters), scheduling policy, priority, cooperative "
                 "(2 ways), stream 0/legacy/per-thread and implicit legacy sync",
                 launches, max_clusters);
  return 0;
}

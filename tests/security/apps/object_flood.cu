// object_flood: the review's N4 attacks (issue 40) as a real application through the shim -
// objects a tenant can make its worker hold without charging its memory quota. One mode per
// run; each prints what it made and the first refusal, then "DONE", and (with a hold time)
// keeps everything until it is killed or the time passes.
//   object_flood layouts N [hold_s]  cublasLtMatrixLayoutCreate N times (posted calls), then
//                                    cublasLtCreate (answered: shows the refusal)
//   object_flood graphs N [hold_s]   cudaGraphCreate N times
//   object_flood nodes N [hold_s]    one graph, cudaGraphAddEmptyNode N times
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

void Hold(int seconds) {
  std::printf("DONE\n");
  std::fflush(stdout);
  for (int i = 0; i < seconds * 10; i++) usleep(100000);
}

int Layouts(long n, int hold) {
  long made = 0;
  for (; made < n; made++) {
    cublasLtMatrixLayout_t l = nullptr;
    cublasStatus_t st = cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 16, 16, 16);
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::printf("layout %ld refused: %d\n", made, static_cast<int>(st));
      break;
    }
  }
  // An answered creation after the flood: the session's limit, in cuBLAS's own status.
  cublasLtHandle_t h = nullptr;
  cublasStatus_t st = cublasLtCreate(&h);
  std::printf("layouts %ld; then cublasLtCreate -> %d (%s)\n", made, static_cast<int>(st),
              st == CUBLAS_STATUS_ALLOC_FAILED ? "CUBLAS_STATUS_ALLOC_FAILED" : "other");
  Hold(hold);
  return 0;
}

int Graphs(long n, int hold) {
  long made = 0;
  cudaError_t first = cudaSuccess;
  for (; made < n; made++) {
    cudaGraph_t g = nullptr;
    first = cudaGraphCreate(&g, 0);
    if (first != cudaSuccess) break;
  }
  std::printf("graphs %ld; first error %s\n", made, cudaGetErrorName(first));
  Hold(hold);
  return 0;
}

int Nodes(long n, int hold) {
  cudaGraph_t g = nullptr;
  if (cudaGraphCreate(&g, 0) != cudaSuccess) {
    std::printf("FAIL cudaGraphCreate\n");
    return 1;
  }
  long made = 0;
  cudaError_t first = cudaSuccess;
  for (; made < n; made++) {
    cudaGraphNode_t node = nullptr;
    first = cudaGraphAddEmptyNode(&node, g, nullptr, 0);
    if (first != cudaSuccess) break;
  }
  std::printf("nodes %ld; first error %s\n", made, cudaGetErrorName(first));
  Hold(hold);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: object_flood layouts|graphs|nodes N [hold_s]\n");
    return 2;
  }
  long n = std::atol(argv[2]);
  int hold = argc > 3 ? std::atoi(argv[3]) : 0;
  if (std::strcmp(argv[1], "layouts") == 0) return Layouts(n, hold);
  if (std::strcmp(argv[1], "graphs") == 0) return Graphs(n, hold);
  if (std::strcmp(argv[1], "nodes") == 0) return Nodes(n, hold);
  std::fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}

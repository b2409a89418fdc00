// Opaque 64-bit handles for per-session objects (streams, events, modules, functions).
// A handle is (kind << 56) | (window << 48) | (n << 4): its kind in the top byte, so a stream
// id passed as an event is rejected; the session's window (Hello.window: the client's index
// for this server) next, so the handles of sessions on several servers never collide in one
// application; ids are never reused within a table. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "remora/base/status.h"

namespace remora {

enum class HandleKind : uint8_t {
  kStream = 0x51,
  kEvent = 0x52,
  kModule = 0x53,
  kFunction = 0x54,
  kVariable = 0x55,
  kPool = 0x56,
  kPhysical = 0x57,  // cuMemCreate's physical memory (CUmemGenericAllocationHandle)
  kLink = 0x58,      // a JIT link state (cuLinkCreate)
  // 0x59-0x5f: the driver API. 0x60-0x6f: graphs, arrays, textures (issue 14).
  kGraph = 0x60,
  kGraphExec = 0x61,
  kGraphNode = 0x62,
  kUserObject = 0x63,
  kArray = 0x64,
  kMipmappedArray = 0x65,
  kTexObject = 0x66,
  kSurfObject = 0x67,
  // 0x70-0xcf (kFirstLibraryKind..kLastLibraryKind): objects of the served libraries (issue
  // 13), kept in the worker's LibObjects (server/worker/session/lib_objects.h) under ids the
  // client mints. Declared here only: tools/gen/apigen (roles.py, LIB_KINDS) reads the
  // enumerators of this range from this file for the .api descriptions' handle(KIND).
  kCublasHandle = 0x70,
  kCublasLtHandle = 0x71,
  kCublasLtMatmulDesc = 0x72,
  kCublasLtMatrixLayout = 0x73,
  kCublasLtMatmulPreference = 0x74,
  kCublasLtMatrixTransformDesc = 0x75,
  kCudnnHandle = 0x76,
  kCudnnBackendDescriptor = 0x77,
  kCudnnTensorDescriptor = 0x78,
  kCudnnFilterDescriptor = 0x79,
  kCudnnConvolutionDescriptor = 0x7a,
  kCudnnActivationDescriptor = 0x7b,
  kCudnnPoolingDescriptor = 0x7c,
  kCudnnDropoutDescriptor = 0x7d,
  kCudnnRnnDescriptor = 0x7e,
  kCudnnRnnDataDescriptor = 0x7f,
  kCudnnMiscDescriptor = 0x80,
  kCudnnCtcLossDescriptor = 0x81,
  kCufftPlan = 0x82,
  kCurandGenerator = 0x83,
  kCusolverDnHandle = 0x84,
  kCusolverDnParams = 0x85,
  kCusolverSyevjInfo = 0x86,
  kCusolverGesvdjInfo = 0x87,
  kCusparseHandle = 0x88,
  kCusparseMatDescr = 0x89,
  kCusparseSpMatDescr = 0x8a,
  kCusparseDnMatDescr = 0x8b,
  kCusparseDnVecDescr = 0x8c,
  kCusparseSpVecDescr = 0x8d,
  kCusparseSpGEMMDescr = 0x8e,
  kCusparseSpSVDescr = 0x8f,
  // 0xa0-0xaf: cuDNN's other descriptors (issue 42), objects of the math libraries too.
  kCudnnLrnDescriptor = 0xa0,
  kCudnnOpTensorDescriptor = 0xa1,
  kCudnnReduceTensorDescriptor = 0xa2,
  kCudnnSpatialTransformerDescriptor = 0xa3,
  kCudnnTensorTransformDescriptor = 0xa4,
  kCudnnSeqDataDescriptor = 0xa5,
  kCudnnAttnDescriptor = 0xa6,
  kCudnnFusedOpsConstParamPack = 0xa7,
  kCudnnFusedOpsVariantParamPack = 0xa8,
  kCudnnFusedOpsPlan = 0xa9,
  // 0x90-0x9f: NCCL's objects (issue 44), kept like the math libraries' (same LibObjects).
  kNcclComm = 0x90,          // a communicator
  kNcclRegistration = 0x91,  // a buffer registered with ncclCommRegister
  kNcclWindow = 0x92,        // a window of ncclCommWindowRegister
  // 0xb0-0xcf: more objects of cuSOLVER, cuSPARSE, cuRAND, cuFFT and cuBLAS (issue 42).
  kCusolverSpHandle = 0xb0,
  kCusolverRfHandle = 0xb1,
  kCusolverMgHandle = 0xb2,
  kCusolverCsrqrInfo = 0xb3,
  kCusolverIrsParams = 0xb4,
  kCusolverIrsInfos = 0xb5,
  kCusolverMgGrid = 0xb6,
  kCusolverMgMatDesc = 0xb7,
  kCusparseSpSMDescr = 0xb8,
  kCusparseSpMMOpPlan = 0xb9,
  kCusparseCsric02Info = 0xba,
  kCusparseCsrilu02Info = 0xbb,
  kCusparseBsrsv2Info = 0xbc,
  kCusparseBsrsm2Info = 0xbd,
  kCusparseBsric02Info = 0xbe,
  kCusparseBsrilu02Info = 0xbf,
  kCusparseColorInfo = 0xc0,
  kCusparsePruneInfo = 0xc1,
  kCusparseCsru2csrInfo = 0xc2,
  kCurandDistribution = 0xc3,
  kCufftXtDescriptor = 0xc4,
  kCublasXtHandle = 0xc5,
  kCusolverCsrqrInfoHost = 0xc6,
  kCusolverCsrcholInfo = 0xc7,
  kCusolverCsrcholInfoHost = 0xc8,
  kCusolverCsrluInfoHost = 0xc9,
  kCublasLtEmulationDesc = 0xca,
};

// The range of the served libraries' object kinds (above; roles.py reads these two lines).
inline constexpr uint8_t kFirstLibraryKind = 0x70;
inline constexpr uint8_t kLastLibraryKind = 0xcf;

const char* HandleKindName(HandleKind kind);

// Whether an object of kind `have` may be passed where a handle of kind `want` is asked for:
// its own kind, or a cuBLAS handle for a cuBLASLt handle (a cublasHandle_t holds a cuBLASLt
// context and may be cast to cublasLtHandle_t; PyTorch passes its cuBLAS handle to every
// cublasLt* call). The library receives the object's own handle, as it would natively.
constexpr bool HandleKindServes(HandleKind have, HandleKind want) {
  return have == want || (want == HandleKind::kCublasLtHandle && have == HandleKind::kCublasHandle);
}

template <typename T>
class HandleTable {
 public:
  explicit HandleTable(HandleKind kind) : kind_(kind) {}

  // Mints later handles in `window` (set before the first Insert; handles already minted
  // keep theirs).
  void SetWindow(uint8_t window) { window_ = window; }
  uint64_t Insert(T value) {
    uint64_t id = (uint64_t{static_cast<uint8_t>(kind_)} << 56) | (uint64_t{window_} << 48) | (next_++ << 4);
    map_.emplace(id, std::move(value));
    return id;
  }
  // Inserts under a handle another server minted (planned migration): it must be of this
  // table's kind and window and not live here; later handles are minted after it.
  Status InsertAt(uint64_t id, T value) {
    if ((id >> 56) != static_cast<uint8_t>(kind_) || ((id >> 48) & 0xff) != window_ || (id & 0xf) != 0)
      return Error(Err::kInvalidValue, "0x{:x} is not a {} handle of window {}", id, HandleKindName(kind_), window_);
    if (!map_.emplace(id, std::move(value)).second)
      return Error(Err::kInvalidValue, "{} 0x{:x} already exists", HandleKindName(kind_), id);
    next_ = std::max(next_, ((id & ((uint64_t{1} << 48) - 1)) >> 4) + 1);
    return Status::Ok();
  }
  // nullptr if `id` is not a live handle of this table.
  T* Find(uint64_t id) {
    auto it = map_.find(id);
    return it == map_.end() ? nullptr : &it->second;
  }
  Result<T*> Get(uint64_t id) {
    if (T* v = Find(id)) return v;
    return Error(Err::kInvalidValue, "0x{:x} is not a {} of this session", id, HandleKindName(kind_));
  }
  bool Erase(uint64_t id) { return map_.erase(id) > 0; }
  // Forgets every handle (ids are still never reused).
  void Clear() { map_.clear(); }
  size_t size() const { return map_.size(); }
  template <typename Fn>
  void ForEach(Fn&& fn) {
    for (auto& [id, v] : map_) fn(id, v);
  }
  std::vector<uint64_t> Ids() const {
    std::vector<uint64_t> ids;
    for (auto& [id, _] : map_) ids.push_back(id);
    return ids;
  }

 private:
  HandleKind kind_;
  uint8_t window_ = 0;
  uint64_t next_ = 1;  // 44 bits: past 2^44 it would run into the window (never reached)
  std::unordered_map<uint64_t, T> map_;
};

}  // namespace remora

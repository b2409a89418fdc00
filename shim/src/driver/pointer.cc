// Pointer attributes, answered from the client's allocation tables without a round trip
// (Triton and PyTorch ask on every kernel argument and every new segment). The tables hold
// device allocations (cudaMalloc, pitched, stream-ordered, reserved virtual ranges) and host
// memory the client pinned or registered; the worker stays authoritative for every access.
#include <cstring>

#include "driver/contexts.h"
#include "driver/driver.h"
#include "export.h"
#include "process.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

struct Known {
  bool device = false;  // else pinned host memory
  Allocation a;
};

std::optional<Known> Lookup(CUdeviceptr ptr) {
  Runtime& rt = Runtime::Get();
  // Pinned memory first: over tcp small pinned memory is also a managed allocation
  // (api_pinned.cc, HostAlloc), and is host memory to the application.
  if (auto h = rt.FindHost(reinterpret_cast<const void*>(static_cast<uintptr_t>(ptr)))) return Known{false, *h};
  if (auto d = rt.FindDevice(ptr)) return Known{true, *d};
  return std::nullopt;
}

// Writes attribute `attr` of `ptr` (known as `k`, or unknown) to `data`. kInvalidValue for
// an attribute an unknown pointer does not have.
CUresult Attribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr, const std::optional<Known>& k) {
  auto put = [data](auto v) {
    std::memcpy(data, &v, sizeof(v));
    return CUDA_SUCCESS;
  };
  if (!k) {
    // Memory CUDA does not know: cuPointerGetAttributes reports it as such (zeros);
    // cuPointerGetAttribute refuses (the caller checks).
    return CUDA_ERROR_INVALID_VALUE;
  }
  const Allocation& a = k->a;
  int device = k->device ? a.device : Thread().device;
  // Managed memory is device memory whose address is also the host's (managed.h): allocated
  // so, or a module's managed variable mapped here.
  bool managed = k->device && (a.kind == AllocKind::kManaged ||
                               (a.kind == AllocKind::kModule && Runtime::Get().managed().Contains(ptr)));
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      Contexts& ctxs = Process::Get().contexts();
      Context* owner = k->device ? ctxs.OwnerOf(a.base, &Owned::allocations) : nullptr;
      return put(reinterpret_cast<CUcontext>(owner ? owner : ctxs.Primary(device)));
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      return put(static_cast<unsigned>(k->device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST));
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      return put(ptr);  // unified addressing: the same address on both sides
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (k->device && !managed) return CUDA_ERROR_INVALID_VALUE;
      return put(reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)));
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      return put(1u);  // Remora's synchronous copies and memsets always complete before returning
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      return put(static_cast<unsigned long long>(a.base));  // unique while the allocation lives
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      return put(managed ? 1u : 0u);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      return put(device);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      return put(0u);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      return put(static_cast<CUdeviceptr>(a.base));
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      return put(static_cast<size_t>(a.size));
    case CU_POINTER_ATTRIBUTE_MAPPED:
      return put(1u);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      return put(static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_NONE));
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      return put(static_cast<unsigned long long>(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE));
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      return put(static_cast<CUmemoryPool>(nullptr));  // the pool is the worker's; not shown
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// What cuPointerGetAttributes writes for memory CUDA does not know (known: for an attribute
// the memory does not have).
void Unknown(void* data, CUpointer_attribute attr, CUdeviceptr ptr, bool known) {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = nullptr; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data) = known ? nullptr : reinterpret_cast<void*>(ptr); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = -2; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *static_cast<unsigned long long*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *static_cast<CUdeviceptr*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *static_cast<size_t*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *static_cast<void**>(data) = nullptr; break;
    default: *static_cast<unsigned*>(data) = 0; break;
  }
}

}  // namespace

REMORA_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (data == nullptr) return Invalid("cuPointerGetAttribute", "data is NULL");
  if (auto c = Runtime::Get().Session(); !c.ok()) return FromStatus(c.status(), "cuPointerGetAttribute");
  auto k = Lookup(ptr);
  CUresult r = Attribute(data, attr, ptr, k);
  if (r != CUDA_SUCCESS && k) return Invalid("cuPointerGetAttribute", "the attribute does not apply to this pointer");
  return r;
}

REMORA_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr) {
  if (n > 0 && (attrs == nullptr || data == nullptr)) return Invalid("cuPointerGetAttributes", "NULL argument");
  if (auto c = Runtime::Get().Session(); !c.ok()) return FromStatus(c.status(), "cuPointerGetAttributes");
  auto k = Lookup(ptr);
  for (unsigned i = 0; i < n; i++) {
    if (data[i] == nullptr) continue;
    if (!k || Attribute(data[i], attrs[i], ptr, k) != CUDA_SUCCESS) Unknown(data[i], attrs[i], ptr, k.has_value());
  }
  return CUDA_SUCCESS;
}

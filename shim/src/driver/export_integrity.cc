// INTEGRITY_CHECK (d4082055-bde6-704b-8d34-ba123c66e1f2): the static runtime makes sure that
// the driver it talks to answers a keyed hash of facts both sides know. It asks for this table
// first, calls slot 1, computes the same hash itself and refuses the driver when they differ
// (every runtime call then fails). The hash, as observed against libcudart_static.a 13.0:
// HMAC-MD2 (RFC 1319, RFC 2104 with MD2's 16-byte block) under a fixed 16-byte key, of
//   { u32 driver version (cuDriverGetVersion), u32 the runtime's argument, u32 pid,
//     u32 pthread_self() (low 32 bits), the CUDART_INTERFACE table's address, this table's
//     address, slot 1's address, u64 the runtime's timestamp argument }
// followed, for each device of cuDeviceGetCount, by { its UUID, i32 PCI domain, bus, device }.
// tests/unit/export_tables_test.cc checks the digest against known MD2 vectors and the runtime
// accepting it (tests/integration static programs).
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "driver/export_tables.h"
#include "driver/md2.h"
#include "remora/base/log.h"

namespace remora::shim::driver::exports {
namespace {

constexpr uint8_t kKey[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                              0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

struct Facts {
  uint32_t driver_version;
  uint32_t version;
  uint32_t pid;
  uint32_t thread;
  const void* cudart_table;
  const void* integrity_table;
  const void* function;
  uint64_t seconds;
};
static_assert(sizeof(Facts) == 48);

struct DeviceFacts {
  CUuuid uuid;
  int32_t pci_domain, pci_bus, pci_device;
};
static_assert(sizeof(DeviceFacts) == 28);

CUresult Check(uint32_t version, uint64_t seconds, uint64_t (*result)[2]);

constexpr size_t kSlots = 3;
const void* const kSlotsArray[kSlots] = {
    SizeSlot(kSlots),
    Fn(&Check),
    Fn(&Unserved<kIntegrityCheck, 2>),
};

// Slot 1: (u32 version, u64 timestamp, u64 result[2]) -> CUresult.
CUresult Check(uint32_t version, uint64_t seconds, uint64_t (*result)[2]) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int driver = 0, count = 0;
  if (CUresult r = cuDriverGetVersion(&driver); r != CUDA_SUCCESS) return r;
  if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS) return r;
  Facts facts{static_cast<uint32_t>(driver),
              version,
              static_cast<uint32_t>(getpid()),
              static_cast<uint32_t>(pthread_self()),
              kCudartInterface.slots,
              kSlotsArray,
              kSlotsArray[1],
              seconds};
  HmacMd2 mac(kKey);
  mac.Update(&facts, sizeof(facts));
  for (int d = 0; d < count; d++) {
    DeviceFacts dev{};
    if (CUresult r = cuDeviceGetUuid_v2(&dev.uuid, d); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuDeviceGetAttribute(&dev.pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d); r != CUDA_SUCCESS)
      return r;
    if (CUresult r = cuDeviceGetAttribute(&dev.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuDeviceGetAttribute(&dev.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d); r != CUDA_SUCCESS)
      return r;
    mac.Update(&dev, sizeof(dev));
  }
  std::array<uint8_t, 16> digest = mac.Final();
  std::memcpy(*result, digest.data(), digest.size());
  LOG_DEBUG("INTEGRITY_CHECK[1](version={}, seconds={}) over {} devices, driver {}", version, seconds, count, driver);
  return CUDA_SUCCESS;
}

}  // namespace

const Table kIntegrityCheck = {"INTEGRITY_CHECK", MakeId("d4082055bde6704b8d34ba123c66e1f2"), kSlotsArray, kSlots};

}  // namespace remora::shim::driver::exports

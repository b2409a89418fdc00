// GPU activity (CUPTI's activity API, docs/ARCHITECTURE.md "Profiling (CUPTI)") as it travels
// from the worker to the client: what remoraActivityFlush answers, and the kinds
// remoraActivityEnable asks for.
//
// The worker collects its session's activity (CUPTI on a GPU, records synthesized by the
// host-emulated backend) and sends it in this form, not in CUPTI's structures: the client's
// libcupti.so.13 writes NVIDIA's layouts of its own CUDA version from it, whatever CUPTI the
// server has. Times are nanoseconds of the worker's clock (remoraActivityEnable and
// remoraActivityFlush answer its `now`; the client shifts them to its own).
//
// Wire form (little-endian, as every argument): records back to back, each a Fixed followed by
// `name_length` bytes of name (no NUL). Pure functions; Parse refuses anything malformed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace remora::api::activity {

// Bits of remoraActivityEnable's mask: what the worker collects (0: nothing, and what it
// had collected is dropped).
enum Kinds : uint32_t {
  kKernels = 1u << 0,
  kMemcpys = 1u << 1,
  kMemsets = 1u << 2,
  kExternalCorrelations = 1u << 3,
};
constexpr uint32_t kAllKinds = kKernels | kMemcpys | kMemsets | kExternalCorrelations;

enum class RecordKind : uint8_t { kKernel = 1, kMemcpy = 2, kMemset = 3, kExternalCorrelation = 4 };

constexpr size_t kMaxName = 4096;  // longer kernel names are cut (CUPTI's own are mangled C++)

struct Record {
  RecordKind kind = RecordKind::kKernel;
  uint64_t start = 0, end = 0;  // ns, the worker's clock (external correlations: none)
  uint32_t correlation = 0;     // the id of the worker's call that caused it
  uint32_t device = 0;          // the application's device ordinal
  uint32_t context = 0, stream = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};  // kernels
  int32_t static_shared = 0, dynamic_shared = 0, registers = 0;
  uint64_t bytes = 0;                                // memcpys and memsets
  uint8_t copy_kind = 0, src_kind = 0, dst_kind = 0;  // CUpti_ActivityMemcpyKind, CUpti_ActivityMemoryKind
  uint32_t value = 0;                                // memsets
  uint32_t external_kind = 0;                        // CUpti_ExternalCorrelationKind
  uint64_t external_id = 0;
  std::string name;  // kernels
};

namespace detail {
#pragma pack(push, 1)
struct Fixed {
  uint8_t kind;
  uint8_t copy_kind, src_kind, dst_kind;
  uint32_t correlation, device, context, stream;
  uint64_t start, end;
  int32_t grid[3], block[3];
  int32_t static_shared, dynamic_shared, registers;
  uint64_t bytes;
  uint32_t value, external_kind;
  uint64_t external_id;
  uint16_t name_length;
};
#pragma pack(pop)
}  // namespace detail

inline void Append(std::string* out, const Record& r) {
  detail::Fixed f{};
  f.kind = static_cast<uint8_t>(r.kind);
  f.copy_kind = r.copy_kind;
  f.src_kind = r.src_kind;
  f.dst_kind = r.dst_kind;
  f.correlation = r.correlation;
  f.device = r.device;
  f.context = r.context;
  f.stream = r.stream;
  f.start = r.start;
  f.end = r.end;
  std::memcpy(f.grid, r.grid, sizeof(f.grid));
  std::memcpy(f.block, r.block, sizeof(f.block));
  f.static_shared = r.static_shared;
  f.dynamic_shared = r.dynamic_shared;
  f.registers = r.registers;
  f.bytes = r.bytes;
  f.value = r.value;
  f.external_kind = r.external_kind;
  f.external_id = r.external_id;
  size_t n = r.name.size() < kMaxName ? r.name.size() : kMaxName;
  f.name_length = static_cast<uint16_t>(n);
  out->append(reinterpret_cast<const char*>(&f), sizeof(f));
  out->append(r.name.data(), n);
}

// The records of `bytes`, appended to *out; false (and *error says why) when they are not
// well formed: a record cut short, an unknown kind, a name too long.
inline bool Parse(const void* bytes, size_t size, std::vector<Record>* out, std::string* error) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  size_t at = 0;
  while (at < size) {
    detail::Fixed f;
    if (size - at < sizeof(f)) {
      *error = "an activity record is cut short";
      return false;
    }
    std::memcpy(&f, p + at, sizeof(f));
    at += sizeof(f);
    if (f.kind < static_cast<uint8_t>(RecordKind::kKernel) || f.kind > static_cast<uint8_t>(RecordKind::kExternalCorrelation)) {
      *error = "an activity record of unknown kind " + std::to_string(f.kind);
      return false;
    }
    if (f.name_length > kMaxName || f.name_length > size - at) {
      *error = "an activity record's name runs past its end";
      return false;
    }
    Record r;
    r.kind = static_cast<RecordKind>(f.kind);
    r.copy_kind = f.copy_kind;
    r.src_kind = f.src_kind;
    r.dst_kind = f.dst_kind;
    r.correlation = f.correlation;
    r.device = f.device;
    r.context = f.context;
    r.stream = f.stream;
    r.start = f.start;
    r.end = f.end;
    std::memcpy(r.grid, f.grid, sizeof(r.grid));
    std::memcpy(r.block, f.block, sizeof(r.block));
    r.static_shared = f.static_shared;
    r.dynamic_shared = f.dynamic_shared;
    r.registers = f.registers;
    r.bytes = f.bytes;
    r.value = f.value;
    r.external_kind = f.external_kind;
    r.external_id = f.external_id;
    r.name.assign(reinterpret_cast<const char*>(p + at), f.name_length);
    at += f.name_length;
    out->push_back(std::move(r));
  }
  return true;
}

}  // namespace remora::api::activity

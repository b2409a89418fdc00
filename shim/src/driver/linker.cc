// The JIT linker: cuLinkCreate and cuLinkAdd* collect the inputs in the client (files are
// read here), cuLinkComplete sends them in one request to the worker, whose driver links
// them for the GPU; the image comes back and lives until cuLinkDestroy, as with CUDA. The
// log buffers and the wall time the application asked for are filled from the worker's.
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "driver/contexts.h"
#include "driver/driver.h"
#include "driver/objects.h"
#include "export.h"
#include "process.h"
#include "remora/protocol/frame.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

struct Option {
  CUjit_option option;
  uint64_t value;
};

struct Input {
  CUjitInputType type;
  std::string name;
  std::vector<std::byte> data;
  std::vector<Option> options;
};

// Where the application wants the logs and the wall time.
// The option values are the application's, valid for the life of the link (as CUDA requires):
// the sizes and the wall time are written back into them.
struct Outputs {
  char* info = nullptr;
  void** info_size = nullptr;
  char* error = nullptr;
  void** error_size = nullptr;
  float* walltime = nullptr;
};

struct LinkState {
  static constexpr uint64_t kMagic = 0x4b4e'494c'4f4d'4552ull;  // "REMOLINK"
  uint64_t magic = kMagic;
  int device = 0;
  std::vector<Option> options;
  Outputs out;
  std::vector<Input> inputs;
  std::vector<std::byte> image;  // after cuLinkComplete
};

// A live link state of this process, or nullptr. A state is used by one thread at a time,
// as with CUDA.
LinkState* Find(CUlinkState s) {
  return Process::Get().driver_objects().IsLink(s) ? reinterpret_cast<LinkState*>(s) : nullptr;
}

// Splits the JIT options: those with a number travel, the log buffers and the wall time stay
// here (filled from the reply); the ones whose value points into this process are refused.
Status ParseOptions(unsigned n, CUjit_option* keys, void** values, std::vector<Option>* travel, Outputs* out) {
  if (n > 0 && (keys == nullptr || values == nullptr)) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "NULL options");
  for (unsigned i = 0; i < n; i++) {
    auto v = reinterpret_cast<uintptr_t>(values[i]);
    switch (keys[i]) {
      case CU_JIT_INFO_LOG_BUFFER: out->info = static_cast<char*>(values[i]); break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: out->info_size = &values[i]; break;
      case CU_JIT_ERROR_LOG_BUFFER: out->error = static_cast<char*>(values[i]); break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: out->error_size = &values[i]; break;
      case CU_JIT_WALL_TIME: out->walltime = reinterpret_cast<float*>(&values[i]); break;
      case CU_JIT_GLOBAL_SYMBOL_NAMES:
      case CU_JIT_GLOBAL_SYMBOL_ADDRESSES:
      case CU_JIT_GLOBAL_SYMBOL_COUNT:
      case CU_JIT_REFERENCED_KERNEL_NAMES:
      case CU_JIT_REFERENCED_KERNEL_COUNT:
      case CU_JIT_REFERENCED_VARIABLE_NAMES:
      case CU_JIT_REFERENCED_VARIABLE_COUNT:
        return Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED,
                      "JIT options that name host symbols or kernel lists are not supported by Remora");
      default:
        if (keys[i] >= CU_JIT_NUM_OPTIONS) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "unknown JIT option");
        travel->push_back({keys[i], v});
    }
  }
  return Status::Ok();
}

// Copies a log into the application's buffer (NUL-terminated, truncated to its size) and
// writes back the bytes filled.
void Copy(const std::string& log, char* buf, void** size_slot) {
  if (buf == nullptr || size_slot == nullptr) return;
  auto size = reinterpret_cast<uintptr_t>(*size_slot);
  if (size == 0) return;
  size_t n = std::min<size_t>(log.size(), size - 1);
  std::memcpy(buf, log.data(), n);
  buf[n] = '\0';
  *size_slot = reinterpret_cast<void*>(static_cast<uintptr_t>(n + 1));
}

CUresult Add(CUlinkState state, CUjitInputType type, const void* data, size_t size, const char* name, unsigned n,
             CUjit_option* keys, void** values, const char* call) {
  LinkState* l = Find(state);
  if (l == nullptr) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_HANDLE, "not a live link state"), call);
  if (data == nullptr || size == 0) return Invalid(call, "no data");
  if (type < 0 || type >= CU_JIT_NUM_INPUT_TYPES) return Invalid(call, "unknown input type");
  Input in;
  in.type = type;
  in.name = name != nullptr ? name : "";
  Outputs ignored;
  Status st = ParseOptions(n, keys, values, &in.options, &ignored);
  if (!st.ok()) return FromStatus(st, call);
  const auto* b = static_cast<const std::byte*>(data);
  in.data.assign(b, b + size);
  size_t total = size;
  for (const Input& i : l->inputs) total += i.data.size();
  if (total > uint64_t{kMaxBodyWords} * 8 - (64 << 10))
    return FromStatus(Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED, "link inputs over 8 MiB in all are not supported by Remora"),
                      call);
  l->inputs.push_back(std::move(in));
  return CUDA_SUCCESS;
}

}  // namespace

REMORA_API CUresult cuLinkCreate_v2(unsigned int n, CUjit_option* keys, void** values, CUlinkState* state) {
  if (state == nullptr) return Invalid("cuLinkCreate", "stateOut is NULL");
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuLinkCreate");
  auto l = std::make_unique<LinkState>();
  l->device = *d;
  Status st = ParseOptions(n, keys, values, &l->options, &l->out);
  if (!st.ok()) return FromStatus(st, "cuLinkCreate");
  Process::Get().driver_objects().AddLink(l.get());
  *state = reinterpret_cast<CUlinkState>(l.release());
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                     unsigned int n, CUjit_option* keys, void** values) {
  return Add(state, type, data, size, name, n, keys, values, "cuLinkAddData");
}

REMORA_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path, unsigned int n,
                                     CUjit_option* keys, void** values) {
  if (path == nullptr) return Invalid("cuLinkAddFile", "path is NULL");
  std::ifstream in(path, std::ios::binary);
  if (!in) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_FILE_NOT_FOUND, std::string("cannot open ") + path), "cuLinkAddFile");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (type == CU_JIT_INPUT_PTX) bytes.push_back('\0');  // PTX text is NUL-terminated in memory
  return Add(state, type, bytes.data(), bytes.size(), path, n, keys, values, "cuLinkAddFile");
}

REMORA_API CUresult cuLinkComplete(CUlinkState state, void** cubin, size_t* size) {
  LinkState* l = Find(state);
  if (l == nullptr) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_HANDLE, "not a live link state"), "cuLinkComplete");
  if (cubin == nullptr || size == nullptr) return Invalid("cuLinkComplete", "NULL argument");
  auto c = Runtime::Get().Session();
  if (!c.ok()) return FromStatus(c.status(), "cuLinkComplete");
  std::string info, error;
  float walltime = 0;
  Status st = (*c)->Call(l->device, [&](wire::Request::Builder& r) {
    auto k = r.initLink();
    auto options = [](auto list, const std::vector<Option>& from) {
      for (size_t i = 0; i < from.size(); i++) {
        list[static_cast<unsigned>(i)].setOption(static_cast<uint32_t>(from[i].option));
        list[static_cast<unsigned>(i)].setValue(from[i].value);
      }
    };
    options(k.initOptions(static_cast<unsigned>(l->options.size())), l->options);
    auto ins = k.initInputs(static_cast<unsigned>(l->inputs.size()));
    for (size_t i = 0; i < l->inputs.size(); i++) {
      const Input& in = l->inputs[i];
      auto w = ins[static_cast<unsigned>(i)];
      w.setType(static_cast<uint32_t>(in.type));
      w.setName(in.name);
      w.setData(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(in.data.data()), in.data.size()));
      options(w.initOptions(static_cast<unsigned>(in.options.size())), in.options);
    }
  }, [&](wire::Reply::Reader& r) -> Status {
    if (!r.isLinked()) return Status(Domain::kCuda, CUDA_ERROR_UNKNOWN, "malformed link reply");
    auto linked = r.getLinked();
    auto image = linked.getImage();
    const auto* b = reinterpret_cast<const std::byte*>(image.begin());
    l->image.assign(b, b + image.size());
    info = linked.getInfoLog();
    error = linked.getErrorLog();
    walltime = linked.getWalltimeMs();
    return Status::Ok();
  });
  Copy(info, l->out.info, l->out.info_size);
  Copy(!st.ok() && error.empty() ? st.message() : error, l->out.error, l->out.error_size);
  if (l->out.walltime != nullptr) *l->out.walltime = walltime;
  if (!st.ok()) return FromStatus(st, "cuLinkComplete");
  if (l->image.empty()) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_UNKNOWN, "the link produced no image"), "cuLinkComplete");
  *cubin = l->image.data();
  *size = l->image.size();
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuLinkDestroy(CUlinkState state) {
  auto* l = reinterpret_cast<LinkState*>(state);
  if (!Process::Get().driver_objects().RemoveLink(l)) return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_HANDLE, "not a live link state"), "cuLinkDestroy");
  delete l;
  return CUDA_SUCCESS;
}

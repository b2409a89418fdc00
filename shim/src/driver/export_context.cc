// The per-context tables: CONTEXT_LOCAL_STORAGE, where the static runtime keeps its state of
// each context (its modules, functions and variables there), and CONTEXT_CHECKS.
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "driver/contexts.h"
#include "driver/driver.h"
#include "driver/export_tables.h"
#include "process.h"
#include "remora/base/log.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace remora::shim::driver::exports {
namespace {

using Destructor = void (*)(CUcontext, void* key, void* value);

struct Entry {
  void* value;
  Destructor dtor;
};

struct Storage {
  std::mutex mu;
  std::map<std::pair<Context*, void*>, Entry> entries;
};
Storage& Cls() {
  static auto* s = new Storage;  // never destroyed: the runtime may call during exit
  return *s;
}

// The context a slot means: `ctx`, or the calling thread's current one when NULL (the
// runtime asks before it made any context current: an answer, not an error to log).
Result<Context*> Resolve(CUcontext ctx) {
  if (ctx != nullptr) return Process::Get().contexts().Check(ctx);
  if (Context* c = Current()) return c;
  return Status(Domain::kCuda, CUDA_ERROR_INVALID_CONTEXT, "no current context");
}
CUresult Quiet(const Status& st, const char* call) {
  return st.domain() == Domain::kCuda && st.raw() == CUDA_ERROR_INVALID_CONTEXT ? CUDA_ERROR_INVALID_CONTEXT
                                                                                 : FromStatus(st, call);
}

// ---- CONTEXT_LOCAL_STORAGE (c693336e-1121-df11-a8c3-68f355d89593) ---------------------------
// No size slot. Asked for when the runtime first needs a context's state.

// Slot 0: (CUcontext ctx, void* key, void* value, dtor(CUcontext, key, value)) -> CUresult.
// Stores `value` under (ctx, key); `dtor` runs when the context ends (destroyed, or the
// primary context reset), so that the runtime forgets its state of it.
CUresult Put(CUcontext ctx, void* key, void* value, Destructor dtor) {
  auto c = Resolve(ctx);
  LOG_DEBUG("CONTEXT_LOCAL_STORAGE[0](ctx={}, key={}, value={})", fmt::ptr(ctx), key, value);
  if (!c.ok()) return Quiet(c.status(), "CONTEXT_LOCAL_STORAGE put");
  std::lock_guard<std::mutex> lock(Cls().mu);
  Cls().entries[{*c, key}] = Entry{value, dtor};
  return CUDA_SUCCESS;
}

// Slot 1: (CUcontext ctx, void* key) -> CUresult. Forgets (ctx, key) without its destructor.
CUresult Remove(CUcontext ctx, void* key) {
  auto c = Resolve(ctx);
  LOG_DEBUG("CONTEXT_LOCAL_STORAGE[1](ctx={}, key={})", fmt::ptr(ctx), key);
  if (!c.ok()) return Quiet(c.status(), "CONTEXT_LOCAL_STORAGE remove");
  std::lock_guard<std::mutex> lock(Cls().mu);
  Cls().entries.erase({*c, key});
  return CUDA_SUCCESS;
}

// Slot 2: (void** value, CUcontext ctx, void* key) -> CUresult. The value under (ctx, key);
// CUDA_ERROR_INVALID_HANDLE when there is none (the runtime then builds its state of the
// context and stores it with slot 0).
CUresult Get(void** value, CUcontext ctx, void* key) {
  auto c = Resolve(ctx);
  LOG_DEBUG("CONTEXT_LOCAL_STORAGE[2](value={}, ctx={}, key={})", fmt::ptr(value), fmt::ptr(ctx), key);
  if (!c.ok()) return Quiet(c.status(), "CONTEXT_LOCAL_STORAGE get");
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Cls().mu);
  auto it = Cls().entries.find({*c, key});
  if (it == Cls().entries.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = it->second.value;
  return CUDA_SUCCESS;
}

constexpr size_t kClsSlots = 4;
const void* const kClsArray[kClsSlots] = {
    Fn(&Put),
    Fn(&Remove),
    Fn(&Get),
    Fn(&Unserved<kContextLocalStorage, 3>),
};

// ---- CONTEXT_CHECKS (263e8860-7cd2-6143-92f6-bbd5006dfa7e) ----------------------------------
// Slot 2: (CUcontext ctx, uint32_t* flags, const void** extra) -> CUresult. Properties of the
// context the runtime checks before using it; none applies to Remora's contexts (0).
CUresult CheckContext(CUcontext ctx, uint32_t* flags, const void** extra) {
  LOG_DEBUG("CONTEXT_CHECKS[2](ctx={}, {}, {})", fmt::ptr(ctx), fmt::ptr(flags), fmt::ptr(extra));
  if (flags != nullptr) *flags = 0;
  return CUDA_SUCCESS;
}

// Slot 3: () -> uint32_t. A process-wide switch the runtime tests; 0 (off).
uint32_t CheckSwitch() { return 0; }

constexpr size_t kCheckSlots = 4;
const void* const kChecksArray[kCheckSlots] = {
    SizeSlot(kCheckSlots),
    Fn(&Unserved<kContextChecks, 1>),
    Fn(&CheckContext),
    Fn(&CheckSwitch),
};

}  // namespace

void ContextStorageEnded(Context* c) {
  std::vector<std::pair<void*, Entry>> ended;
  {
    std::lock_guard<std::mutex> lock(Cls().mu);
    auto& entries = Cls().entries;
    for (auto it = entries.lower_bound({c, nullptr}); it != entries.end() && it->first.first == c;) {
      ended.emplace_back(it->first.second, it->second);
      it = entries.erase(it);
    }
  }
  for (auto& [key, e] : ended)
    if (e.dtor != nullptr) e.dtor(reinterpret_cast<CUcontext>(c), key, e.value);
}

const Table kContextLocalStorage = {"CONTEXT_LOCAL_STORAGE", MakeId("c693336e1121df11a8c368f355d89593"), kClsArray,
                                    kClsSlots};
const Table kContextChecks = {"CONTEXT_CHECKS", MakeId("263e88607cd2614392f6bbd5006dfa7e"), kChecksArray, kCheckSlots};

}  // namespace remora::shim::driver::exports

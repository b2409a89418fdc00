#include "worker/hooks/module_hooks.h"

#include <algorithm>
#include <memory>
#include <cstring>
#include <string>

#include "worker/calls/generated_call.h"
#include "worker/session/executor.h"
#include "worker/session/gpu_waits.h"

namespace remora::worker {

namespace {

// cuModuleUnload waits for the GPU's work in the driver (it must not unload code a kernel is
// running), spinning in the executor's thread: a stream held by a host function that waits
// for the client's callbackDone would then never move (the executor that takes callbackDone
// in is the one waiting), and the session stalled (JAX's autotuner unloads modules while its
// host callbacks are queued). So the executor waits here by polling events recorded on the
// GPU's streams, taking the client's other requests in meanwhile, and unloads once the work
// queued before the unload is done (the client sends no launch of the module after it).
class ModuleUnloadOp final : public AfterQueuedWorkOp {
 public:
  ModuleUnloadOp(Executor& ex, uint64_t tag, uint64_t module, int gpu) : AfterQueuedWorkOp(ex, gpu), tag_(tag), module_(module) {}

 private:
  Status Then(Executor& ex) override { return ex.PostReply(tag_, Unload(ex)); }

  Status Unload(Executor& ex) {
    SessionState& s = ex.session();
    auto m = s.modules().Get(module_);
    if (!m.ok()) return m.status();  // (a second unload of it finished first)
    Executor::Module mod = **m;
    RETURN_IF_ERROR(ex.SetDevice(mod.gpu));
    RETURN_IF_ERROR(ex.driver().ModuleUnload(mod.module));
    // Its variables stop being memory a request may name.
    for (uint64_t g : mod.globals) (void)s.allocations().Erase(g);
    const uint64_t h = module_;
    std::erase_if(s.module_index(), [h](const auto& e) { return e.second == h; });
    std::erase_if(s.function_index(), [h](const auto& e) { return e.first.first == h; });
    std::vector<uint64_t> functions;
    s.functions().ForEach([&](uint64_t id, Executor::Function& f) {
      if (f.module == h) functions.push_back(id);
    });
    for (uint64_t f : functions) s.functions().Erase(f);
    s.modules().Erase(h);
    ex.ReleaseCharge(mod.gpu, mod.charged);
    ex.resources().Release(Resource::kModules);
    ex.resources().Release(Resource::kModuleBytes, mod.image_bytes);
    return Status::Ok();
  }

  uint64_t tag_, module_;
};

}  // namespace

CUresult ModuleKernelNames(OpContext& x, unsigned long long module, char* names, size_t capacity, size_t* length) {
  Executor& ex = x.executor();
  auto m = ex.session().modules().Get(module);
  if (!m.ok()) return CUDA_ERROR_INVALID_HANDLE;
  if (!ex.SetDevice((*m)->gpu).ok()) return CUDA_ERROR_INVALID_CONTEXT;
  auto list = ex.driver().ModuleKernelNames((*m)->module);
  if (!list.ok()) return static_cast<CUresult>(list.status().raw());
  std::string all;
  for (const std::string& n : *list) all.append(n).push_back('\0');
  *length = all.size();
  std::memcpy(names, all.data(), std::min(all.size(), capacity));
  return CUDA_SUCCESS;
}

Status ModuleUnload(OpContext& x, CUmodule) {
  Executor& ex = x.executor();
  const uint64_t id = x.handle_id();
  ASSIGN_OR_RETURN(Executor::Module * m, ex.session().modules().Get(id));
  ex.AddPending(std::make_unique<ModuleUnloadOp>(ex, x.tag(), id, m->gpu));
  x.AnswerLater();
  return Status::Ok();
}

}  // namespace remora::worker

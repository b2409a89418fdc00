// The driver API's module lifetime and JIT linker: cuModuleUnload ends a module this session
// loaded (its functions and variables go with it); cuLinkCreate/AddData/Complete arrive as one
// request, run on the worker's GPU, and return the linked image with the linker's logs.
#include <cuda.h>  // CUjit_option values

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame.h"
#include "worker/ops/handlers.h"

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

Status Handlers::ModuleUnload(Executor& ex, uint64_t tag, Req req) {
  uint64_t h = req.getModuleUnload();
  auto m = ex.session().modules().Get(h);
  if (!m.ok()) return ex.PostReply(tag, m.status());
  ex.AddPending(std::make_unique<ModuleUnloadOp>(ex, tag, h, (*m)->gpu));
  return Status::Ok();
}

Status Handlers::Link(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getLink();
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
  auto options = [](auto list) {
    std::vector<LinkOption> out;
    for (auto o : list) out.push_back({o.getOption(), o.getValue()});
    return out;
  };
  std::vector<LinkInput> inputs;
  for (auto in : a.getInputs()) {
    LinkInput li;
    li.type = in.getType();
    li.name = in.getName();
    li.data = in.getData().begin();
    li.size = in.getData().size();
    li.options = options(in.getOptions());
    inputs.push_back(std::move(li));
  }
  for (const LinkOption& o : options(a.getOptions())) {
    // Options whose value is a pointer into the client cannot travel.
    if (o.option == CU_JIT_INFO_LOG_BUFFER || o.option == CU_JIT_ERROR_LOG_BUFFER || o.option == CU_JIT_WALL_TIME ||
        o.option == CU_JIT_GLOBAL_SYMBOL_NAMES || o.option == CU_JIT_GLOBAL_SYMBOL_ADDRESSES ||
        o.option == CU_JIT_REFERENCED_KERNEL_NAMES || o.option == CU_JIT_REFERENCED_VARIABLE_NAMES ||
        o.option >= CU_JIT_NUM_OPTIONS)
      return ex.PostReply(tag, Error(Err::kInvalidValue, "JIT option {} cannot be sent to the server", o.option));
  }
  Status st = ex.SetDevice(*gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  LinkOutput out;
  st = ex.driver().Link(inputs, options(a.getOptions()), &out);
  if (st.ok() && out.image.size() > uint64_t{kMaxBodyWords} * 8 - 4096)
    st = Error(Err::kNotSupported, "the linked image ({}) is larger than a reply can carry", FormatSize(out.image.size()));
  LOG_DEBUG("link of {} input(s) on GPU {}: {}", inputs.size(), *gpu, st.ok() ? FormatSize(out.image.size()) : st.ToString());
  return ex.PostReply(tag, st, [&](wire::Reply::Builder& r) {
    auto l = r.initLinked();
    if (st.ok()) l.setImage(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(out.image.data()), out.image.size()));
    l.setInfoLog(out.info_log);
    l.setErrorLog(out.error_log);
    l.setWalltimeMs(out.walltime_ms);
  });
}

}  // namespace remora::worker

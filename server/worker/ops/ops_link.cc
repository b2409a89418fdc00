// The driver API's JIT linker: cuLinkCreate/AddData/Complete arrive as one request, run on
// the worker's GPU, and return the linked image with the linker's logs.
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

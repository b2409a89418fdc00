// The host-emulated backend (host_driver.h): modules and kernels - loaded, linked and looked
// up, never executed (a kernel named *remora_emulated_busy_us* takes time: see Launch).

#include "worker/backend/host/host_driver.h"

namespace remora::worker::host {

Result<DModule> HostDriver::ModuleLoad(const void* image, size_t size) {
  uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, image, 4);
  if (!IsEmulatedImage(image, size, magic))
    return Error(Err::kInvalidKernelImage, "not a fat binary, an ELF cubin or PTX (magic 0x{:08x})", magic);
  auto* m = new EmuModule;
  m->symbols = ReadImageSymbols(image, size);
  modules_.insert(m);
  return static_cast<DModule>(m);
}

Status HostDriver::ModuleUnload(DModule m) {
  auto* mod = static_cast<EmuModule*>(m);
  if (!modules_.count(mod)) return Error(Err::kInvalidResourceHandle, "unknown emulated module");
  // As a GPU's driver does, the unload waits for the work queued on every stream (it may use
  // the module's code), blocking the calling thread (the executor must not call it while a
  // stream waits for something only the executor can let go: ops_link.cc).
  auto drained = [](const std::shared_ptr<EmuStream>& st) { return st->completed.load() >= st->Issued(); };
  for (;;) {
    bool all = true;
    for (const auto& [h, st] : streams_) all = all && (graphs_.Capturing(h) || drained(st));
    for (const auto& [d, st] : legacy_streams_) all = all && drained(st);
    for (const auto& st : draining_) all = all && drained(st);
    if (all) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  modules_.erase(mod);
  for (auto& [name, g] : mod->globals) (void)MemFree(g.first);
  delete mod;
  return Status::Ok();
}

Status HostDriver::Link(const std::vector<LinkInput>& inputs, const std::vector<LinkOption>&, LinkOutput* out) {
  if (inputs.empty()) return Error(Err::kInvalidValue, "cuLinkComplete: nothing to link");
  std::vector<std::byte> image(64);
  const unsigned char ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  std::memcpy(image.data(), ident, sizeof(ident));
  uint16_t ehsize = 64;
  std::memcpy(image.data() + 0x34, &ehsize, 2);
  for (const LinkInput& in : inputs) {
    const auto* b = static_cast<const std::byte*>(in.data);
    image.insert(image.end(), b, b + in.size);
  }
  uint64_t end = image.size();  // the ELF's size as the client computes it: e_shoff
  std::memcpy(image.data() + 0x28, &end, 8);
  out->image = std::move(image);
  out->info_log = fmt::format("host-emulated link of {} input(s); no code generated", inputs.size());
  return Status::Ok();
}

Result<DFunction> HostDriver::ModuleGetFunction(DModule, const char* name) {
  auto* f = new EmuFunction;
  f->name = name;
  f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
  f->attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = 90;
  f->attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = 90;
  f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = 32;
  f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 49152;
  f->attrs[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1;
  functions_.emplace_back(f);
  return static_cast<DFunction>(f);
}

Result<std::vector<std::string>> HostDriver::ModuleKernelNames(DModule m) {
  return static_cast<EmuModule*>(m)->symbols.kernels;
}

Result<std::pair<DevPtr, size_t>> HostDriver::ModuleGetGlobal(DModule m, const char* name, size_t size_hint) {
  auto* mod = static_cast<EmuModule*>(m);
  auto it = mod->globals.find(name);
  if (it != mod->globals.end()) return it->second;
  // Only the name known (cuModuleGetGlobal): the size the image's symbol table gives.
  if (size_hint == 0) {
    auto v = mod->symbols.variables.find(name);
    if (v == mod->symbols.variables.end() || v->second == 0)
      return Error(Err::kInvalidSymbol, "emulated module has no global '{}' of known size", name);
    size_hint = v->second;
  }
  ASSIGN_OR_RETURN(DevPtr p, HeapAlloc(size_hint));  // the module's own storage
  ASSIGN_OR_RETURN(std::byte * host, Translate(p, size_hint));
  std::memset(host, 0, size_hint);
  mod->globals.emplace(name, std::make_pair(p, size_hint));
  return std::make_pair(p, size_hint);
}

bool HostDriver::GlobalIsManaged(DModule m, const char* name, DevPtr) {
  return static_cast<EmuModule*>(m)->symbols.managed.count(name) > 0;
}

Result<int> HostDriver::FuncGetAttribute(DFunction f, int a) {
  if (a < 0 || a >= kNumFunctionAttributes) return Error(Err::kInvalidValue, "bad function attribute {}", a);
  return static_cast<EmuFunction*>(f)->attrs[a];
}

Status HostDriver::Launch(DFunction f, const LaunchConfig& c) {
  uint64_t threads = uint64_t{c.block[0]} * c.block[1] * c.block[2];
  if (threads == 0 || threads > 1024 || c.grid[0] == 0 || c.grid[1] == 0 || c.grid[2] == 0)
    return Error(Err::kInvalidConfiguration, "invalid launch configuration");
  const std::string& name = static_cast<EmuFunction*>(f)->name;
  if (graphs_.Capturing(c.stream)) return graphs_.CaptureWork(c.stream, CU_GRAPH_NODE_TYPE_KERNEL, [] {});
  if (c.stream == nullptr) RETURN_IF_ERROR(graphs_.LegacyAllowed());
  if (name.find(kBusyKernel) != std::string::npos) {
    // A kernel that takes time: gridDim.x microseconds, in stream order, on the stream's
    // thread (the executor never waits for it), so that scheduling can be tested here.
    ASSIGN_OR_RETURN(std::shared_ptr<EmuStream> st, Stream(c.stream));
    auto us = std::chrono::microseconds(c.grid[0]);
    st->Submit(st, DepsOf(c.stream, st), [us] { std::this_thread::sleep_for(us); }, /*inline_ok=*/false);
    return Status::Ok();
  }
  LOG_TRACE("host-emulated: kernel {} not executed", name);
  if (uint32_t correlation = activity_.Correlate(api::activity::kKernels); correlation != 0) {
    // Not executed: a record of no duration at the moment of the launch, so that profilers see it.
    api::activity::Record r;
    r.kind = api::activity::RecordKind::kKernel;
    r.correlation = correlation;
    r.device = static_cast<uint32_t>(current_);
    r.stream = activity_.StreamId(c.stream);
    for (int i = 0; i < 3; i++) r.grid[i] = static_cast<int32_t>(c.grid[i]), r.block[i] = static_cast<int32_t>(c.block[i]);
    r.dynamic_shared = static_cast<int32_t>(c.shared_mem);
    r.start = r.end = activity_.Now();
    r.name = name;
    activity_.Add(std::move(r));
  }
  return Status::Ok();
}

Result<void*> HostDriver::Library(Domain library) {
  auto it = libraries_.find(library);
  if (it == libraries_.end()) {
    std::shared_ptr<void> lib = MakeHostLibrary(library, *this);
    if (!lib) return Error(Err::kNotSupported, "the host-emulated backend does not emulate {}", DomainName(library));
    it = libraries_.emplace(library, std::move(lib)).first;
  }
  return it->second.get();
}

}  // namespace remora::worker::host

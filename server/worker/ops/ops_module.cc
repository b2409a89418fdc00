// Modules, kernels and device variables: fat binaries are loaded on first use (from the
// tenant's own cache when one of its sessions already shipped them, worker/session/module_cache.h),
// functions and variables resolved by name, kernels launched with the parameter layout the
// driver reports.
#include <array>
#include <cstring>
#include <optional>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/auth.h"
#include "worker/ops/handlers.h"
#include "worker/session/peer_log.h"

namespace remora::worker {
namespace {

constexpr uint64_t kMaxImageBytes = 1ull << 30;

std::string HashHex(capnp::Data::Reader h) { return ToHex(h.begin(), h.size()); }

// Takes what an image of `size` bytes costs before any of it is received or loaded: the
// session's module-bytes limit and the tenant's device memory (the loaded image lives on the
// GPU). Undone by Uncharge.
Status ChargeImage(Executor& ex, int gpu, uint64_t size) {
  RETURN_IF_ERROR(ex.resources().Acquire(Resource::kModuleBytes, size));
  Status st = ex.Charge(gpu, size);
  if (!st.ok()) ex.resources().Release(Resource::kModuleBytes, size);
  return st;
}

void UnchargeImage(Executor& ex, int gpu, uint64_t size) {
  ex.resources().Release(Resource::kModuleBytes, size);
  ex.ReleaseCharge(gpu, size);
}

// Loads an image on `gpu` and registers the module; its size is already charged
// (ChargeImage), and stays charged with the module or is given back on failure. A fresh
// load is a module of its own, not shared with the session's other loads of the image.
Result<uint64_t> Load(Executor& ex, int gpu, const std::string& hash, const std::vector<std::byte>& image,
                      bool fresh = false) {
  Status st = ex.resources().Acquire(Resource::kModules);
  if (st.ok()) st = ex.SetDevice(gpu);
  Result<DModule> m = st.ok() ? ex.driver().ModuleLoad(image.data(), image.size()) : Result<DModule>(st);
  if (!m.ok()) {
    if (st.ok()) ex.resources().Release(Resource::kModules);
    UnchargeImage(ex, gpu, image.size());
    return m.status();
  }
  uint64_t h = ex.session().modules().Insert({*m, gpu, hash, image.size(), {}, image.size()});
  if (!fresh) ex.session().module_index()[{hash, gpu}] = h;
  LOG_DEBUG("module {} ({}) loaded on GPU {}", hash, FormatSize(image.size()), gpu);
  return h;
}

Status ReplyModule(Executor& ex, uint64_t tag, const Result<uint64_t>& h) {
  if (!h.ok()) return ex.PostReply(tag, h.status());
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.initModule().setHandle(*h); });
}

// Receives a shipped image (already charged when `charged`), checks that it hashes to the
// name the client gave it, loads it and only then adds it to the tenant's cache. With a
// `refusal` the bytes are only drained (never buffered) and the refusal is the answer.
// A module of a migrating session: loaded under its handle on the source, with its functions'.
struct Rekey {
  uint64_t module = 0;
  std::vector<std::pair<uint64_t, std::string>> functions;
};

// Gives module `h` (just loaded) the handle `to.module` and resolves its functions under
// theirs (planned migration).
Result<uint64_t> TakeHandles(Executor& ex, uint64_t h, const Rekey& to) {
  SessionState& s = ex.session();
  Module moved = *s.modules().Find(h);
  s.modules().Erase(h);
  Status st = s.modules().InsertAt(to.module, moved);
  if (!st.ok()) {
    (void)s.modules().InsertAt(h, moved);  // stays the session's under its own handle (freed at its end)
    return st;
  }
  s.module_index().try_emplace({moved.hash, moved.gpu}, to.module);
  for (const auto& [id, name] : to.functions) {
    auto f = ex.driver().ModuleGetFunction(moved.module, name.c_str());
    if (!f.ok()) return Status(Err::kInvalidDeviceFunction, f.status().message());
    auto params = ex.driver().FuncParams(*f);
    if (!params.ok()) return params.status();
    RETURN_IF_ERROR(s.functions().InsertAt(id, {*f, moved.gpu, to.module, *params}));
    s.function_index()[{to.module, name}] = id;
  }
  return to.module;
}

class ImageOp final : public PendingOp {
 public:
  ImageOp(uint64_t tag, int gpu, std::string hash, uint64_t size, bool fresh, bool charged, Status refusal,
          std::optional<Rekey> rekey = std::nullopt)
      : tag_(tag), gpu_(gpu), hash_(std::move(hash)), size_(size), fresh_(fresh), charged_(charged),
        refusal_(std::move(refusal)), rekey_(std::move(rekey)) {}
  // A cached image (read from the tenant's module cache): nothing comes over the transport.
  void Cached(std::vector<std::byte> image) {
    image_ = std::move(image);
    received_ = size_;
  }
  bool HoldsQueue() const override { return true; }
  // Only while its bytes arrive: then control frames (a host function's callbackDone, which
  // the load may wait for) get through.
  bool HoldsTransport() const override { return received_ < size_; }
  Result<bool> Poll(Executor& ex) override {
    bool keep = refusal_.ok();
    if (keep && image_.capacity() < size_) image_.reserve(size_);  // charged before any byte arrives
    while (received_ < size_) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex.PollBulk());
      if (!c) return false;
      if (c->size > size_ - received_) return Error(Err::kInvalidValue, "module image longer than announced");
      if (keep) image_.insert(image_.end(), c->data, c->data + c->size);
      received_ += c->size;
      ex.ReleaseBulk(*c);
    }
    if (!keep) {
      RETURN_IF_ERROR(ex.PostReply(tag_, refusal_));
      return true;
    }
    auto loaded = ex.session().module_index().find({hash_, gpu_});
    if (ModuleHashHex(image_.data(), image_.size()) != hash_) {
      Finish(ex);
      RETURN_IF_ERROR(ex.PostReply(tag_, Error(Err::kInvalidKernelImage, "module image does not match its hash")));
      return true;
    }
    if ((!fresh_ && loaded != ex.session().module_index().end()) || !charged_) {
      Finish(ex);  // loaded meanwhile (the client sent it twice): nothing new to hold
      RETURN_IF_ERROR(ReplyModule(ex, tag_, loaded != ex.session().module_index().end()
                                                ? Result<uint64_t>(loaded->second)
                                                : Result<uint64_t>(Error(Err::kInvalidValue, "module image not loaded"))));
      return true;
    }
    // Loading a module waits for the device (its globals are set in stream order): not while a
    // host function holds a stream (Executor::MayWaitForDevice; JAX stalled so over shm).
    if (!ex.MayWaitForDevice()) return false;
    charged_ = false;  // Load owns the charge now
    Result<uint64_t> h = Load(ex, gpu_, hash_, image_, fresh_);
    if (h.ok() && ex.config().module_cache != nullptr) ex.config().module_cache->Store(hash_, image_);
    if (h.ok() && rekey_) h = TakeHandles(ex, *h, *rekey_);
    image_ = {};
    RETURN_IF_ERROR(ReplyModule(ex, tag_, h));
    return true;
  }
  void Abandon(Executor& ex) override { Finish(ex); }

 private:
  void Finish(Executor& ex) {
    if (charged_) UnchargeImage(ex, gpu_, size_);
    charged_ = false;
    image_ = {};
  }

  uint64_t tag_;
  int gpu_;
  std::string hash_;
  uint64_t size_;
  bool fresh_;
  bool charged_;
  Status refusal_;
  std::optional<Rekey> rekey_;
  uint64_t received_ = 0;
  std::vector<std::byte> image_;
};

}  // namespace

Status Handlers::ModuleLoad(Executor& ex, const InFrame& frame, Req req) {
  uint64_t tag = frame.header.tag;
  auto a = req.getModuleLoad();
  uint64_t size = a.getSize();  // read once: the body may live in memory the client shares
  bool has_image = a.getHasImage();
  if (a.getHash().size() != kModuleHashBytes || size == 0 || size > kMaxImageBytes) {
    Status bad = Error(Err::kInvalidValue, "bad module load request (hash of {} bytes, image of {} bytes)",
                       a.getHash().size(), size);
    if (frame.header.bulk_bytes == 0) return ex.PostReply(tag, bad);
    return bad;  // its bulk cannot be trusted to match anything: the session ends
  }
  if (has_image != (frame.header.bulk_bytes == size) || (!has_image && frame.header.bulk_bytes != 0))
    return Error(Err::kInvalidValue, "module image size does not match the request");
  std::string hash = HashHex(a.getHash());
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) {
    if (frame.header.bulk_bytes == 0) return ex.PostReply(tag, gpu.status());
    return Error(Err::kInvalidValue, "module image for an unusable device");
  }
  bool fresh = a.getFresh();
  auto loaded = ex.session().module_index().find({hash, *gpu});
  if (!fresh && loaded != ex.session().module_index().end()) {
    if (has_image) {
      ex.AddPending(std::make_unique<ImageOp>(tag, *gpu, hash, size, false, false, Status::Ok()));  // checked, loaded once
      return Status::Ok();
    }
    return ReplyModule(ex, tag, loaded->second);
  }
  if (has_image) {
    Status charged = ChargeImage(ex, *gpu, size);
    if (!charged.ok())
      LOG_PEER(PeerLog(), Info, "refused a {} module image on GPU {}: {}", FormatSize(size), *gpu, charged.message());
    ex.AddPending(std::make_unique<ImageOp>(tag, *gpu, hash, size, fresh, charged.ok(), charged));
    return Status::Ok();
  }
  // Only this tenant's own uploads can answer a request without the image.
  Status charged = ChargeImage(ex, *gpu, size);
  if (!charged.ok()) return ex.PostReply(tag, charged);
  std::vector<std::byte> cached = ex.config().module_cache ? ex.config().module_cache->Read(hash, size) : std::vector<std::byte>();
  if (cached.empty()) {
    UnchargeImage(ex, *gpu, size);
    return ex.PostReply(tag, Status::Ok(), [](wire::Reply::Builder& r) { r.initModule().setNeedImage(true); });
  }
  LOG_DEBUG("module {} served from the tenant's module cache", hash);
  auto op = std::make_unique<ImageOp>(tag, *gpu, hash, size, fresh, /*charged=*/true, Status::Ok());
  op->Cached(std::move(cached));
  ex.AddPending(std::move(op));
  return Status::Ok();
}

Status Handlers::MigrateModule(Executor& ex, const InFrame& frame, Req req) {
  uint64_t tag = frame.header.tag;
  auto a = req.getMigrateModule();
  uint64_t size = a.getSize();
  if (a.getHash().size() != kModuleHashBytes || size == 0 || size > kMaxImageBytes || frame.header.bulk_bytes != size)
    return Error(Err::kInvalidValue, "bad migrated module (hash of {} bytes, image of {} bytes, {} bytes of data)",
                 a.getHash().size(), size, frame.header.bulk_bytes);
  Rekey rekey;
  rekey.module = a.getHandle();
  for (auto f : a.getFunctions()) rekey.functions.emplace_back(f.getHandle(), f.getName());
  auto gpu = ex.GpuOf(a.getOrdinal());
  Status charged = gpu.ok() ? ChargeImage(ex, *gpu, size) : gpu.status();
  ex.AddPending(std::make_unique<ImageOp>(tag, gpu.ok() ? *gpu : 0, HashHex(a.getHash()), size, true, charged.ok(), charged,
                                          std::move(rekey)));
  return Status::Ok();
}

Status Handlers::GetFunction(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getGetFunction();
  std::string name = a.getName();
  auto m = ex.session().modules().Get(a.getModule());
  if (!m.ok()) return ex.PostReply(tag, m.status());
  uint64_t handle = 0;
  auto known = ex.session().function_index().find({a.getModule(), name});
  if (known != ex.session().function_index().end()) {
    handle = known->second;
  } else {
    Status st = ex.SetDevice((*m)->gpu);
    if (!st.ok()) return ex.PostReply(tag, st);
    auto f = ex.driver().ModuleGetFunction((*m)->module, name.c_str());
    if (!f.ok()) return ex.PostReply(tag, Status(Err::kInvalidDeviceFunction, f.status().message()));
    auto params = ex.driver().FuncParams(*f);
    if (!params.ok()) return ex.PostReply(tag, params.status());
    handle = ex.session().functions().Insert({*f, (*m)->gpu, a.getModule(), *params});
    ex.session().function_index()[{a.getModule(), name}] = handle;
  }
  Executor::Function* fn = ex.session().functions().Find(handle);
  std::vector<int32_t> attrs(kNumFunctionAttributes, 0);
  for (int i = 0; i < kNumFunctionAttributes; i++) {
    auto v = ex.driver().FuncGetAttribute(fn->function, i);
    if (v.ok()) attrs[static_cast<size_t>(i)] = *v;
  }
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    auto info = r.initFunction();
    info.setHandle(handle);
    auto ps = info.initParams(static_cast<unsigned>(fn->params.size()));
    for (size_t i = 0; i < fn->params.size(); i++) {
      ps[static_cast<unsigned>(i)].setOffset(fn->params[i].offset);
      ps[static_cast<unsigned>(i)].setSize(fn->params[i].size);
    }
    auto at = info.initAttributes(static_cast<unsigned>(attrs.size()));
    for (size_t i = 0; i < attrs.size(); i++) at.set(static_cast<unsigned>(i), attrs[i]);
  });
}

Status Handlers::GetGlobal(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getGetGlobal();
  auto m = ex.session().modules().Get(a.getModule());
  if (!m.ok()) return ex.PostReply(tag, m.status());
  Status st = ex.SetDevice((*m)->gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  std::string name = a.getName();
  uint64_t hint = a.getSize();
  // The emulated driver backs a variable it does not know with `hint` bytes of its memory:
  // charged to the tenant first, like any allocation, and held with the module.
  bool charge_hint = ex.driver().emulated() && hint > 0;
  if (charge_hint) {
    Status q = ex.Charge((*m)->gpu, hint);
    if (!q.ok()) return ex.PostReply(tag, q);
  }
  auto g = ex.driver().ModuleGetGlobal((*m)->module, name.c_str(), hint);
  bool known = g.ok() && ex.session().allocations().Find(g->first).has_value();
  if (charge_hint && (!g.ok() || known)) ex.ReleaseCharge((*m)->gpu, hint);
  else if (charge_hint) (*m)->charged += hint;
  if (!g.ok()) return ex.PostReply(tag, Status(Err::kInvalidSymbol, g.status().message()));
  // Copies to and from the variable are checked like any other device memory.
  if (!known) {
    Allocation al;
    al.base = g->first;
    al.size = g->second;
    al.device = (*m)->gpu;
    al.kind = AllocKind::kModule;
    (void)ex.session().allocations().Insert(al);
    (*m)->globals.push_back(g->first);
  }
  const bool managed = ex.driver().GlobalIsManaged((*m)->module, name.c_str(), g->first);
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    auto gi = r.initGlobal();
    gi.setPtr(g->first);
    gi.setSize(g->second);
    gi.setManaged(managed);
  });
}

Status Handlers::LaunchKernel(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getLaunchKernel();
  auto f = ex.session().functions().Get(a.getFunction());
  if (!f.ok()) return ReplyOrDefer(ex, tag, f.status());
  auto s = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!s.ok()) return ReplyOrDefer(ex, tag, s.status());
  if (s->gpu != (*f)->gpu)
    return ReplyOrDefer(ex, tag, Error(Err::kInvalidResourceHandle, "the stream belongs to another device than the kernel"));
  LaunchConfig c;
  c.grid[0] = a.getGrid().getX();
  c.grid[1] = a.getGrid().getY();
  c.grid[2] = a.getGrid().getZ();
  c.block[0] = a.getBlock().getX();
  c.block[1] = a.getBlock().getY();
  c.block[2] = a.getBlock().getZ();
  c.shared_mem = a.getSharedMem();
  c.stream = s->stream;
  c.cooperative = a.getCooperative();
  // The parameter buffer stays valid for the call; the driver copies the values.
  auto data = a.getParams();
  const std::vector<ParamInfo>& layout = (*f)->params;
  // No allocation for the usual parameter counts (the launch path is hot).
  std::array<void*, 64> fixed;
  std::vector<void*> many;
  void** params = fixed.data();
  if (layout.size() > fixed.size()) {
    many.resize(layout.size());
    params = many.data();
  }
  for (size_t i = 0; i < layout.size(); i++) {
    if (uint64_t{layout[i].offset} + layout[i].size > data.size())
      return ReplyOrDefer(ex, tag, Error(Err::kInvalidValue, "kernel parameters are {} bytes, parameter {} needs {}",
                                         data.size(), i, layout[i].offset + layout[i].size));
    params[i] = const_cast<unsigned char*>(data.begin() + layout[i].offset);
  }
  c.params = layout.empty() ? nullptr : params;
  for (auto at : a.getAttributes()) {
    uint32_t id = at.getId();
    // Attributes that carry event handles would need translating: not supported.
    if (id == 7 || id == 12 || id == 13 || at.getValue().size() != sizeof(LaunchAttr::value))
      return ReplyOrDefer(ex, tag, Error(Err::kNotSupported, "launch attribute {} is not supported by Remora", id));
    LaunchAttr la;
    la.id = id;
    std::memcpy(la.value, at.getValue().begin(), sizeof(la.value));
    c.attrs.push_back(la);
  }
  Status st = ex.SetDevice(s->gpu);
  if (st.ok()) st = ex.driver().Launch((*f)->function, c);
  if (st.ok()) ex.NoteGpuWork(*s);
  return ReplyOrDefer(ex, tag, st);
}

}  // namespace remora::worker

// Modules, kernels and device variables: fat binaries are loaded on first use (from the
// server-wide cache when another session already shipped them), functions and variables
// resolved by name, kernels launched with the parameter layout the driver reports.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/auth.h"
#include "worker/handlers.h"

namespace remora::worker {
namespace {

constexpr uint64_t kMaxImageBytes = 1ull << 30;


std::string HashHex(capnp::Data::Reader h) { return ToHex(h.begin(), h.size()); }

std::string HashOf(const std::vector<std::byte>& image) {
  XXH128_hash_t h = XXH3_128bits(image.data(), image.size());
  uint8_t bytes[16];
  XXH128_canonicalFromHash(reinterpret_cast<XXH128_canonical_t*>(bytes), h);
  return ToHex(bytes, 16);
}

std::string CachePath(const Executor& ex, const std::string& hash) {
  return ex.config().module_cache_dir + "/" + hash + ".fatbin";
}

// Reads a cached image; empty if absent or of the wrong size.
std::vector<std::byte> ReadCached(const Executor& ex, const std::string& hash, uint64_t size) {
  if (ex.config().module_cache_dir.empty()) return {};
  std::ifstream in(CachePath(ex, hash), std::ios::binary);
  if (!in) return {};
  std::vector<std::byte> image(size);
  in.read(reinterpret_cast<char*>(image.data()), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size || in.peek() != EOF) return {};
  if (HashOf(image) != hash) return {};  // a damaged file is ignored (and overwritten later)
  return image;
}

void WriteCached(const Executor& ex, const std::string& hash, const std::vector<std::byte>& image) {
  if (ex.config().module_cache_dir.empty()) return;
  std::string path = CachePath(ex, hash);
  std::string tmp = path + fmt::format(".tmp{}", getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
    if (!out) {
      LOG_WARN("cannot write the module cache file {}", tmp);
      ::unlink(tmp.c_str());
      return;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

// Loads an image on `gpu` and registers the module; charges its size to the tenant. A fresh
// load is a module of its own, not shared with the session's other loads of the image.
Result<uint64_t> Load(Executor& ex, int gpu, const std::string& hash, const std::vector<std::byte>& image,
                      bool fresh = false) {
  RETURN_IF_ERROR(ex.Charge(gpu, image.size()));
  Status st = ex.SetDevice(gpu);
  Result<DModule> m = st.ok() ? ex.driver().ModuleLoad(image.data(), image.size()) : Result<DModule>(st);
  if (!m.ok()) {
    ex.ReleaseCharge(gpu, image.size());
    return m.status();
  }
  uint64_t h = ex.session().modules().Insert({*m, gpu, hash, image.size(), {}});
  if (!fresh) ex.session().module_index()[{hash, gpu}] = h;
  LOG_DEBUG("module {} ({}) loaded on GPU {}", hash, FormatSize(image.size()), gpu);
  return h;
}

Status ReplyModule(Executor& ex, uint64_t tag, const Result<uint64_t>& h) {
  if (!h.ok()) return ex.PostReply(tag, h.status());
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.initModule().setHandle(*h); });
}

// Receives a shipped image, checks its hash, caches and loads it.
class ImageOp final : public PendingOp {
 public:
  ImageOp(uint64_t tag, int gpu, std::string hash, uint64_t size, bool fresh)
      : tag_(tag), gpu_(gpu), hash_(std::move(hash)), fresh_(fresh) {
    image_.reserve(size);
  }
  bool HoldsQueue() const override { return true; }
  bool HoldsTransport() const override { return true; }
  Result<bool> Poll(Executor& ex) override {
    while (image_.size() < image_.capacity()) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex.PollBulk());
      if (!c) return false;
      image_.insert(image_.end(), c->data, c->data + c->size);
      ex.ReleaseBulk(*c);
    }
    if (HashOf(image_) != hash_) {
      RETURN_IF_ERROR(ex.PostReply(tag_, Error(Err::kInvalidKernelImage, "module image does not match its hash")));
      return true;
    }
    WriteCached(ex, hash_, image_);
    auto loaded = ex.session().module_index().find({hash_, gpu_});
    if (!fresh_ && loaded != ex.session().module_index().end()) RETURN_IF_ERROR(ReplyModule(ex, tag_, loaded->second));
    else RETURN_IF_ERROR(ReplyModule(ex, tag_, Load(ex, gpu_, hash_, image_, fresh_)));
    return true;
  }

 private:
  uint64_t tag_;
  int gpu_;
  std::string hash_;
  bool fresh_;
  std::vector<std::byte> image_;
};

}  // namespace

Status Handlers::ModuleLoad(Executor& ex, const InFrame& frame, Req req) {
  uint64_t tag = frame.header.tag;
  auto a = req.getModuleLoad();
  if (a.getHash().size() != 16 || a.getSize() == 0 || a.getSize() > kMaxImageBytes)
    return Error(Err::kInvalidValue, "bad module load request");
  if (a.getHasImage() != (frame.header.bulk_bytes == a.getSize()) || (!a.getHasImage() && frame.header.bulk_bytes != 0))
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
    if (frame.header.bulk_bytes > 0) {
      ex.AddPending(std::make_unique<ImageOp>(tag, *gpu, hash, a.getSize(), false));  // drained, loaded once
      return Status::Ok();
    }
    return ReplyModule(ex, tag, loaded->second);
  }
  if (a.getHasImage()) {
    ex.AddPending(std::make_unique<ImageOp>(tag, *gpu, hash, a.getSize(), fresh));
    return Status::Ok();
  }
  std::vector<std::byte> cached = ReadCached(ex, hash, a.getSize());
  if (cached.empty())
    return ex.PostReply(tag, Status::Ok(), [](wire::Reply::Builder& r) { r.initModule().setNeedImage(true); });
  LOG_DEBUG("module {} served from the server's cache", hash);
  return ReplyModule(ex, tag, Load(ex, *gpu, hash, cached, fresh));
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
  auto g = ex.driver().ModuleGetGlobal((*m)->module, name.c_str(), a.getSize());
  if (!g.ok()) return ex.PostReply(tag, Status(Err::kInvalidSymbol, g.status().message()));
  // Copies to and from the variable are checked like any other device memory.
  if (!ex.session().allocations().Find(g->first)) {
    Allocation al;
    al.base = g->first;
    al.size = g->second;
    al.device = (*m)->gpu;
    al.kind = AllocKind::kModule;
    (void)ex.session().allocations().Insert(al);
    (*m)->globals.push_back(g->first);
  }
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    auto gi = r.initGlobal();
    gi.setPtr(g->first);
    gi.setSize(g->second);
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

Status Handlers::FuncGetAttributes(Executor& ex, uint64_t tag, Req req) {
  auto f = ex.session().functions().Get(req.getFuncGetAttributes());
  if (!f.ok()) return ex.PostReply(tag, f.status());
  Status st = ex.SetDevice((*f)->gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  std::vector<int32_t> attrs(kNumFunctionAttributes, 0);
  for (int i = 0; i < kNumFunctionAttributes; i++) {
    auto v = ex.driver().FuncGetAttribute((*f)->function, i);
    if (v.ok()) attrs[static_cast<size_t>(i)] = *v;
  }
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) {
    auto at = r.initAttributes(static_cast<unsigned>(attrs.size()));
    for (size_t i = 0; i < attrs.size(); i++) at.set(static_cast<unsigned>(i), attrs[i]);
  });
}

Status Handlers::FuncSetAttribute(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getFuncSetAttribute();
  auto f = ex.session().functions().Get(a.getFunction());
  if (!f.ok()) return ex.PostReply(tag, f.status());
  Status st = ex.SetDevice((*f)->gpu);
  if (st.ok()) st = ex.driver().FuncSetAttribute((*f)->function, a.getAttribute(), a.getValue());
  return ex.PostReply(tag, st);
}

Status Handlers::FuncSetCacheConfig(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getFuncSetCacheConfig();
  auto f = ex.session().functions().Get(a.getFunction());
  if (!f.ok()) return ex.PostReply(tag, f.status());
  Status st = ex.SetDevice((*f)->gpu);
  if (st.ok()) st = ex.driver().FuncSetCacheConfig((*f)->function, a.getValue());
  return ex.PostReply(tag, st);
}

Status Handlers::Occupancy(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getOccupancy();
  auto f = ex.session().functions().Get(a.getFunction());
  if (!f.ok()) return ex.PostReply(tag, f.status());
  Status st = ex.SetDevice((*f)->gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  Result<int64_t> value = Status(Err::kInvalidValue, "unknown occupancy query");
  switch (a.getKind()) {
    case wire::Occupancy::Kind::MAX_ACTIVE_BLOCKS: {
      auto v = ex.driver().OccupancyMaxActiveBlocks((*f)->function, a.getBlockSize(), a.getDynamicSmem(), a.getFlags());
      value = v.ok() ? Result<int64_t>(*v) : Result<int64_t>(v.status());
      break;
    }
    case wire::Occupancy::Kind::AVAILABLE_DYNAMIC_SMEM: {
      auto v = ex.driver().OccupancyAvailableDynamicSmem((*f)->function, a.getNumBlocks(), a.getBlockSize());
      value = v.ok() ? Result<int64_t>(static_cast<int64_t>(*v)) : Result<int64_t>(v.status());
      break;
    }
    case wire::Occupancy::Kind::MAX_ACTIVE_CLUSTERS:
    case wire::Occupancy::Kind::MAX_POTENTIAL_CLUSTER_SIZE: {
      auto l = a.getLaunch();
      LaunchConfig c;
      c.grid[0] = l.getGrid().getX();
      c.grid[1] = l.getGrid().getY();
      c.grid[2] = l.getGrid().getZ();
      c.block[0] = l.getBlock().getX();
      c.block[1] = l.getBlock().getY();
      c.block[2] = l.getBlock().getZ();
      c.shared_mem = l.getSharedMem();
      for (auto at : l.getAttributes()) {
        if (at.getValue().size() != sizeof(LaunchAttr::value)) continue;
        LaunchAttr la;
        la.id = at.getId();
        std::memcpy(la.value, at.getValue().begin(), sizeof(la.value));
        c.attrs.push_back(la);
      }
      auto v = a.getKind() == wire::Occupancy::Kind::MAX_ACTIVE_CLUSTERS
                   ? ex.driver().OccupancyMaxActiveClusters((*f)->function, c)
                   : ex.driver().OccupancyMaxPotentialClusterSize((*f)->function, c);
      value = v.ok() ? Result<int64_t>(*v) : Result<int64_t>(v.status());
      break;
    }
  }
  if (!value.ok()) return ex.PostReply(tag, value.status());
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.setValue(*value); });
}

}  // namespace remora::worker

#include "remote_call.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "error_log.h"
#include "lib_objects.h"
#include "process.h"
#include "remora.capnp.h"
#include "remora/base/log.h"
#include "cuda_client.h"
#include "cuda_wire.h"
#include "runtime.h"
#include "thread_slot.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

// The encoding buffer of the calling thread, reused call after call. A RemoteCall nests inside
// another on one thread only once the outer one's arguments are out of it (staged pieces,
// held results: Invoke).
api::ArgWriter& ThreadArgs() {
  api::ArgWriter& w = ThreadSlot<api::ArgWriter>();
  w.Clear();
  return w;
}

}  // namespace

CallBatch*& ThreadCallBatch() {
  static thread_local CallBatch* batch = nullptr;
  return batch;
}

RemoteCall::RemoteCall(const CallCtx& cc, uint16_t library, uint32_t function, CallClass cls, Domain domain)
    : cc_(cc), library_(library), function_(function), cls_(cls), domain_(domain), args_(ThreadArgs()) {}

Status RemoteCall::Fail(uint32_t code, const char* what) const {
  return Status(domain_, code, fmt::format("{}: {}", cc_.name, what));
}

Status RemoteCall::Claim(int device) {
  if (device < 0) return Status::Ok();
  if (device_ < 0) {
    device_ = device;
    return Status::Ok();
  }
  if (!Runtime::Get().SameServer(device_, device))
    return Error(Err::kNotSupported, "{}: devices {} and {} are on two Remora servers (no call spans servers but "
                 "copies)", cc_.name, device_, device);
  return Status::Ok();
}

Status RemoteCall::Stream(const void* stream) {
  int device = 0;
  RETURN_IF_ERROR(Runtime::Get().CheckStream(static_cast<cudaStream_t>(const_cast<void*>(stream)), &device));
  args_.Put<uint64_t>(reinterpret_cast<uint64_t>(stream));
  args_.Put<uint8_t>(cc_.per_thread ? 1 : 0);
  if (idle_ && !has_stream_) {  // only a call that may be answered here needs the key
    stream_key_ = StreamKeyOf(static_cast<cudaStream_t>(const_cast<void*>(stream)), cc_.per_thread, device);
    has_stream_ = true;
  }
  // A default stream is the current device's; with several servers, unless what else the
  // call names is another server's (then that device's: see Invoke).
  if (IsDefaultStream(static_cast<cudaStream_t>(const_cast<void*>(stream)))) {
    if (Runtime::Get().server_count() <= 1) {
      if (device_ < 0) device_ = device;
    } else {
      default_stream_device_ = device;
    }
    return Status::Ok();
  }
  return Claim(device);
}

Status RemoteCall::Handle(HandleKind kind, const void* handle, bool nullable) {
  auto h = reinterpret_cast<uint64_t>(handle);
  if (h == 0 && !nullable) return Error(Err::kInvalidResourceHandle, "{}: the {} handle is NULL", cc_.name, HandleKindName(kind));
  if (h != 0 && kind == HandleKind::kEvent) {
    RETURN_IF_ERROR(Runtime::Get().CheckEvent(static_cast<cudaEvent_t>(const_cast<void*>(handle))));
    RETURN_IF_ERROR(Claim(Runtime::Get().EventDevice(h)));
  } else if (h != 0) {
    RETURN_IF_ERROR(Claim(Runtime::Get().DeviceOfHandle(h)));  // several servers: its minter's
  }
  args_.Put<uint64_t>(h);
  return Status::Ok();
}

Status RemoteCall::Device(int ordinal) {
  ASSIGN_OR_RETURN(auto d, Runtime::Get().Device(ordinal));
  if (d->detached) return Error(Err::kDevicesUnavailable, "device {} was detached by the administrator", ordinal);
  if (d->lost) return Error(Err::kDevicesUnavailable, "device {}'s Remora server stopped answering", ordinal);
  RETURN_IF_ERROR(Claim(ordinal));
  args_.Put<int32_t>(Runtime::Get().LocalOrdinal(ordinal));  // the server's own
  return Status::Ok();
}

Status RemoteCall::DevPtr(uint64_t ptr, uint64_t bytes) {
  Runtime& rt = Runtime::Get();
  RETURN_IF_ERROR(rt.CheckDeviceRange(ptr, bytes == 0 ? 1 : bytes));
  if (auto a = rt.FindDevice(ptr)) RETURN_IF_ERROR(Claim(a->device));
  args_.Put<uint64_t>(ptr);
  return Status::Ok();
}

Status RemoteCall::Object(HandleKind kind, uint64_t id, bool nullable, bool ends) {
  if (id == 0) {
    if (!nullable) return Error(Err::kInvalidResourceHandle, "{}: the {} is NULL", cc_.name, HandleKindName(kind));
    args_.Put<uint64_t>(0);
    return Status::Ok();
  }
  id = Process::Get().lib_objects().Resolve(id);  // (descriptor storage the application owns: its object)
  auto o = Process::Get().lib_objects().Get(id, kind);
  if (!o.ok()) return Error(Err::kInvalidResourceHandle, "{}: {}", cc_.name, o.status().message());
  if (ends && o->kind != kind)
    return Error(Err::kInvalidResourceHandle, "{}: 0x{:x} is a {}, not a {}", cc_.name, id, HandleKindName(o->kind), HandleKindName(kind));
  RETURN_IF_ERROR(Claim(o->device));
  objects_.push_back(ObjectArg{args_.bytes().size(), id, o->content});
  args_.Put<uint64_t>(id);
  return Status::Ok();
}

uint64_t RemoteCall::NewObject(HandleKind kind) {
  uint64_t id = Process::Get().lib_objects().Mint(kind);
  objects_.push_back(ObjectArg{args_.bytes().size(), id, 0});
  args_.Put<uint64_t>(id);
  return id;
}

uint64_t RemoteCall::Digest(uint64_t self, uint64_t self_content) const {
  const std::vector<std::byte>& b = args_.bytes();
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  };
  mix(&library_, sizeof(library_));
  mix(&function_, sizeof(function_));
  size_t at = 0;
  for (const ObjectArg& o : objects_) {
    if (o.offset < at || o.offset + 8 > b.size()) continue;
    mix(b.data() + at, o.offset - at);
    uint64_t content = o.id == self ? self_content : o.content;
    mix(&content, sizeof(content));
    at = o.offset + 8;
  }
  mix(b.data() + at, b.size() - at);
  return h;
}

void RemoteCall::AdoptObject(uint64_t id, HandleKind kind) {
  int device = device_;
  if (device < 0) {
    auto d = Runtime::Get().CurrentDevice();
    device = d.ok() ? *d : 0;
  }
  Process::Get().lib_objects().Add(id, kind, device, Digest(id, 0));
}

void RemoteCall::ForgetObject(uint64_t id) { Process::Get().lib_objects().Remove(id); }

void RemoteCall::TouchObject(uint64_t id) {
  id = Process::Get().lib_objects().Resolve(id);
  for (const ObjectArg& o : objects_)
    if (o.id == id) Process::Get().lib_objects().SetContent(id, Digest(id, o.content));
}

bool RemoteCall::ObjectMode(uint64_t id, int bit) const {
  auto o = Process::Get().lib_objects().Find(id);
  return o && ((o->mode >> bit) & 1u) != 0;
}

namespace {

// Results the worker held because they did not fit in one reply (Reply.apiResultHeld), read
// in pieces on the device whose server holds them. Blocking; any thread.
Result<std::vector<std::byte>> ReadHeldResult(int device, uint64_t id, uint64_t size) {
  constexpr uint64_t kPiece = api::kHeldPieceBytes;
  if (size > api::kMaxHeldResultBytes) return Error(Err::kUnknown, "malformed reply: a held result of {} bytes", size);
  std::vector<std::byte> bytes(size);
  for (uint64_t at = 0; at < size; at += kPiece) {
    const uint64_t n = std::min(kPiece, size - at);
    RETURN_IF_ERROR(gen::cuda::remoraHeldResultPiece(CallCtx{false, "remoraHeldResultPiece"}, device, id, at, bytes.data() + at, n));
  }
  return bytes;
}

// Sends `args` ahead to the worker of `device` in posted pieces (remoraStageArgsPiece, in
// order on that link, so they arrive before the call); the id the call names them by.
Result<uint64_t> StageArgs(int device, const std::vector<std::byte>& args) {
  static std::atomic<uint64_t> next{1};
  if (args.size() > api::kMaxStagedArgBytes)
    return Error(Err::kInvalidValue, "a call's arguments of {} bytes: at most {} travel", args.size(), api::kMaxStagedArgBytes);
  const uint64_t id = next.fetch_add(1);
  for (uint64_t at = 0; at < args.size(); at += api::kHeldPieceBytes) {
    const uint64_t n = std::min<uint64_t>(api::kHeldPieceBytes, args.size() - at);
    RETURN_IF_ERROR(gen::cuda::remoraStageArgsPiece(CallCtx{false, "remoraStageArgsPiece"}, device, id, args.size(), at, n,
                                                    args.data() + at));
  }
  return id;
}

}  // namespace

Status RemoteCall::Invoke(FunctionRef<Status(api::ArgReader&)> results) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * session, rt.Session());
  if (device_ < 0) {
    ASSIGN_OR_RETURN(device_, rt.CurrentDevice());
  }
  if (default_stream_device_ >= 0 && rt.SameServer(device_, default_stream_device_)) device_ = default_stream_device_;
  if (cls_ == CallClass::kOrdered) {
    // A group the library gathers (NCCL's ncclGroupStart..End): kept, sent with the group.
    CallBatch* batch = ThreadCallBatch();
    if (batch != nullptr && batch->library == library_) {
      batch->calls.push_back(CallBatch::Call{device_, function_, args_.bytes()});
      return Status::Ok();
    }
  }
  Client* c = session->LinkFor(device_);  // the server of the device (several servers)
  // The device may read managed memory: what the host wrote goes first (managed.h).
  RETURN_IF_ERROR(rt.managed().BeforeDeviceWork());
  // A stream nothing was sent to since it was last drained has nothing to wait for.
  const bool idle_check = idle_ && has_stream_;
  uint64_t seq = 0;
  if (idle_check) {
    // A synchronisation waits for the reply of a posted copy that drains the stream rather
    // than asking the server again; a query does not wait.
    if (c->StreamIdle(stream_key_, cls_ == CallClass::kWait)) {
      // As below: the session's pending asynchronous error, and managed memory's host copies
      // refreshed (the copy that drained the stream may have been an asynchronous one).
      Status st = cls_ == CallClass::kWait ? c->TakeAsyncError() : Status::Ok();
      if (st.ok()) rt.managed().AfterSync();
      return st;
    }
    seq = c->work_sequence();
  }
  const std::vector<std::byte>& bytes = args_.bytes();
  std::string key;
  if (memo_ && cls_ == CallClass::kSync) {
    key = fmt::format("{:x}.{}", Digest(0, 0), device_);
    if (auto hit = Process::Get().lib_objects().Recall(key)) {
      if (!results) return Status::Ok();
      api::ArgReader reader(hit->data(), hit->size());
      return results(reader);
    }
  }
  // Arguments too large for one request go ahead in pieces, and the call names them.
  uint64_t staged = 0;
  if (bytes.size() > api::kInlineArgBytes) {
    // Moved out first: the pieces are calls of their own, which reuse this thread's buffer.
    const std::vector<std::byte> ahead = args_.Take();
    ASSIGN_OR_RETURN(staged, StageArgs(device_, ahead));
  }
  auto build = [&](wire::Request::Builder& r) {
    auto a = r.initApiCall();
    a.setLibrary(library_);
    a.setFunction(function_);
    if (staged != 0) a.setStagedArgs(staged);
    else a.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size()));
  };
  if (cls_ == CallClass::kOrdered) {
    // Like a kernel launch: nothing to wait for, but a broken context fails at once.
    RETURN_IF_ERROR(c->sticky());
    return c->Post(device_, build);
  }
  // Decodes the call's results (and remembers them for a memoised call).
  auto decode = [&](const std::byte* data, size_t size) -> Status {
    api::ArgReader reader(data, size);
    Status decoded = results(reader);
    if (decoded.ok() && !key.empty()) Process::Get().lib_objects().Remember(std::move(key), std::vector<std::byte>(data, data + size));
    return decoded;
  };
  uint64_t held_id = 0, held_size = 0;
  Status st = c->Call(device_, build, [&](wire::Reply::Reader& r) -> Status {
    if (r.isApiResultHeld()) {  // read back below, once this reply is done with
      held_id = r.getApiResultHeld().getId();
      held_size = r.getApiResultHeld().getSize();
      return Status::Ok();
    }
    if (!results) {
      if (!key.empty()) Process::Get().lib_objects().Remember(std::move(key), {});
      return Status::Ok();
    }
    // A reply without results: the call returned nothing this time (a scalar result in
    // device memory); the decoder still checks that it expected nothing.
    capnp::Data::Reader d;
    if (r.isApiResult()) d = r.getApiResult();
    return decode(reinterpret_cast<const std::byte*>(d.begin()), d.size());
  });
  if (st.ok() && held_id != 0) {
    auto bytes = ReadHeldResult(device_, held_id, held_size);
    st = !bytes.ok() ? bytes.status() : results ? decode(bytes->data(), bytes->size()) : Status::Ok();
  }
  if (idle_check && st.ok()) c->NoteStreamDrained(stream_key_, seq);
  if (cls_ == CallClass::kWait && st.ok()) st = c->TakeAsyncError();
  // The device finished what it was given: the host's copies of managed memory may be stale.
  bool synchronised = cls_ == CallClass::kWait ||
                      (library_ == gen::cuda::kLibrary &&
                       (function_ == gen::cuda::k_cuStreamQuery || function_ == gen::cuda::k_cuEventQuery));
  if (st.ok() && synchronised) rt.managed().AfterSync();
  return st;
}

uint32_t FinishApi(Domain caller, const Status& st, const char* call) {
  if (caller == Domain::kCudart) return static_cast<uint32_t>(Finish(st, call));
  if (st.ok()) return 0;
  LOG_INFO("{} -> {}", call, st.ToString());
  if (caller == Domain::kCuda && st.code() != Err::kNotReady) Process::Get().error_log().Record(call, st.ToString());
  if (st.domain() == caller) return st.raw();
  // The runtime's and the driver's codes coincide for every error Remora reports.
  if (caller == Domain::kCuda && st.domain() == Domain::kCudart) return st.raw();
  return static_cast<uint32_t>(Err::kUnknown);
}

uint32_t FinishLib(Domain caller, const LibCodes& codes, const Status& st, const char* call) {
  if (st.ok()) return codes.ok;
  LOG_INFO("{} -> {}", call, st.ToString());  // a library's status: not an entry of CUDA's error log
  if (st.domain() == caller) return st.raw();
  if (st.domain() != Domain::kCudart && st.domain() != Domain::kCuda) return codes.internal;
  switch (st.code()) {
    case Err::kInvalidValue:
    case Err::kInvalidResourceHandle:
    case Err::kInvalidDevicePointer:
    case Err::kInvalidDevice:
      return codes.invalid;
    case Err::kMemoryAllocation:
      return codes.nomem;
    case Err::kNotSupported:
      return codes.unsupported;
    case Err::kDevicesUnavailable:
    case Err::kNoDevice:
    case Err::kInitializationError:
      return codes.lost;
    default:
      return codes.internal;
  }
}

uint32_t NotSupported(Domain caller, uint32_t code, const char* call) {
  if (Process::Get().FirstTime(call)) LOG_WARN("{} is not supported by Remora yet", call);
  if (caller == Domain::kCuda || caller == Domain::kCudart) Process::Get().error_log().Record(call, "not supported by Remora");
  if (caller == Domain::kCudart) Thread().last_error = static_cast<cudaError_t>(code);
  return code;
}

uint32_t Refused(Domain caller, uint32_t code, const char* call, const char* reason) {
  if (Process::Get().FirstTime(call)) LOG_WARN("{} is refused by Remora: {}", call, reason);
  if (caller == Domain::kCuda || caller == Domain::kCudart) Process::Get().error_log().Record(call, "refused by Remora");
  if (caller == Domain::kCudart) Thread().last_error = static_cast<cudaError_t>(code);
  return code;
}

}  // namespace remora::shim

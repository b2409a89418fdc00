// The worker's end of generated calls (wire::ApiCall): the context a generated operation
// (build/generated/api/<lib>_dispatch.cc) decodes its arguments through, and the dispatch
// of an apiCall request to the operation of its library and number. Each argument is
// checked against the session's own tables before the library sees it; a call's class
// decides whether and when it is answered. Used by the executor's single thread.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "remora.capnp.h"
#include "remora/base/util.h"
#include "remora/memmgr/handle_table.h"
#include "remora/protocol/api_args.h"
#include "remora/protocol/frame.h"
#include "worker/session/executor.h"
#include "worker/session/lib_objects.h"

namespace remora::worker {

using api::CallClass;

class OpContext {
 public:
  OpContext(Executor& ex, wire::Request::Reader req, api::ArgReader in, void* library, Domain domain = Domain::kCuda);

  api::ArgReader& in() { return in_; }
  api::ArgWriter& out() { return out_; }
  // The library implementation (gen::<lib>::Api) the operation calls.
  template <typename Api>
  Api& Library() {
    return *static_cast<Api*>(library_);
  }

  // Role decoders: read the argument, check it, and produce what the library takes.
  // A stream: a session stream (or a default one), its GPU made current.
  Status Stream(void** stream);
  // A session handle of `kind` (0 only if nullable), as the driver's handle.
  Status Handle(HandleKind kind, bool nullable, void** handle);
  // The session's handle of the last stream or handle argument decoded (0: a default stream
  // or a NULL handle): hooks that end the object it names.
  uint64_t handle_id() const { return handle_id_; }
  // Session handles of `kind` (none 0), replaced in place by the driver's handles.
  Status Handles(HandleKind kind, void** handles, size_t n);
  // The application's device ordinal, as the server's device.
  Status Device(int* device);
  // An address that must lie, with `bytes` after it, in one allocation of this session.
  Status DevPtr(uint64_t addr, uint64_t bytes, uint64_t* checked);
  // The capacity of an output array, as a vector of that size. The call's outputs together
  // are bounded by what a session may hold as one result (api::kMaxHeldResultBytes: results
  // over a reply's size are held and read back in pieces); cuSolverRf's L factor alone is
  // 5.4 MB.
  template <typename T>
  Status OutArray(std::vector<T>* v) {
    uint64_t n = in_.Get<uint64_t>();
    if (n > (api::kMaxHeldResultBytes - out_capacity_) / sizeof(T))
      return Error(Err::kInvalidValue, "malformed request: an output of {} elements, beyond the {} a call may return", n,
                   FormatSize(api::kMaxHeldResultBytes));
    out_capacity_ += n * sizeof(T);
    v->resize(static_cast<size_t>(n));
    return Status::Ok();
  }
  // A buffer of `n` bytes for an argument whose size an expression gives. The call's buffers
  // together are bounded by what its arguments may carry (api::kMaxStagedArgBytes: arguments
  // over a request's size are sent ahead in pieces); cusolverRfSetupHost's L values alone are
  // 5.4 MB.
  Status Buffer(std::vector<std::byte>* v, uint64_t n) {
    if (n > api::kMaxStagedArgBytes - buffer_bytes_) return Malformed("argument buffers beyond what a call may carry");
    buffer_bytes_ += n;
    v->resize(static_cast<size_t>(n));
    return Status::Ok();
  }
  // Everything decoded, nothing left over.
  Status EndArgs() { return in_.Finish(); }
  // Arguments that contradict each other (an array shorter than its count...).
  Status Malformed(const char* what) const { return Status(Err::kInvalidValue, std::string("malformed request: ") + what); }
  // Makes `gpu` the one the call runs on (argument hooks that name a device).
  Status ChooseGpu(int gpu);
  // A GPU is current: the one an argument chose, else the calling thread's device.
  Status Ready();

  // Before a call that creates a handle of `kind`: the session's limit for that kind
  // (worker/session/limits.h) leaves room for one more, else kMemoryAllocation naming the limit.
  Status HandleRoom(HandleKind kind);
  // A handle the library created or returned: registered in the session (teardown releases
  // it), the same handle each time for an object already known. A graph or node is taken to
  // belong to the graph the call's arguments named last (graph(), below).
  uint64_t AdoptHandle(HandleKind kind, void* handle);
  // The session handle of the graph the arguments named last (a graph, or a node's graph),
  // or 0.
  uint64_t graph() const { return graph_; }
  // Makes `graph` the one later outputs belong to (after decoding another graph argument).
  void SetGraph(uint64_t graph) { graph_ = graph; }
  // The client thread that made the call.
  uint64_t thread() const { return req_.getThread(); }
  // Whether the client waits for this call's status (a posted call's failure is kept for
  // later: the session's next synchronising call, or a library hook's own rule).
  bool answered() const { return answered_; }
  void set_answered(bool answered) { answered_ = answered; }
  // The request this call came in (an operation that runs calls nested in it: NCCL's groups).
  wire::Request::Reader request() const { return req_; }
  // A sync call the operation answers itself, later (a pending operation posts the reply to
  // tag()): the dispatch posts nothing when it succeeds.
  void AnswerLater() { later_ = true; }
  bool answers_later() const { return later_; }
  uint64_t tag() const { return tag_; }
  void set_tag(uint64_t tag) { tag_ = tag; }

  // ---- math-library objects (lib_objects.h; roles handle(K), newhandle(K), scalar, ...) ----
  // A live object of `kind` (id 0 only if nullable), as the library's handle; its GPU is the
  // call's unless an earlier argument chose one.
  template <typename T>
  Status Object(HandleKind kind, bool nullable, T* handle, LibObject** object) {
    uint64_t id = in_.Get<uint64_t>();
    if (!in_.ok()) return in_.Finish();
    *handle = T{};
    *object = nullptr;
    if (id == 0) {
      if (nullable) return Status::Ok();
      return Error(Err::kInvalidResourceHandle, "a NULL {}", HandleKindName(kind));
    }
    ASSIGN_OR_RETURN(LibObject * o, ex_.session().lib_objects().Get(id, kind));
    if (gpu_ < 0) RETURN_IF_ERROR(ChooseGpu(o->gpu));
    *handle = o->As<T>();
    *object = o;
    return Status::Ok();
  }
  // The id a client minted for an object this call creates is well formed and unused, and
  // the session has room for one more (library-objects, worker/session/limits.h): else the library's
  // own out-of-memory status (the generated code maps kMemoryAllocation to it).
  Status CheckNewObject(HandleKind kind, uint64_t id) {
    LibObjects& objects = ex_.session().lib_objects();
    RETURN_IF_ERROR(objects.CheckNew(id, kind));
    return ex_.resources().Room(Resource::kLibObjects, objects.size());
  }
  // Registers what the library created under the client's id, on the call's GPU.
  template <typename T>
  LibObject* AdoptObject(HandleKind kind, uint64_t id, T handle) {
    return ex_.session().lib_objects().Add(id, kind, domain_, LibObject::ToBits(handle), gpu_ < 0 ? 0 : gpu_);
  }
  LibObject* FindObject(uint64_t id) { return ex_.session().lib_objects().Find(id); }
  // The object was ended by its library: forget it, free the workspace the worker gave it and
  // return what was charged for it.
  void ForgetObject(LibObject* object);
  // Ends an object through its library's destroy call, then forgets it (a create whose
  // charges the quota refused).
  void DestroyObject(LibObject* object);
  // A scalar's on-device flag must agree with the pointer mode the worker mirrors for the
  // object (bit `bit`): a host value is never read as a device address, nor the reverse.
  Status ScalarMode(const LibObject* object, int bit, bool on_device, const char* what) const;
  // Host scalars are read from a worker buffer of at least 32 bytes (zeros past what the
  // client sent), so a library reading its scalar type never reads past it.
  static void PadScalar(std::vector<std::byte>* v) {
    if (v->size() < 32) v->resize(32);
  }
  // A device array of `count` device pointers, each to `bytes`: the array checked, then read
  // in the stream order of `owner` (its mirrored stream; waits for that stream) and every
  // pointer checked against the session's allocations.
  Status DevPtrArray(uint64_t addr, uint64_t count, uint64_t bytes, const LibObject* owner, uint64_t* checked);
  // The same with an extent per element (`bytes_of(i)`: a grouped batch's groups differ).
  Status DevPtrArrayOf(uint64_t addr, uint64_t count, const LibObject* owner, const std::function<uint64_t(uint64_t)>& bytes_of);
  // Keeps `addr`+`bytes` with `object` under `slot` (replacing what that slot held; addr 0
  // forgets it), after a call that succeeded (role keep=).
  void KeepRange(LibObject* object, const char* slot, uint64_t addr, uint64_t bytes);
  // Every range kept with `object` is still device memory of this session, else the library's
  // invalid status naming `what` (a freed descriptor array, a buffer freed between phases).
  Status RecheckObject(const LibObject* object, const char* what);
  // The host workspace of `bytes` the worker passes for `owner`'s call (role hostwork): kept
  // with the object, grown as needed, at most kMaxHostWork; nullptr for 0 bytes.
  static constexpr uint64_t kMaxHostWork = 256ull << 20;
  Result<void*> HostWork(LibObject* owner, uint64_t bytes);
  // Device memory a library call allocates internally: the process's usage on the call's GPU
  // before the call (a sentinel where it cannot be measured), and after it the growth
  // charged to `object` (or, with none, to the session). When the quota refuses it, a
  // created object is destroyed; either way the call fails with `nomem` of `domain`.
  uint64_t MeasureBegin();
  Status MeasureEnd(uint64_t before, LibObject* object, Domain domain, bool created, uint32_t nomem);
  // A failed library call, as a status of the library's domain.
  Status LibraryError(Domain domain, uint32_t code, const char* name, const char* call);

  // The stream a `launches` call's GPU work goes to, when no stream argument says it (a
  // library handle's stream): the compute scheduler measures the work there.
  void LaunchesOn(const Executor::Stream& s) { launch_stream_ = s; has_launch_stream_ = true; }
  // Where the work of a `launches` call went: the stream named by LaunchesOn, else its first
  // stream argument, else the legacy stream of the GPU it ran on.
  Executor::Stream launch_stream() const;

  Executor& executor() { return ex_; }
  // The GPU the call runs on (once Ready or an argument chose it).
  int gpu() const { return gpu_; }
  // What a wait call waits for: the streams and events its arguments named (at most two of
  // each are kept; kept inline so a call allocates nothing for them).
  std::vector<Executor::Stream> wait_streams() const { return {streams_, streams_ + num_streams_}; }
  bool has_wait_event() const { return num_events_ > 0; }
  std::pair<int, void*> wait_event() const { return events_[0]; }
  // A value one argument hook leaves for a later one of the same call.
  void set_note(int64_t v) { note_ = v; }
  int64_t note() const { return note_; }
  // Runs `f(ok)` once the call is over (ok: the library accepted it): a hook's charge that
  // must be undone if the library refuses the call.
  void OnSettle(std::function<void(bool)> f) { settle_ = std::move(f); }
  void Settle(bool ok) {
    if (settle_) std::exchange(settle_, nullptr)(ok);
  }

 private:
  Executor& ex_;
  wire::Request::Reader req_;
  api::ArgReader in_;
  api::ArgWriter out_;
  uint64_t out_capacity_ = 0;  // bytes of the output arrays decoded so far (OutArray)
  uint64_t buffer_bytes_ = 0;  // bytes of the argument buffers decoded so far (Buffer)
  void* library_;
  Domain domain_;
  int gpu_ = -1;  // the GPU an argument chose
  uint64_t graph_ = 0;
  uint64_t handle_id_ = 0;  // handle_id()
  int64_t note_ = 0;
  bool answered_ = true;
  uint64_t tag_ = 0;
  bool later_ = false;
  std::function<void(bool)> settle_;
  Executor::Stream streams_[2];
  int num_streams_ = 0;
  std::pair<int, void*> events_[2];
  int num_events_ = 0;
  Executor::Stream launch_stream_;
  bool has_launch_stream_ = false;
};

struct OpEntry {
  uint32_t number;
  const char* name;
  CallClass cls;
  Status (*run)(OpContext&);
  // Issues GPU work on its stream (a launch, a library call that launches kernels): admitted
  // by the compute scheduler (worker/loop/compute_hook.h). The description's `launches` attribute.
  bool launches;
};

// A library's generated operations, sorted by number.
struct OpTable {
  uint16_t library;
  const char* name;
  Domain domain;
  const OpEntry* ops;
  size_t count;
  // Ends an object of one of the library's kinds (the session's end), or nullptr.
  Status (*destroy)(void* api, HandleKind kind, uint64_t bits) = nullptr;
  const OpEntry* Find(uint32_t number) const;
};

// Serves one apiCall request: finds the operation, runs it and answers as its class says.
Status DispatchApiCall(Executor& ex, const InFrame& frame, wire::Request::Reader req);

}  // namespace remora::worker

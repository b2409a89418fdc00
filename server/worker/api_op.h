// The worker's end of generated calls (wire::ApiCall): the context a generated operation
// (build/generated/api/<lib>_dispatch.cc) decodes its arguments through, and the dispatch
// of an apiCall request to the operation of its library and number. Each argument is
// checked against the session's own tables before the library sees it; a call's class
// decides whether and when it is answered. Used by the executor's single thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "remora.capnp.h"
#include "remora/memmgr/handle_table.h"
#include "remora/protocol/api_args.h"
#include "remora/protocol/frame.h"
#include "worker/executor.h"

namespace remora::worker {

using api::CallClass;

class OpContext {
 public:
  OpContext(Executor& ex, wire::Request::Reader req, api::ArgReader in, void* library);

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
  // The application's device ordinal, as the server's device.
  Status Device(int* device);
  // An address that must lie, with `bytes` after it, in one allocation of this session.
  Status DevPtr(uint64_t addr, uint64_t bytes, uint64_t* checked);
  // The capacity of an output array (bounded), as a vector of that size.
  template <typename T>
  Status OutArray(std::vector<T>* v) {
    uint64_t n = in_.Get<uint64_t>();
    if (n > api::kMaxArgBytes / sizeof(T)) return Error(Err::kInvalidValue, "malformed request: an output of {} elements is too large", n);
    v->resize(static_cast<size_t>(n));
    return Status::Ok();
  }
  // A buffer of `n` bytes for an argument whose size an expression gives (bounded).
  Status Buffer(std::vector<std::byte>* v, uint64_t n) {
    if (n > api::kMaxArgBytes) return Malformed("an argument buffer is too large");
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

  // A handle the library created: registered in the session (teardown releases it).
  uint64_t AdoptHandle(HandleKind kind, void* handle);
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

 private:
  Executor& ex_;
  wire::Request::Reader req_;
  api::ArgReader in_;
  api::ArgWriter out_;
  void* library_;
  int gpu_ = -1;  // the GPU an argument chose
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
  // by the compute scheduler (worker/compute_hook.h). The description's `launches` attribute.
  bool launches;
};

// A library's generated operations, sorted by number.
struct OpTable {
  uint16_t library;
  const char* name;
  Domain domain;
  const OpEntry* ops;
  size_t count;
  const OpEntry* Find(uint32_t number) const;
};

// Serves one apiCall request: finds the operation, runs it and answers as its class says.
Status DispatchApiCall(Executor& ex, const InFrame& frame, wire::Request::Reader req);

}  // namespace remora::worker

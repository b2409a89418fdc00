// CallProfile: where a session's worker spends its time, per generated API function (the
// driver and math-library calls of DispatchApiCall): calls, total and longest time of the
// synchronous part (the handler; work it queues on a stream is not included). A diagnostic,
// off unless the worker's environment has REMORA_WORKER_PROFILE=DIRECTORY (the supervisor
// passes it on; docs/OPERATIONS.md): then at the session's end the worker writes
// DIRECTORY/worker-profile-<session>.jsonl, one line per function, longest total first.
// Executor thread only.
#pragma once

#include <cstdint>
#include <string>

namespace remora::worker {

class CallProfile {
 public:
  // The process's profile, or nullptr when profiling is off (decided once, from the environment).
  static CallProfile* Get();

  // One call of `name` (a generated operation's name: a string that lives for the process).
  void Add(const char* name, uint64_t nanos);
  // Writes the profile of session `session` (the file name says whose); logs a failure.
  void Write(uint64_t session) const;

 private:
  explicit CallProfile(std::string dir) : dir_(std::move(dir)) {}
  struct Entry {
    const char* name = nullptr;
    uint64_t calls = 0, total_ns = 0, max_ns = 0;
  };
  std::string dir_;
  Entry entries_[4096];  // open addressing on the name's address; a full table stops counting
  uint64_t dropped_ = 0;
};

}  // namespace remora::worker

// The error log of CUDA's "error log management" (cuLogs*/cudaLogs*, CUDA 12.9): every
// error an API call of this process returns, as one line
// "[HH:MM:SS.mmm][TID][CUDA][E][call] reason" - the reason Remora knows (the worker's driver
// message, the argument check that failed) - kept in a buffer of the last 25,600 bytes, given
// to registered callbacks as it happens, and written to CUDA_LOG_FILE (stdout, stderr or a
// path) when that is set at start, as the driver does.
//
// Iterators are sequence numbers of lines: Current() is the next line's. Thread-safe;
// callbacks run on the thread whose call failed, outside the log's lock, and must not make
// CUDA calls (as CUDA requires).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <list>
#include <mutex>
#include <string>

#include "remora/base/status.h"

namespace remora::shim {

class ErrorLog {
 public:
  static constexpr size_t kCapacity = 25600;  // bytes of lines kept, as the driver

  ErrorLog();
  ErrorLog(const ErrorLog&) = delete;
  ErrorLog& operator=(const ErrorLog&) = delete;

  // Records that `call` failed for `reason`.
  void Record(const char* call, const std::string& reason);

  CUlogIterator Current();
  // cuLogsDumpToMemory: lines from *iterator (all kept when NULL) into buffer, newline after
  // each, NUL-terminated; *size in: the buffer's bytes, out: the bytes written (without the
  // NUL). Lines overwritten since *iterator are announced by a line saying how many.
  Status DumpToMemory(CUlogIterator* iterator, char* buffer, size_t* size);
  // cuLogsDumpToFile: the same lines appended to the file.
  Status DumpToFile(CUlogIterator* iterator, const char* path);

  Status Register(CUlogsCallback fn, void* user, CUlogsCallbackHandle* handle);
  Status Unregister(CUlogsCallbackHandle handle);

 private:
  // The lines from `from` (clamped to what is kept), with a truncation notice first.
  std::string LinesFrom(CUlogIterator from, CUlogIterator* next);

  struct Callback {
    CUlogsCallback fn;
    void* user;
  };
  std::mutex mu_;
  std::deque<std::string> lines_;  // lines_[0] has sequence number first_
  uint64_t first_ = 0;
  size_t bytes_ = 0;
  std::list<Callback> callbacks_;  // a handle is the address of its element
  FILE* file_ = nullptr;           // CUDA_LOG_FILE, if set
};

}  // namespace remora::shim

#include "error_log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <fmt/format.h>

namespace remora::shim {

ErrorLog::ErrorLog() {
  const char* dest = std::getenv("CUDA_LOG_FILE");
  if (dest == nullptr || *dest == '\0') return;
  if (std::strcmp(dest, "stdout") == 0) file_ = stdout;
  else if (std::strcmp(dest, "stderr") == 0) file_ = stderr;
  else file_ = std::fopen(dest, "a");  // never closed: errors may come until the process ends
}

void ErrorLog::Record(const char* call, const std::string& reason) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::string line = fmt::format("[{:02}:{:02}:{:02}.{:03}][{}][CUDA][E][{}] {}", tm.tm_hour, tm.tm_min, tm.tm_sec, ms,
                                 static_cast<long>(::syscall(SYS_gettid)), call, reason);
  std::vector<Callback> calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_ += line.size() + 1;
    lines_.push_back(line);
    while (bytes_ > kCapacity && lines_.size() > 1) {
      bytes_ -= lines_.front().size() + 1;
      lines_.pop_front();
      first_++;
    }
    calls.assign(callbacks_.begin(), callbacks_.end());
    if (file_ != nullptr) {
      std::fprintf(file_, "%s\n", line.c_str());
      std::fflush(file_);
    }
  }
  for (const Callback& c : calls) c.fn(c.user, CU_LOG_LEVEL_ERROR, line.data(), line.size());
}

CUlogIterator ErrorLog::Current() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<CUlogIterator>(first_ + lines_.size());
}

std::string ErrorLog::LinesFrom(CUlogIterator from, CUlogIterator* next) {
  // Iterators are 32-bit: compared as distances behind the newest line.
  uint64_t end = first_ + lines_.size();
  uint32_t behind = static_cast<uint32_t>(static_cast<uint32_t>(end) - from);
  std::string out;
  size_t skip = 0;
  if (behind > lines_.size()) {
    if (behind <= end) out = fmt::format("[CUDA][W] {} log line(s) were overwritten before they were read\n", behind - lines_.size());
  } else {
    skip = lines_.size() - behind;
  }
  for (size_t i = skip; i < lines_.size(); i++) out += lines_[i] + "\n";
  *next = static_cast<CUlogIterator>(end);
  return out;
}

Status ErrorLog::DumpToMemory(CUlogIterator* iterator, char* buffer, size_t* size) {
  if (buffer == nullptr || size == nullptr) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "buffer and size cannot be NULL");
  std::lock_guard<std::mutex> lock(mu_);
  CUlogIterator next = 0;
  std::string text = LinesFrom(iterator != nullptr ? *iterator : static_cast<CUlogIterator>(first_), &next);
  if (text.empty()) {
    if (*size > 0) buffer[0] = '\0';
    *size = 0;
    return Status::Ok();
  }
  if (*size == 0) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "the buffer holds no message");
  // Whole lines only, from the oldest, as many as fit with the NUL.
  size_t n = 0;
  for (size_t nl; (nl = text.find('\n', n)) != std::string::npos && nl + 1 < *size;) n = nl + 1;
  if (n == 0) {
    *size = 0;
    return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "the buffer is too small for the first message");
  }
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
  *size = n;
  if (iterator != nullptr) {
    // Past the lines written: the next dump starts at the first that did not fit.
    uint32_t unread = static_cast<uint32_t>(std::count(text.begin() + static_cast<long>(n), text.end(), '\n'));
    *iterator = next - unread;
  }
  return Status::Ok();
}

Status ErrorLog::DumpToFile(CUlogIterator* iterator, const char* path) {
  if (path == nullptr) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "pathToFile cannot be NULL");
  std::string text;
  CUlogIterator next = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    text = LinesFrom(iterator != nullptr ? *iterator : static_cast<CUlogIterator>(first_), &next);
  }
  FILE* f = std::fopen(path, "a");
  if (f == nullptr) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return Status(Domain::kCuda, CUDA_ERROR_UNKNOWN, fmt::format("cannot write {}", path));
  if (iterator != nullptr) *iterator = next;
  return Status::Ok();
}

Status ErrorLog::Register(CUlogsCallback fn, void* user, CUlogsCallbackHandle* handle) {
  if (fn == nullptr || handle == nullptr) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "callbackFunc and callback_out cannot be NULL");
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.push_back(Callback{fn, user});
  *handle = reinterpret_cast<CUlogsCallbackHandle>(&callbacks_.back());
  return Status::Ok();
}

Status ErrorLog::Unregister(CUlogsCallbackHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = callbacks_.begin(); it != callbacks_.end(); ++it)
    if (reinterpret_cast<CUlogsCallbackHandle>(&*it) == handle) {
      callbacks_.erase(it);
      return Status::Ok();
    }
  return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "not a registered log callback");
}

}  // namespace remora::shim

// Census: with REMORA_CALL_STATS=1, the client counts what it sends - round trips (calls
// that wait for their reply) and posted calls - per request kind and, for generated calls,
// per API function, and prints the table to stderr when the session ends. The tool for
// finding which call an application makes synchronously per operation (what makes a
// remoted op slower than a native one). Off: one relaxed load per send. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "remora.capnp.h"

namespace remora::shim {

class Census {
 public:
  // Enabled by REMORA_CALL_STATS=1 in the environment.
  static bool Wanted();
  void Count(const wire::Request::Reader& req, bool round_trip);
  // Prints the table (most frequent first) to stderr.
  void Print() const;

 private:
  struct Key {
    uint16_t which, library;
    uint32_t function;
    bool round_trip;
    auto operator<=>(const Key&) const = default;
  };
  mutable std::mutex mu_;
  std::map<Key, uint64_t> counts_;
};

}  // namespace remora::shim

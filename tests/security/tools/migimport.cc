// security_migimport: the review's N5 attack (issue 40) as a command, for the GPU host
// (tests/gpu/migimport-gpu.sh): a fresh session sends one migrateImport of COUNT allocations
// of SIZE bytes, STRIDE bytes apart from BASE on device 0 - no migration ordered - then holds
// the session HOLD seconds (so that nvidia-smi can see what it holds) and reports.
//   security_migimport URL TOKEN COUNT STRIDE SIZE [BASE [HOLD]]
// Output: "import: COUNT x SIZE B, stride STRIDE: error E (message)" then "held"; exit 0 if
// the server answered (whatever it answered), 1 otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "raw_client.h"

int main(int argc, char** argv) {
  using namespace remora;
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s URL TOKEN COUNT STRIDE SIZE [BASE [HOLD_S]]\n", argv[0]);
    return 2;
  }
  const std::string url = argv[1], token = argv[2];
  const uint64_t count = std::strtoull(argv[3], nullptr, 0), stride = std::strtoull(argv[4], nullptr, 0);
  const uint64_t size = std::strtoull(argv[5], nullptr, 0);
  const uint64_t base = argc > 6 ? std::strtoull(argv[6], nullptr, 0) : 0x100000000000ull;
  const int hold = argc > 7 ? std::atoi(argv[7]) : 5;
  auto s = security::RawSession::Open(url, token);
  if (!s.ok()) {
    std::printf("cannot connect: %s\n", s.status().ToString().c_str());
    return 1;
  }
  Result<security::RawReply> r = Error(Err::kUnknown, "nothing sent");
  if (count > 0) {
    r = (*s)->Call([&](wire::Request::Builder& q) {
      auto al = q.initMigrateImport().initAllocations(static_cast<unsigned>(count));
      for (unsigned i = 0; i < count; i++) {
        al[i].setPtr(base + i * stride);
        al[i].setSize(size);
        al[i].setOrdinal(0);
      }
    }, {}, 0, 120000);
    if (!r.ok()) {
      std::printf("no answer: %s\n", r.status().ToString().c_str());
      return 1;
    }
    std::printf("import: %llu x %llu B, stride 0x%llx from 0x%llx: error %d (%s)\n",
                static_cast<unsigned long long>(count), static_cast<unsigned long long>(size),
                static_cast<unsigned long long>(stride), static_cast<unsigned long long>(base),
                static_cast<int>(r->error), r->message.c_str());
  } else {
    auto ping = (*s)->Call([](wire::Request::Builder& q) { q.setPing(); });
    std::printf("session only: %s\n", ping.ok() ? "answered" : ping.status().ToString().c_str());
  }
  std::printf("held\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(hold));
  return 0;
}

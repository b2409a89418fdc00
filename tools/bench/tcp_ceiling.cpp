#include "tcp_ceiling.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "loopback.hpp"

namespace remora::bench {

std::vector<CeilingPoint> measure_tcp_ceiling(const std::vector<int>& streams, uint64_t bytes, int reps) {
  std::vector<CeilingPoint> out;
  std::vector<char> src(bytes, 'r'), dst(bytes);
  for (int n : streams) {
    CeilingPoint p;
    p.streams = n;
    std::vector<Socket> tx, rx;
    if (!connect_pairs(n, &tx, &rx, &p.error)) {
      out.push_back(p);
      continue;
    }
    uint64_t part = (bytes + n - 1) / n;
    double best = 0;
    for (int r = 0; r < reps + 1; r++) {  // the first round warms up the connections
      bool ok = true;
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> threads;
      std::vector<char> good(2 * n, 1);
      for (int i = 0; i < n; i++) {
        uint64_t off = part * i, len = off >= bytes ? 0 : std::min(part, bytes - off);
        threads.emplace_back([&, i, off, len] { good[2 * i] = write_all(tx[i].fd, src.data() + off, len); });
        threads.emplace_back([&, i, off, len] { good[2 * i + 1] = read_all(rx[i].fd, dst.data() + off, len); });
      }
      for (auto& t : threads) t.join();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (char g : good) ok = ok && g;
      if (!ok) {
        p.error = "a loopback transfer failed";
        break;
      }
      if (r > 0) best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    }
    if (p.error.empty()) p.gb_per_s = best;
    out.push_back(p);
  }
  return out;
}

}  // namespace remora::bench

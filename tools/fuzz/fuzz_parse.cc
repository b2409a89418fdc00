// Fuzz target `parse`: the text a person or a peer hands to Remora - sizes (ParseSize: CLI
// flags, remorafs memory.max, REMORA_RDMA_* variables), server URLs (ParseEndpoint: --listen,
// REMORA_SERVER, --admin-listen) and tokens (ParseToken: REMORA_TOKEN, token files).
//
// Input: one selector byte (which parser), then the text. Besides "never crashes", each parser
// is held to what it promises:
//  - ParseSize: a plain decimal integer that fits 64 bits parses to exactly that number; a
//    result is never below the integer part times the unit; formatting then parsing is close.
//  - ParseEndpoint: an accepted URL survives ToUrl() and parses back to the same endpoint.
//  - ParseToken: an accepted token formats back to the same text.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "remora/base/util.h"
#include "remora/protocol/auth.h"
#include "remora/protocol/transport.h"

namespace remora::fuzz {
namespace {

void CheckSize(const std::string& text) {
  auto r = ParseSize(text);
  if (!r.ok()) return;
  // All digits (after the trimming ParseSize does): the value must be exact.
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.erase(t.begin());
  bool digits = !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
  if (digits && r->has_value()) {
    unsigned __int128 v = 0;
    for (char c : t) {
      v = v * 10 + static_cast<unsigned>(c - '0');
      if (v > UINT64_MAX) break;
    }
    if (v <= UINT64_MAX && **r != static_cast<uint64_t>(v))
      Finding("ParseSize changed an integer", t + " -> " + std::to_string(**r));
    if (v > UINT64_MAX) Finding("ParseSize accepted an integer past 2^64", t + " -> " + std::to_string(**r));
  }
  if (r->has_value()) {
    // FormatSize rounds to one decimal; parsing it back lands within 5% (or exactly, in bytes).
    uint64_t x = **r;
    auto back = ParseSize(FormatSize(x));
    // FormatSize rounds: within 0.05% of 2^64 what it prints no longer fits 64 bits.
    if (!back.ok() && x > UINT64_MAX - (UINT64_MAX >> 11)) return;
    if (!back.ok() || !back->has_value()) Finding("ParseSize rejects FormatSize's output", FormatSize(x));
    long double a = static_cast<long double>(x), b = static_cast<long double>(**back);
    if (b < a * 0.95L || b > a * 1.05L) Finding("FormatSize/ParseSize round trip drifted", FormatSize(x));
  }
}

void CheckEndpoint(const std::string& text) {
  auto ep = ParseEndpoint(text);
  if (!ep.ok()) return;
  std::string url = ep->ToUrl();
  auto back = ParseEndpoint(url);
  if (!back.ok()) Finding("ParseEndpoint rejects its own ToUrl()", text + " -> " + url + ": " + back.status().ToString());
  if (back->kind != ep->kind || back->path != ep->path || back->host != ep->host || back->port != ep->port)
    Finding("ParseEndpoint(ToUrl()) differs", text + " -> " + url);
}

void CheckToken(const std::string& text) {
  auto t = ParseToken(text);
  if (!t.ok()) return;
  std::string again = FormatToken(*t);
  auto back = ParseToken(again);
  if (!back.ok() || back->tenant != t->tenant || back->secret != t->secret)
    Finding("ParseToken(FormatToken()) differs", text + " -> " + again);
}

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    auto add = [&](const std::string& name, uint8_t which, const std::string& text) {
      SeedWriter w;
      w.Put(which).Bytes(text.data(), text.size());
      s.emplace_back(name, w.bytes());
    };
    add("size-plain", 0, "4096");
    add("size-gib", 0, "8GiB");
    add("size-fraction", 0, "1.5G");
    add("size-max", 0, "max");
    add("size-spaces", 0, " 64 kib\n");
    add("size-huge", 0, "18446744073709551615");
    add("url-shm", 1, "shm:///run/remora/remora.sock");
    add("url-tcp", 1, "tcp://10.0.0.2:7070");
    add("url-v6", 1, "rdma://[fe80::1:2]:18515");
    add("token", 2, "remora1.alice.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  remora::fuzz::FuzzInput in(data, size);
  uint8_t which = in.Byte();
  auto rest = in.Rest();
  std::string text(reinterpret_cast<const char*>(rest.data()), rest.size());
  switch (which % 3) {
    case 0: remora::fuzz::CheckSize(text); break;
    case 1: remora::fuzz::CheckEndpoint(text); break;
    default: remora::fuzz::CheckToken(text); break;
  }
  return 0;
}

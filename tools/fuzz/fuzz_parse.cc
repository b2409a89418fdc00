// Fuzz target `parse`: the text a person or a peer hands to Remora - sizes (ParseSize: CLI
// flags, remorafs memory.max, REMORA_RDMA_* variables), server URLs (ParseEndpoint: --listen,
// REMORA_SERVER, --admin-listen), tokens (ParseToken: REMORA_TOKEN, token files) - and the
// flat argument encoding of generated calls (api::ArgReader, which decodes a server's results
// in the shim and a client's arguments in the worker).
//
// Input: one selector byte (which parser), then the text (for ArgReader: one byte saying how
// many of the next bytes are the script of reads, the script, then the encoding). Besides "never crashes", each parser
// is held to what it promises:
//  - ParseSize: a plain decimal integer that fits 64 bits parses to exactly that number; a
//    result is never below the integer part times the unit; formatting then parsing is close.
//  - ParseEndpoint: an accepted URL survives ToUrl() and parses back to the same endpoint.
//  - ParseToken: an accepted token formats back to the same text.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "remora/base/util.h"
#include "remora/protocol/api_args.h"
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

// The flat argument encoding of generated calls (api_args.h), as the shim reads a reply's
// results: a script of typed reads over the rest of the input. ArgReader must never read past
// its input, nor hand out more elements than it announced or the caller has room for.
void CheckApiArgs(const std::string& text) {
  if (text.size() < 2) return;
  size_t split = static_cast<uint8_t>(text[0]) % text.size();
  std::string ops = text.substr(1, split), data = text.substr(1 + split);
  api::ArgReader r(data.data(), data.size());
  for (char op : ops) {
    switch (static_cast<uint8_t>(op) % 7) {
      case 0: (void)r.Get<uint8_t>(); break;
      case 1: (void)r.Get<uint64_t>(); break;
      case 2: {
        char out[16];
        (void)r.GetOptional(out, sizeof(out));
        break;
      }
      case 3: {
        std::vector<uint32_t> v;
        if (r.GetArray(&v).ok() && v.size() * sizeof(uint32_t) > data.size()) Finding("an array longer than its input");
        break;
      }
      case 4: {
        std::string str;
        if (r.GetString(&str).ok() && str.size() > data.size()) Finding("a string longer than its input");
        break;
      }
      case 5: {
        uint16_t out[4];
        r.GetArray(out, 4, sizeof(uint16_t));  // ASan: never more than 4 written
        break;
      }
      case 6: {
        char out[8];
        r.GetString(out, sizeof(out));
        break;
      }
    }
  }
  (void)r.Finish();
  if (r.ok() && r.remaining() > data.size()) Finding("ArgReader's position went past its end");
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
    {
      api::ArgWriter w;
      w.Put<uint64_t>(7);
      uint32_t arr[3] = {1, 2, 3};
      w.PutArray(arr, 3, sizeof(uint32_t));
      w.PutString("name");
      w.PutOptional(nullptr, 0);
      std::string ops = std::string("\x01\x03\x04\x02", 4);
      std::string text = std::string(1, static_cast<char>(ops.size())) + ops +
                         std::string(reinterpret_cast<const char*>(w.bytes().data()), w.bytes().size());
      add("api-args", 3, text);
    }
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
  switch (which % 4) {
    case 0: remora::fuzz::CheckSize(text); break;
    case 1: remora::fuzz::CheckEndpoint(text); break;
    case 2: remora::fuzz::CheckToken(text); break;
    default: remora::fuzz::CheckApiArgs(text); break;
  }
  return 0;
}

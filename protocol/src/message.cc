#include "remora/protocol/message.h"

#include <cstring>

namespace remora {
namespace {

constexpr size_t kScratchWords = 4096;  // 32 KiB: every data-path message fits

struct ThreadScratch {
  alignas(64) uint64_t words[kScratchWords + 1] = {};
  bool in_use = false;
};

ThreadScratch& LocalScratch() {
  thread_local ThreadScratch s;
  return s;
}

}  // namespace

ScratchMessage::ScratchMessage() {
  ThreadScratch& s = LocalScratch();
  if (!s.in_use) {
    s.in_use = true;
    owns_thread_scratch_ = true;
    scratch_ = s.words;
    // MallocMessageBuilder zeroes a caller-supplied first segment again on destruction.
    builder_.emplace(kj::arrayPtr(reinterpret_cast<capnp::word*>(scratch_ + 1), kScratchWords));
  } else {
    builder_.emplace();
  }
}

ScratchMessage::~ScratchMessage() {
  builder_.reset();
  if (owns_thread_scratch_) {
    scratch_[0] = 0;
    LocalScratch().in_use = false;
  }
}

std::span<const uint64_t> ScratchMessage::Flatten() {
  auto segments = builder_->getSegmentsForOutput();
  if (owns_thread_scratch_ && segments.size() == 1 &&
      segments[0].begin() == reinterpret_cast<const capnp::word*>(scratch_ + 1)) {
    uint32_t table[2] = {0, static_cast<uint32_t>(segments[0].size())};
    std::memcpy(scratch_, table, sizeof(table));
    return {scratch_, segments[0].size() + 1};
  }
  // General case: segment table (count-1, sizes..., padding) then the segments.
  size_t table_words = (segments.size() + 2) / 2;
  size_t total = table_words;
  for (auto& seg : segments) total += seg.size();
  flat_.assign(total, 0);
  auto* table = reinterpret_cast<uint32_t*>(flat_.data());
  table[0] = static_cast<uint32_t>(segments.size() - 1);
  for (size_t i = 0; i < segments.size(); i++) table[i + 1] = static_cast<uint32_t>(segments[i].size());
  uint64_t* out = flat_.data() + table_words;
  for (auto& seg : segments) {
    std::memcpy(out, seg.begin(), seg.size() * sizeof(capnp::word));
    out += seg.size();
  }
  return {flat_.data(), flat_.size()};
}

BodyReader::BodyReader(std::span<const uint64_t> body)
    : reader_(kj::arrayPtr(reinterpret_cast<const capnp::word*>(body.data()), body.size()),
              capnp::ReaderOptions{/*traversalLimitInWords=*/1u << 22, /*nestingLimit=*/32}) {}

}  // namespace remora

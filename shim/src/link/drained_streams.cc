#include "drained_streams.h"

#include <algorithm>

namespace remora::shim {

void DrainedStreams::Put(const Note& n) {
  for (Note& o : notes_) {
    if (o.key == n.key) {
      o = n;
      return;
    }
  }
  notes_[next_] = n;
  next_ = (next_ + 1) % notes_.size();
}

DrainedStreams::Note* DrainedStreams::FindTag(uint64_t tag) {
  if (tag == 0) return nullptr;
  auto it = std::find_if(notes_.begin(), notes_.end(), [&](const Note& n) { return n.tag == tag; });
  return it == notes_.end() ? nullptr : &*it;
}

void DrainedStreams::Drained(const StreamKey& key, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  Put(Note{key, seq, 0, true});
}

void DrainedStreams::Pending(const StreamKey& key, uint64_t tag) {
  std::lock_guard<std::mutex> lock(mu_);
  Put(Note{key, 0, tag, false});
}

void DrainedStreams::Sent(uint64_t tag, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Note* n = FindTag(tag)) n->seq = seq;
}

void DrainedStreams::Answered(uint64_t tag, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  Note* n = FindTag(tag);
  if (n == nullptr) return;  // replaced meanwhile
  if (ok) n->answered = true;
  else *n = Note{};
}

bool DrainedStreams::Awaiting(uint64_t tag) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(notes_.begin(), notes_.end(), [&](const Note& n) { return n.tag == tag && !n.answered; });
}

DrainedStreams::Look DrainedStreams::Find(const StreamKey& key, uint64_t current) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(notes_.begin(), notes_.end(), [&](const Note& n) { return n.key == key && n.key.handle != 0; });
  if (it == notes_.end() || it->seq != current) return {};
  if (!it->answered) return {State::kAwaiting, it->tag};
  return {State::kIdle, 0};
}

}  // namespace remora::shim

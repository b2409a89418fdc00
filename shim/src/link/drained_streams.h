// DrainedStreams: the client's notes of which streams have nothing left to run (issue 45: a
// stream synchronisation or query answered in the client, with no round trip).
//
// A stream is drained when a call that went through it completed: a waited-for copy into
// host memory, a synchronisation or query (Drained), or a posted copy into host memory once
// its reply arrived (Pending, Sent, Answered: PyTorch's .item() over a transport that cannot
// share memory, an asynchronous copy into pinned memory and then cudaStreamSynchronize).
// A note holds the work sequence (Client::work_sequence) right after the draining call went
// out; it says "idle" only while the sequence is still there, i.e. nothing that may leave work
// queued was sent since and the server said nothing. Keeps the last few streams' notes.
//
// Thread-safe (one lock); never blocks.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "stream_key.h"

namespace remora::shim {

class DrainedStreams {
 public:
  enum class State {
    kBusy,      // no note at the current sequence: the server must be asked
    kIdle,      // drained, nothing sent since
    kAwaiting,  // a posted copy will drain it, nothing sent since: idle once its reply is in
  };
  struct Look {
    State state = State::kBusy;
    uint64_t tag = 0;  // kAwaiting: the copy's request tag
  };

  // A waited-for call on `key` that went out at sequence `seq` completed.
  void Drained(const StreamKey& key, uint64_t seq);
  // Before it is sent: the posted request `tag` will drain `key` when its reply arrives.
  void Pending(const StreamKey& key, uint64_t tag);
  // Request `tag` went out, the sequence right after it being `seq` (Client::Send).
  void Sent(uint64_t tag, uint64_t seq);
  // Request `tag`'s reply was handled (its bulk is in place): drained if it succeeded;
  // a failure forgets the note (the synchronisation is sent and reports it).
  void Answered(uint64_t tag, bool ok);
  // Whether request `tag` is still awaited by a note.
  bool Awaiting(uint64_t tag) const;
  // What a synchronisation of `key` at work sequence `current` would find.
  Look Find(const StreamKey& key, uint64_t current) const;

 private:
  struct Note {
    StreamKey key;      // handle 0 (names no stream): an empty slot
    uint64_t seq = 0;   // 0 (sequences start at 1): not sent yet
    uint64_t tag = 0;   // a posted copy's request, else 0
    bool answered = true;
  };
  Note* FindTag(uint64_t tag);
  void Put(const Note& n);

  mutable std::mutex mu_;
  std::array<Note, 8> notes_{};
  size_t next_ = 0;
};

}  // namespace remora::shim

// protocol/: ScratchMessage (flat encoding without copies), BodyReader and GuardDecode on
// hostile bodies.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "remora.capnp.h"
#include "remora/protocol/message.h"

namespace remora {
namespace {

// Decodes a wire::Request the way the worker does (every field, every pointer) and
// returns a fingerprint so the traversal is not optimised away.
Status DecodeRequest(std::span<const uint64_t> body, uint64_t* fingerprint) {
  return GuardDecode("request", [&]() -> Status {
    BodyReader r(body);
    auto req = r.Root<wire::Request>();
    uint64_t fp = static_cast<uint64_t>(req.getDevice()) ^ req.getThread() ^ static_cast<uint64_t>(req.which());
    fp ^= req.totalSize().wordCount;  // walks every pointer of the message
    switch (req.which()) {
      case wire::Request::MEMCPY_HTO_D: {
        auto m = req.getMemcpyHtoD();
        fp ^= m.getDst() ^ m.getSize() ^ m.getStream().getHandle();
        break;
      }
      case wire::Request::MEMCPY_DTO_H: {
        auto m = req.getMemcpyDtoH();
        fp ^= m.getSrc() ^ m.getSize() ^ m.getStream().getHandle();
        break;
      }
      case wire::Request::MEM_ALLOC: fp ^= req.getMemAlloc().getSize(); break;
      case wire::Request::STREAM_SYNCHRONIZE: fp ^= req.getStreamSynchronize().getHandle(); break;
      case wire::Request::EVENT_ELAPSED_TIME: fp ^= req.getEventElapsedTime().getEnd(); break;
      default: break;
    }
    *fingerprint = fp;
    return Status::Ok();
  });
}

std::vector<uint64_t> SampleRequest() {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  req.setDevice(3);
  req.setThread(0x1234);
  auto m = req.initMemcpyHtoD();
  m.setDst(0x200000001000);
  m.setSize(4096);
  m.initStream().setHandle(0x5100000000000010ull);
  auto flat = msg.Flatten();
  return {flat.begin(), flat.end()};
}

// A small message is flattened in place (the segment table sits in the scratch area
// before the segment) and reads back field by field.
TEST(ScratchMessage, SmallMessageRoundTrips) {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  req.setDevice(1);
  req.setThread(77);
  req.initMemAlloc().setSize(123456789);
  auto flat = msg.Flatten();
  ASSERT_GE(flat.size(), 2u);
  // Standard flat encoding: first word = segment count - 1 (0) and segment 0's size.
  EXPECT_EQ(static_cast<uint32_t>(flat[0]), 0u);
  EXPECT_EQ(flat[0] >> 32, flat.size() - 1);

  BodyReader r(flat);
  auto back = r.Root<wire::Request>();
  EXPECT_EQ(back.getDevice(), 1);
  EXPECT_EQ(back.getThread(), 77u);
  ASSERT_EQ(back.which(), wire::Request::MEM_ALLOC);
  EXPECT_EQ(back.getMemAlloc().getSize(), 123456789u);

  // Identical to Cap'n Proto's own flat encoding.
  auto words = capnp::messageToFlatArray(msg.builder());
  ASSERT_EQ(words.size(), flat.size());
  EXPECT_EQ(std::memcmp(words.begin(), flat.data(), flat.size() * 8), 0);
}

// A message larger than the 32 KiB scratch area spills into heap segments; Flatten writes
// a multi-segment table and the reader sees every byte.
TEST(ScratchMessage, LargeMessageSpillsIntoSeveralSegments) {
  ScratchMessage msg;
  auto reply = msg.InitRoot<wire::Reply>();
  constexpr unsigned kDevices = 300;
  auto list = reply.initDevices(kDevices);
  for (unsigned i = 0; i < kDevices; i++) {
    auto d = list[i];
    d.setOrdinal(static_cast<int32_t>(i));
    d.setName(std::string(50 + i % 7, static_cast<char>('a' + i % 26)));
    auto attrs = d.initAttributes(160);
    for (unsigned a = 0; a < 160; a++) attrs.set(a, static_cast<int32_t>(i * 1000 + a));
  }
  auto segments = msg.builder().getSegmentsForOutput();
  ASSERT_GT(segments.size(), 1u) << "the test must exercise the multi-segment path";
  auto flat = msg.Flatten();
  EXPECT_EQ(static_cast<uint32_t>(flat[0]), segments.size() - 1);
  EXPECT_GT(flat.size() * 8, 32u << 10);

  BodyReader r(flat);
  auto back = r.Root<wire::Reply>();
  ASSERT_EQ(back.which(), wire::Reply::DEVICES);
  auto devs = back.getDevices();
  ASSERT_EQ(devs.size(), kDevices);
  for (unsigned i = 0; i < kDevices; i += 37) {
    EXPECT_EQ(devs[i].getOrdinal(), static_cast<int32_t>(i));
    EXPECT_EQ(std::string(devs[i].getName().cStr()), std::string(50 + i % 7, static_cast<char>('a' + i % 26)));
    ASSERT_EQ(devs[i].getAttributes().size(), 160u);
    EXPECT_EQ(devs[i].getAttributes()[159], static_cast<int32_t>(i * 1000 + 159));
  }
  auto words = capnp::messageToFlatArray(msg.builder());
  ASSERT_EQ(words.size(), flat.size());
  EXPECT_EQ(std::memcmp(words.begin(), flat.data(), flat.size() * 8), 0);
}

// A builder created while another is alive on the same thread must not share its scratch
// area: both messages stay intact and independent.
TEST(ScratchMessage, NestedBuildersOnOneThreadAreIndependent) {
  ScratchMessage outer;
  auto o = outer.InitRoot<wire::Request>();
  o.setDevice(11);
  o.initMemAlloc().setSize(1111);
  std::vector<uint64_t> outer_copy;
  {
    ScratchMessage inner;
    auto i = inner.InitRoot<wire::Request>();
    i.setDevice(22);
    i.initMemFree().setPtr(2222);
    auto inner_flat = inner.Flatten();
    auto outer_flat = outer.Flatten();
    EXPECT_NE(inner_flat.data(), outer_flat.data());
    BodyReader ri(inner_flat);
    EXPECT_EQ(ri.Root<wire::Request>().getDevice(), 22);
    EXPECT_EQ(ri.Root<wire::Request>().getMemFree().getPtr(), 2222u);
    BodyReader ro(outer_flat);
    EXPECT_EQ(ro.Root<wire::Request>().getDevice(), 11);
    EXPECT_EQ(ro.Root<wire::Request>().getMemAlloc().getSize(), 1111u);
    outer_copy.assign(outer_flat.begin(), outer_flat.end());
  }
  // The inner builder's destruction left the outer message untouched.
  auto flat = outer.Flatten();
  ASSERT_EQ(flat.size(), outer_copy.size());
  EXPECT_EQ(std::memcmp(flat.data(), outer_copy.data(), flat.size() * 8), 0);
}

// Once a scratch builder is gone, the next one on the thread starts from a clean area: no
// field of the previous message leaks into it.
TEST(ScratchMessage, ScratchAreaIsCleanForTheNextMessage) {
  {
    ScratchMessage a;
    auto r = a.InitRoot<wire::Reply>();
    r.setError(77);
    r.setMessage(std::string(1000, 'z'));
    r.setAsyncError(5);
    (void)a.Flatten();
  }
  ScratchMessage b;
  b.InitRoot<wire::Reply>().setDeviceGeneration(9);
  BodyReader r(b.Flatten());
  auto back = r.Root<wire::Reply>();
  EXPECT_EQ(back.getError(), 0u);
  EXPECT_EQ(back.getAsyncError(), 0u);
  EXPECT_FALSE(back.hasMessage());
  EXPECT_EQ(back.getDeviceGeneration(), 9u);
}

// Each thread has its own scratch area: concurrent builders do not corrupt each other.
TEST(ScratchMessage, ThreadsDoNotShareScratch) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < 2000; i++) {
        ScratchMessage msg;
        auto req = msg.InitRoot<wire::Request>();
        req.setDevice(t);
        req.setThread(static_cast<uint64_t>(i));
        req.initMemAlloc().setSize(static_cast<uint64_t>(t) * 1000000 + static_cast<uint64_t>(i));
        BodyReader r(msg.Flatten());
        auto back = r.Root<wire::Request>();
        if (back.getDevice() != t || back.getThread() != static_cast<uint64_t>(i) ||
            back.getMemAlloc().getSize() != static_cast<uint64_t>(t) * 1000000 + static_cast<uint64_t>(i))
          failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(GuardDecode, WellFormedRequestDecodes) {
  auto body = SampleRequest();
  uint64_t fp = 0;
  Status st = DecodeRequest(body, &fp);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// Every strict truncation of a valid body is reported as a malformed request.
TEST(GuardDecode, TruncatedBodiesAreMalformed) {
  auto body = SampleRequest();
  for (size_t n = 1; n < body.size(); n++) {
    uint64_t fp = 0;
    Status st = DecodeRequest(std::span<const uint64_t>(body.data(), n), &fp);
    EXPECT_EQ(st.code(), Err::kInvalidValue) << "truncated to " << n << " words";
    EXPECT_EQ(st.message().rfind("malformed request", 0), 0u) << st.message();
  }
}

// Random garbage, and valid bodies with random words and bits flipped: decoding either
// succeeds (the bits happened to form a valid message) or fails with kInvalidValue
// "malformed ..." - never a crash, never another error.
TEST(GuardDecode, FuzzedBodiesNeverCrash) {
  std::mt19937_64 rng(20240601);
  auto sample = SampleRequest();
  int malformed = 0;
  for (int iter = 0; iter < 600; iter++) {
    std::vector<uint64_t> body;
    switch (iter % 4) {
      case 0: {  // pure garbage of random length
        body.resize(1 + rng() % 64);
        for (auto& w : body) w = rng();
        break;
      }
      case 1: {  // garbage with a plausible single-segment table
        body.resize(2 + rng() % 32);
        for (auto& w : body) w = rng();
        body[0] = (uint64_t{body.size() - 1 - rng() % 2} << 32) | (rng() % 2);
        break;
      }
      case 2: {  // valid body, a few flipped bits
        body = sample;
        for (int k = 0; k < 1 + static_cast<int>(rng() % 4); k++) body[rng() % body.size()] ^= 1ull << (rng() % 64);
        break;
      }
      case 3: {  // valid body, random words replaced, random truncation or extension
        body = sample;
        body[rng() % body.size()] = rng();
        if (rng() % 2) body.resize(1 + rng() % body.size());
        else body.resize(body.size() + rng() % 8, rng());
        break;
      }
    }
    uint64_t fp = 0;
    Status st = DecodeRequest(body, &fp);
    if (!st.ok()) {
      malformed++;
      EXPECT_EQ(st.code(), Err::kInvalidValue);
      EXPECT_EQ(st.message().rfind("malformed request", 0), 0u) << st.message();
    }
  }
  EXPECT_GT(malformed, 100) << "the fuzzer should produce plenty of invalid bodies";
}

// A body that points its root far outside the message (a classic attack on zero-copy
// decoders) is caught by bounds checking.
TEST(GuardDecode, OutOfBoundsRootPointerIsMalformed) {
  // Segment table: 1 segment of 2 words. Root: struct pointer with offset 1000.
  std::vector<uint64_t> body = {uint64_t{2} << 32, (uint64_t{1000} << 2) | (uint64_t{1} << 32), 0};
  uint64_t fp = 0;
  Status st = DecodeRequest(body, &fp);
  EXPECT_EQ(st.code(), Err::kInvalidValue) << st.ToString();
}

// A segment table that claims 2^32 segments must not make the reader allocate or read
// wildly.
TEST(GuardDecode, AbsurdSegmentCountIsMalformed) {
  std::vector<uint64_t> body = {0xffffffffffffffffull, 0, 0, 0};
  uint64_t fp = 0;
  Status st = DecodeRequest(body, &fp);
  EXPECT_EQ(st.code(), Err::kInvalidValue) << st.ToString();
}

}  // namespace
}  // namespace remora

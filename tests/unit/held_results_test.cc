// server/worker/session/held_results.h: a generated call's results too large for one reply, held until
// the client reads them back in pieces; dropped once read, bounded per session.
#include "worker/session/held_results.h"
#include "remora/protocol/api_args.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace remora::worker {
namespace {

std::vector<std::byte> Pattern(size_t n, int seed) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; i++) b[i] = std::byte(static_cast<uint8_t>(i * 7 + seed));
  return b;
}

TEST(HeldResults, APiecesReplyIsNeverHeldItself) {
  // A piece's reply carries its bytes and their u64 count (api_args.h): it must travel inline.
  EXPECT_LE(HeldResults::kPieceBytes + 64, HeldResults::kInlineBytes);
}

TEST(HeldResults, ReadInPiecesThenDroppedAfterTheLastByte) {
  HeldResults h;
  const std::vector<std::byte> want = Pattern(1'300'000, 3);
  auto id = h.Hold(want);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(h.bytes(), want.size());
  std::vector<std::byte> got(want.size());
  const size_t piece = HeldResults::kPieceBytes;
  for (size_t at = 0; at < got.size(); at += piece) {
    const size_t n = std::min(piece, got.size() - at);
    ASSERT_TRUE(h.Read(*id, at, got.data() + at, n).ok()) << at;
  }
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  EXPECT_EQ(h.bytes(), 0u) << "dropped once its last byte was read";
  std::byte one{};
  EXPECT_EQ(h.Read(*id, 0, &one, 1).code(), Err::kInvalidValue) << "read after it was dropped";
}

TEST(HeldResults, PiecesMayComeInAnyOrderAndAgain) {
  HeldResults h;
  const std::vector<std::byte> want = Pattern(1000, 9);
  auto id = h.Hold(want);
  ASSERT_TRUE(id.ok());
  std::vector<std::byte> got(1000);
  ASSERT_TRUE(h.Read(*id, 500, got.data() + 500, 400).ok());
  ASSERT_TRUE(h.Read(*id, 0, got.data(), 500).ok());
  ASSERT_TRUE(h.Read(*id, 0, got.data(), 10).ok()) << "an early piece again (a retry) is fine";
  EXPECT_EQ(h.bytes(), 1000u) << "the last byte was not read yet";
  ASSERT_TRUE(h.Read(*id, 900, got.data() + 900, 100).ok());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  EXPECT_EQ(h.bytes(), 0u);
}

TEST(HeldResults, ForgedIdsAndRangesAreRefusedAndLoseNothing) {
  HeldResults h;
  auto a = h.Hold(Pattern(100, 1));
  auto b = h.Hold(Pattern(200, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  std::vector<std::byte> buf(300);
  EXPECT_EQ(h.Read(*b + 1000, 0, buf.data(), 1).code(), Err::kInvalidValue) << "an id never given";
  EXPECT_EQ(h.Read(*a, 50, buf.data(), 51).code(), Err::kInvalidValue) << "past the end";
  EXPECT_EQ(h.Read(*a, ~0ull - 10, buf.data(), 20).code(), Err::kInvalidValue) << "an offset that wraps";
  EXPECT_EQ(h.bytes(), 300u) << "nothing dropped by refused reads";
  ASSERT_TRUE(h.Read(*b, 0, buf.data(), 200).ok());
  EXPECT_EQ(std::memcmp(buf.data(), Pattern(200, 2).data(), 200), 0);
  EXPECT_EQ(h.bytes(), 100u);
}

TEST(HeldResults, ASessionHoldsAtMostItsBound) {
  HeldResults h;
  auto big = h.Hold(std::vector<std::byte>(HeldResults::kMaxBytes - 10));
  ASSERT_TRUE(big.ok());
  auto over = h.Hold(std::vector<std::byte>(11));
  EXPECT_EQ(over.status().code(), Err::kMemoryAllocation);
  EXPECT_TRUE(h.Hold(std::vector<std::byte>(10)).ok()) << "up to the bound exactly";
}

TEST(StagedArgs, PiecesInOrderMakeArgumentsTakenOnce) {
  StagedArgs s;
  const std::vector<std::byte> want = Pattern(1000, 4);
  ASSERT_TRUE(s.Write(7, 1000, 0, want.data(), 600).ok());
  EXPECT_EQ(s.Take(7).status().code(), Err::kInvalidValue) << "not all sent: refused, and dropped";
  EXPECT_EQ(s.bytes(), 0u);
  ASSERT_TRUE(s.Write(7, 1000, 0, want.data(), 600).ok());
  ASSERT_TRUE(s.Write(7, 1000, 600, want.data() + 600, 400).ok());
  auto got = s.Take(7);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, want);
  EXPECT_EQ(s.Take(7).status().code(), Err::kInvalidValue) << "taken once";
  EXPECT_EQ(s.bytes(), 0u);
}

TEST(StagedArgs, PiecesOutOfOrderOrPastTheTotalAreRefusedAndLoseNothing) {
  StagedArgs s;
  const std::vector<std::byte> b = Pattern(100, 5);
  EXPECT_EQ(s.Write(1, 100, 10, b.data(), 10).code(), Err::kInvalidValue) << "never begun";
  ASSERT_TRUE(s.Write(1, 100, 0, b.data(), 50).ok());
  EXPECT_EQ(s.Write(1, 100, 60, b.data(), 10).code(), Err::kInvalidValue) << "a gap";
  EXPECT_EQ(s.Write(1, 100, 50, b.data(), 51).code(), Err::kInvalidValue) << "past the total";
  ASSERT_TRUE(s.Write(1, 100, 50, b.data() + 50, 50).ok()) << "the arguments are still whole";
  auto got = s.Take(1);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, b);
}

TEST(StagedArgs, ASessionStagesAtMostItsBound) {
  StagedArgs s;
  std::byte one{};
  ASSERT_TRUE(s.Write(1, StagedArgs::kMaxBytes - 10, 0, &one, 1).ok());
  EXPECT_EQ(s.Write(2, 11, 0, &one, 1).code(), Err::kMemoryAllocation);
  EXPECT_TRUE(s.Write(3, 10, 0, &one, 1).ok()) << "up to the bound exactly";
  ASSERT_TRUE(s.Write(1, 5, 0, &one, 1).ok()) << "begun again: the earlier attempt's room is given back";
  EXPECT_EQ(s.bytes(), 15u);
}

}  // namespace
}  // namespace remora::worker

namespace remora::worker {
namespace {

// A decoded array is bounded by the bytes that are left, not by one request's size: staged
// arguments may carry more than api::kMaxArgBytes; a count claiming more than is there is
// refused before anything is allocated for it.
TEST(ArgReader, ArraysAreBoundedByTheBytesLeft) {
  const size_t n = (api::kMaxArgBytes / sizeof(uint32_t)) + 1000;  // past a request's bound
  api::ArgWriter w;
  std::vector<uint32_t> values(n);
  for (size_t i = 0; i < n; i++) values[i] = static_cast<uint32_t>(i * 3);
  w.PutArray(values.data(), n, sizeof(uint32_t));
  api::ArgReader r(w.bytes().data(), w.bytes().size());
  std::vector<uint32_t> got;
  ASSERT_TRUE(r.GetArray(&got).ok());
  EXPECT_EQ(got, values);
  EXPECT_TRUE(r.Finish().ok());

  api::ArgWriter lie;
  lie.Put<uint64_t>(uint64_t{1} << 40);  // a terabyte of elements, 8 bytes sent
  lie.Put<uint64_t>(7);
  api::ArgReader bad(lie.bytes().data(), lie.bytes().size());
  Status st = bad.GetArray(&got);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("runs past the arguments"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace remora::worker

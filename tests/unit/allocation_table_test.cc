// memmgr/: AllocationTable - which address ranges belong to a session, and pointer
// validation against them (the isolation boundary between sessions).
#include <gtest/gtest.h>

#include "remora/memmgr/allocation_table.h"

namespace remora {
namespace {

Allocation A(uint64_t base, uint64_t size, uint64_t reserved = 0) {
  Allocation a;
  a.base = base;
  a.size = size;
  a.reserved = reserved;
  return a;
}

class AllocationTableTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(t.Insert(A(0x10000, 0x1000, 4096)).ok()); }
  AllocationTable t;
};

TEST_F(AllocationTableTest, InsertTracksSizeAndTotal) {
  ASSERT_TRUE(t.Insert(A(0x20000, 0x800)).ok());
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.total_bytes(), 0x1800u);
  auto all = t.All();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].base, 0x10000u);  // in address order
  EXPECT_EQ(all[1].base, 0x20000u);
}

// Overlap on either side, containment and exact duplicates are refused; ranges that
// merely touch are fine.
TEST_F(AllocationTableTest, OverlapIsRejectedOnBothSides) {
  for (auto [base, size] : std::initializer_list<std::pair<uint64_t, uint64_t>>{
           {0xf000, 0x1001},    // ends one byte inside (left side)
           {0x10fff, 0x10},     // starts at the last byte (right side)
           {0x10000, 0x1000},   // duplicate
           {0x10000, 1},        // same base, smaller
           {0x10800, 0x10},     // inside
           {0x0, 0x100000},     // contains it
       }) {
    Status st = t.Insert(A(base, size));
    EXPECT_EQ(st.code(), Err::kInvalidValue) << std::hex << base << "+" << size;
  }
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.total_bytes(), 0x1000u) << "a refused insert changes nothing";
  EXPECT_TRUE(t.Insert(A(0xf000, 0x1000)).ok()) << "adjacent on the left";
  EXPECT_TRUE(t.Insert(A(0x11000, 0x1000)).ok()) << "adjacent on the right";
  EXPECT_EQ(t.size(), 3u);
}

TEST_F(AllocationTableTest, EmptyAndWrappingRangesAreRejected) {
  EXPECT_EQ(t.Insert(A(0x50000, 0)).code(), Err::kInvalidValue);
  EXPECT_EQ(t.Insert(A(UINT64_MAX - 0x10, 0x100)).code(), Err::kInvalidValue);
  EXPECT_EQ(t.Insert(A(UINT64_MAX, 2)).code(), Err::kInvalidValue);
  EXPECT_EQ(t.size(), 1u);
}

// Free takes the exact base only: an interior or unknown pointer is kInvalidValue (CUDA's
// answer) and leaves the table unchanged.
TEST_F(AllocationTableTest, EraseExactInteriorUnknown) {
  auto interior = t.Erase(0x10010);
  ASSERT_FALSE(interior.ok());
  EXPECT_EQ(interior.status().code(), Err::kInvalidValue);
  EXPECT_NE(interior.status().message().find("inside"), std::string::npos) << interior.status().message();
  auto unknown = t.Erase(0x90000);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Err::kInvalidValue);
  EXPECT_EQ(t.size(), 1u);

  auto exact = t.Erase(0x10000);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->size, 0x1000u);
  EXPECT_EQ(exact->reserved, 4096u) << "the ledger charge comes back with it";
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.total_bytes(), 0u);
  EXPECT_FALSE(t.Erase(0x10000).ok()) << "double free";
}

TEST_F(AllocationTableTest, FindAtBoundaries) {
  EXPECT_TRUE(t.Find(0x10000).has_value());
  EXPECT_TRUE(t.Find(0x10fff).has_value());
  EXPECT_FALSE(t.Find(0x11000).has_value()) << "one past the end";
  EXPECT_FALSE(t.Find(0xffff).has_value()) << "one before the start";
  EXPECT_FALSE(t.Find(0).has_value());
  EXPECT_FALSE(t.Find(UINT64_MAX).has_value());
  ASSERT_TRUE(t.Insert(A(0x11000, 0x10)).ok());
  auto next = t.Find(0x11000);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->base, 0x11000u) << "the neighbour, not the first allocation";
  EXPECT_EQ(t.Find(0x10fff)->base, 0x10000u);
}

TEST_F(AllocationTableTest, CheckRange) {
  auto ok = [&](uint64_t p, uint64_t n) { return t.CheckRange(p, n).ok(); };
  EXPECT_TRUE(ok(0x10000, 0x1000)) << "the whole allocation";
  EXPECT_TRUE(ok(0x10000, 0)) << "len 0 at a valid pointer";
  EXPECT_TRUE(ok(0x10fff, 0));
  EXPECT_TRUE(ok(0x10fff, 1)) << "last byte";
  EXPECT_TRUE(ok(0x10800, 0x800)) << "interior up to the exact end";
  EXPECT_FALSE(ok(0x10000, 0x1001)) << "one past the end";
  EXPECT_FALSE(ok(0x10fff, 2));
  EXPECT_FALSE(ok(0x11000, 0)) << "the end pointer itself is not inside";
  EXPECT_FALSE(ok(0xffff, 1)) << "starts before";
  EXPECT_FALSE(ok(0x50000, 0)) << "not ours";
  // ptr + len wraps around 2^64: must not pass as a short range.
  EXPECT_FALSE(ok(0x10800, UINT64_MAX));
  EXPECT_FALSE(ok(0x10800, UINT64_MAX - 0x10800 + 0x10));
  EXPECT_FALSE(ok(0x10800, ~0ull - 0x7ff));
  auto r = t.CheckRange(0x10800, 0x10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->base, 0x10000u) << "reports the containing allocation";
  EXPECT_EQ(t.CheckRange(0x10000, 0x2000).status().code(), Err::kInvalidValue);
}

// A range spanning two adjacent allocations is not inside one allocation: a copy may
// not run from one buffer into the next.
TEST_F(AllocationTableTest, CheckRangeDoesNotSpanAdjacentAllocations) {
  ASSERT_TRUE(t.Insert(A(0x11000, 0x1000)).ok());
  EXPECT_FALSE(t.CheckRange(0x10000, 0x1001).ok());
  EXPECT_FALSE(t.CheckRange(0x10ff0, 0x20).ok());
  EXPECT_TRUE(t.CheckRange(0x11000, 0x1000).ok());
}

// InsertMerging: a range overlapping only mergeable entries replaces them with the union
// (fields of the new one, reservations summed); any other overlap refuses it, unchanged.
TEST_F(AllocationTableTest, InsertMergingMakesOneEntryOfMergeableOverlaps) {
  auto graph_memory = [](uint64_t base, uint64_t size, uint64_t reserved) {
    Allocation a = A(base, size, reserved);
    a.kind = AllocKind::kGraphMemory;
    return a;
  };
  auto only_graph_memory = [](const Allocation& e) { return e.kind == AllocKind::kGraphMemory; };
  ASSERT_TRUE(t.Insert(graph_memory(0x20000, 0x1000, 100)).ok());
  ASSERT_TRUE(t.Insert(graph_memory(0x21800, 0x800, 200)).ok());
  // Not overlapping: a plain insert.
  auto r = t.InsertMerging(graph_memory(0x30000, 0x100, 1), only_graph_memory);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 0x30000u);
  // Overlapping both graph ranges (starting inside the first): their union.
  r = t.InsertMerging(graph_memory(0x20800, 0x1400, 50), only_graph_memory);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 0x20000u);
  auto u = t.Find(0x21fff);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->base, 0x20000u);
  EXPECT_EQ(u->size, 0x2000u);
  EXPECT_EQ(u->reserved, 350u);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.total_bytes(), 0x1000u + 0x2000u + 0x100u);
  // Overlapping plain device memory (SetUp's 0x10000): refused, nothing changed.
  r = t.InsertMerging(graph_memory(0xf800, 0x1000, 1), only_graph_memory);
  EXPECT_EQ(r.status().code(), Err::kInvalidValue);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.Find(0xf800), std::nullopt);
  EXPECT_FALSE(t.InsertMerging(graph_memory(0x40000, 0, 1), only_graph_memory).ok());
}

TEST_F(AllocationTableTest, ClearEmptiesTheTable) {
  ASSERT_TRUE(t.Insert(A(0x30000, 0x100)).ok());
  t.Clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.total_bytes(), 0u);
  EXPECT_FALSE(t.Find(0x10000).has_value());
  EXPECT_TRUE(t.Insert(A(0x10000, 0x1000)).ok());
}

}  // namespace
}  // namespace remora

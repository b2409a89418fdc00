// worker/graph_state AdoptGraphMemory: a graph's allocation nodes may be given addresses the
// driver reuses within the graph (graphMemoryFootprint); the ledger keeps one entry, their
// union, charged with the sum, and refuses an overlap with anything that is not the graph's.
#include <gtest/gtest.h>

#include "worker/session/graph_state.h"

namespace remora::worker {
namespace {

Allocation GraphAlloc(uint64_t base, uint64_t size) {
  Allocation a;
  a.base = base;
  a.size = size;
  a.kind = AllocKind::kGraphMemory;
  a.reserved = size;
  return a;
}

TEST(AdoptGraphMemory, DistinctAddressesAreEntriesOfTheirOwn) {
  AllocationTable t;
  Graph g;
  ASSERT_TRUE(AdoptGraphMemory(t, g, GraphAlloc(0x10000, 0x1000)).ok());
  ASSERT_TRUE(AdoptGraphMemory(t, g, GraphAlloc(0x20000, 0x1000)).ok());
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(g.memory.size(), 2u);
}

TEST(AdoptGraphMemory, AReusedAddressOfTheSameGraphMergesAndSumsTheCharge) {
  AllocationTable t;
  Graph g;
  ASSERT_TRUE(AdoptGraphMemory(t, g, GraphAlloc(0x10000, 0x2000)).ok());
  auto second = AdoptGraphMemory(t, g, GraphAlloc(0x10000, 0x1000));  // the same address again
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto third = AdoptGraphMemory(t, g, GraphAlloc(0x11000, 0x3000));  // reaching beyond the first
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  ASSERT_EQ(t.size(), 1u);
  auto e = t.Find(0x13fff);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->base, 0x10000u);
  EXPECT_EQ(e->size, 0x4000u);
  EXPECT_EQ(e->reserved, 0x2000u + 0x1000u + 0x3000u) << "each node's bytes stay charged until the graph goes";
  EXPECT_EQ(g.memory, (std::vector<DevPtr>{0x10000, 0x11000})) << "every node's own address, once";
}

TEST(AdoptGraphMemory, AnOverlapWithAnotherGraphOrAllocationIsRefusedAndChangesNothing) {
  AllocationTable t;
  Graph g1, g2;
  ASSERT_TRUE(AdoptGraphMemory(t, g1, GraphAlloc(0x10000, 0x1000)).ok());
  Allocation plain;
  plain.base = 0x30000;
  plain.size = 0x1000;
  ASSERT_TRUE(t.Insert(plain).ok());
  EXPECT_FALSE(AdoptGraphMemory(t, g2, GraphAlloc(0x10000, 0x1000)).ok()) << "another graph's range";
  EXPECT_FALSE(AdoptGraphMemory(t, g1, GraphAlloc(0x30000, 0x800)).ok()) << "an ordinary allocation";
  EXPECT_FALSE(AdoptGraphMemory(t, g1, GraphAlloc(0x10800, 0x20000)).ok()) << "spans the graph's and another's";
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Find(0x10000)->size, 0x1000u);
  EXPECT_EQ(g1.memory.size(), 1u);
  EXPECT_TRUE(g2.memory.empty());
}

}  // namespace
}  // namespace remora::worker

// memmgr/: HandleTable - opaque per-session handles that encode their kind.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "remora/memmgr/handle_table.h"

namespace remora {
namespace {

TEST(HandleTable, KindIsEncodedInTheTopByte) {
  HandleTable<int> streams(HandleKind::kStream);
  HandleTable<int> events(HandleKind::kEvent);
  uint64_t s = streams.Insert(1);
  uint64_t e = events.Insert(2);
  EXPECT_EQ(s >> 56, static_cast<uint64_t>(HandleKind::kStream));
  EXPECT_EQ(e >> 56, static_cast<uint64_t>(HandleKind::kEvent));
  // Same position in their tables, different handles: a stream id passed as an event (or
  // the reverse) is not found.
  EXPECT_NE(s, e);
  EXPECT_EQ(streams.Find(e), nullptr);
  EXPECT_EQ(events.Find(s), nullptr);
  auto wrong = events.Get(s);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Err::kInvalidValue);
  EXPECT_NE(wrong.status().message().find("event"), std::string::npos) << wrong.status().message();
}

// A session's window (its client's index for the server) sits below the kind: tables of two
// sessions in different windows never issue the same handle, and a handle of one is not
// found in the other.
TEST(HandleTable, WindowSeparatesSessionsOfOneApplication) {
  HandleTable<int> first(HandleKind::kStream), second(HandleKind::kStream);
  second.SetWindow(0xa5);
  std::set<uint64_t> seen;
  for (int i = 0; i < 100; i++) {
    uint64_t a = first.Insert(i), b = second.Insert(i);
    EXPECT_EQ(a >> 56, static_cast<uint64_t>(HandleKind::kStream));
    EXPECT_EQ(b >> 56, static_cast<uint64_t>(HandleKind::kStream));
    EXPECT_EQ((a >> 48) & 0xff, 0u);
    EXPECT_EQ((b >> 48) & 0xff, 0xa5u);
    EXPECT_TRUE(seen.insert(a).second);
    EXPECT_TRUE(seen.insert(b).second);
    EXPECT_EQ(first.Find(b), nullptr);
    EXPECT_EQ(second.Find(a), nullptr);
  }
}

// 0, 1 and 2 are the wire's special stream values (legacy, cudaStreamLegacy, per-thread):
// no table ever issues them.
TEST(HandleTable, NeverIssuesTheSpecialStreamValues) {
  HandleTable<int> t(HandleKind::kStream);
  for (int i = 0; i < 1000; i++) {
    uint64_t id = t.Insert(i);
    EXPECT_GT(id, 2u);
  }
}

TEST(HandleTable, FindGetAndUnknownIds) {
  HandleTable<std::string> t(HandleKind::kModule);
  uint64_t a = t.Insert("a");
  uint64_t b = t.Insert("b");
  ASSERT_NE(t.Find(a), nullptr);
  EXPECT_EQ(*t.Find(a), "a");
  auto g = t.Get(b);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(**g, "b");
  for (uint64_t bogus : {uint64_t{0}, uint64_t{1}, uint64_t{2}, a + 1, a ^ (uint64_t{1} << 60), ~uint64_t{0}}) {
    EXPECT_EQ(t.Find(bogus), nullptr) << std::hex << bogus;
    EXPECT_EQ(t.Get(bogus).status().code(), Err::kInvalidValue);
  }
  EXPECT_EQ(t.size(), 2u);
}

TEST(HandleTable, EraseAndIdsAreNeverReused) {
  HandleTable<int> t(HandleKind::kEvent);
  std::set<uint64_t> seen;
  uint64_t first = t.Insert(1);
  seen.insert(first);
  EXPECT_TRUE(t.Erase(first));
  EXPECT_FALSE(t.Erase(first)) << "second erase";
  EXPECT_EQ(t.Find(first), nullptr) << "a destroyed handle is dead";
  for (int i = 0; i < 500; i++) {
    uint64_t id = t.Insert(i);
    EXPECT_TRUE(seen.insert(id).second) << "id reused: " << std::hex << id;
    if (i % 2) t.Erase(id);
  }
  EXPECT_EQ(t.size(), 250u);
  EXPECT_EQ(t.Ids().size(), 250u);
  int visited = 0;
  t.ForEach([&](uint64_t id, int& v) {
    EXPECT_NE(t.Find(id), nullptr);
    EXPECT_EQ(v % 2, 0);
    visited++;
  });
  EXPECT_EQ(visited, 250);
}

TEST(HandleTable, KindNames) {
  EXPECT_STREQ(HandleKindName(HandleKind::kStream), "stream");
  EXPECT_STREQ(HandleKindName(HandleKind::kEvent), "event");
  EXPECT_STREQ(HandleKindName(HandleKind::kModule), "module");
}

// Planned migration: the target's table takes the source's handles as they were, refuses
// another kind's, another window's or a live one, and mints later handles after them.
TEST(HandleTable, InsertAtTakesAnotherTablesHandles) {
  HandleTable<int> source(HandleKind::kStream), target(HandleKind::kStream);
  source.SetWindow(3);
  target.SetWindow(3);
  uint64_t a = source.Insert(1), b = source.Insert(2), c = source.Insert(3);
  ASSERT_TRUE(target.InsertAt(c, 3).ok());
  ASSERT_TRUE(target.InsertAt(a, 1).ok());
  ASSERT_NE(target.Find(a), nullptr);
  EXPECT_EQ(*target.Find(c), 3);
  EXPECT_EQ(target.InsertAt(a, 9).code(), Err::kInvalidValue) << "a live handle";
  HandleTable<int> events(HandleKind::kEvent), other(HandleKind::kStream);
  events.SetWindow(3);
  other.SetWindow(4);
  EXPECT_EQ(events.InsertAt(b, 2).code(), Err::kInvalidValue) << "a stream handle in an event table";
  EXPECT_EQ(other.InsertAt(b, 2).code(), Err::kInvalidValue) << "another window's handle";
  EXPECT_EQ(target.InsertAt(b | 1, 2).code(), Err::kInvalidValue) << "not a handle's shape";
  uint64_t next = target.Insert(4);
  EXPECT_GT(next, c);
  EXPECT_NE(next, b);
}

}  // namespace
}  // namespace remora

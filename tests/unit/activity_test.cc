// GPU activity (issue 43): the records' wire form (protocol/api/activity_wire.h) and the
// records the host-emulated backend synthesizes (server/worker/backend/activity.h). The whole path,
// through the client's libcupti.so.13, is integration.profiler's.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "activity_wire.h"
#include "worker/backend/activity.h"

namespace remora::worker {
namespace {

namespace wire = api::activity;

wire::Record Kernel(uint32_t correlation, std::string name) {
  wire::Record r;
  r.kind = wire::RecordKind::kKernel;
  r.start = 100, r.end = 250, r.correlation = correlation, r.device = 1, r.stream = 7;
  r.grid[0] = 64, r.block[0] = 256, r.dynamic_shared = 1024, r.registers = 32;
  r.name = std::move(name);
  return r;
}

TEST(ActivityWire, RecordsReadBackAsWritten) {
  std::string bytes;
  wire::Append(&bytes, Kernel(5, "_Z5scalePffi"));
  wire::Record copy;
  copy.kind = wire::RecordKind::kMemcpy;
  copy.bytes = 1 << 20, copy.copy_kind = 1, copy.src_kind = 2, copy.dst_kind = 3, copy.correlation = 6;
  wire::Append(&bytes, copy);
  wire::Record ext;
  ext.kind = wire::RecordKind::kExternalCorrelation;
  ext.correlation = 5, ext.external_kind = 2, ext.external_id = 1ull << 40;
  wire::Append(&bytes, ext);

  std::vector<wire::Record> got;
  std::string error;
  ASSERT_TRUE(wire::Parse(bytes.data(), bytes.size(), &got, &error)) << error;
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].name, "_Z5scalePffi");
  EXPECT_EQ(got[0].grid[0], 64);
  EXPECT_EQ(got[0].block[0], 256);
  EXPECT_EQ(got[0].end, 250u);
  EXPECT_EQ(got[0].registers, 32);
  EXPECT_EQ(got[1].kind, wire::RecordKind::kMemcpy);
  EXPECT_EQ(got[1].bytes, 1u << 20);
  EXPECT_EQ(got[1].dst_kind, 3);
  EXPECT_EQ(got[2].external_id, 1ull << 40);
  EXPECT_EQ(got[2].correlation, 5u);
}

TEST(ActivityWire, MalformedRecordsAreRefused) {
  std::string bytes;
  wire::Append(&bytes, Kernel(1, "k"));
  std::vector<wire::Record> got;
  std::string error;
  for (size_t cut = 1; cut < bytes.size(); cut++) {  // every truncation
    got.clear();
    EXPECT_FALSE(wire::Parse(bytes.data(), cut, &got, &error)) << cut;
  }
  std::string bad = bytes;
  bad[0] = 9;  // an unknown kind
  EXPECT_FALSE(wire::Parse(bad.data(), bad.size(), &got, &error));
  EXPECT_NE(error.find("unknown kind"), std::string::npos);
  std::string longer = bytes;
  longer[sizeof(wire::detail::Fixed) - 2] = 50;  // a name longer than what follows
  EXPECT_FALSE(wire::Parse(longer.data(), longer.size(), &got, &error));
  EXPECT_TRUE(wire::Parse(bytes.data(), 0, &got, &error));  // nothing is no records
}

TEST(ActivityWire, LongNamesAreCut) {
  std::string bytes;
  wire::Append(&bytes, Kernel(1, std::string(wire::kMaxName + 100, 'x')));
  std::vector<wire::Record> got;
  std::string error;
  ASSERT_TRUE(wire::Parse(bytes.data(), bytes.size(), &got, &error)) << error;
  EXPECT_EQ(got[0].name.size(), wire::kMaxName);
}

TEST(SynthesizedActivity, RecordsOnlyWhatIsCollected) {
  SynthesizedActivity a;
  EXPECT_EQ(a.Correlate(wire::kKernels), 0u);  // nothing collected yet
  ASSERT_TRUE(a.Enable(wire::kKernels).ok());
  EXPECT_EQ(a.Correlate(wire::kMemcpys), 0u);
  uint32_t c = a.Correlate(wire::kKernels);
  EXPECT_NE(c, 0u);
  wire::Record copy;
  copy.kind = wire::RecordKind::kMemcpy;
  a.Add(copy);  // not collected: dropped
  a.Add(Kernel(c, "k"));
  std::vector<wire::Record> got;
  uint64_t dropped = 0;
  ASSERT_TRUE(a.Flush(&got, &dropped).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].correlation, c);
  got.clear();
  ASSERT_TRUE(a.Flush(&got, &dropped).ok());
  EXPECT_TRUE(got.empty());  // flushed once
}

TEST(SynthesizedActivity, ExternalIdsLabelTheCallsBetweenPushAndPop) {
  SynthesizedActivity a;
  ASSERT_TRUE(a.Enable(wire::kKernels | wire::kExternalCorrelations).ok());
  EXPECT_FALSE(a.Pop(2).ok());  // nothing pushed
  ASSERT_TRUE(a.Push(2, 41).ok());
  ASSERT_TRUE(a.Push(2, 42).ok());  // the innermost labels
  ASSERT_TRUE(a.Push(3, 7).ok());   // another kind: its own stack
  uint32_t c1 = a.Correlate(wire::kKernels);
  ASSERT_TRUE(a.Pop(2).ok());
  ASSERT_TRUE(a.Pop(3).ok());
  uint32_t c2 = a.Correlate(wire::kKernels);
  ASSERT_TRUE(a.Pop(2).ok());
  uint32_t c3 = a.Correlate(wire::kKernels);
  EXPECT_NE(c1, c2);
  std::vector<wire::Record> got;
  uint64_t dropped = 0;
  ASSERT_TRUE(a.Flush(&got, &dropped).ok());
  std::vector<std::tuple<uint32_t, uint32_t, uint64_t>> ext;  // correlation, kind, id
  for (const auto& r : got) {
    ASSERT_EQ(r.kind, wire::RecordKind::kExternalCorrelation);
    ext.emplace_back(r.correlation, r.external_kind, r.external_id);
  }
  std::sort(ext.begin(), ext.end());
  std::vector<std::tuple<uint32_t, uint32_t, uint64_t>> want = {{c1, 2, 42}, {c1, 3, 7}, {c2, 2, 41}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(ext, want);
  (void)c3;  // no id pushed: no external record
}

TEST(SynthesizedActivity, HoldsABoundedNumberOfRecordsAndCountsTheRest) {
  SynthesizedActivity a;
  ASSERT_TRUE(a.Enable(wire::kKernels).ok());
  for (size_t i = 0; i < kMaxHeldRecords + 5; i++) a.Add(Kernel(a.Correlate(wire::kKernels), "k"));
  std::vector<wire::Record> got;
  uint64_t dropped = 0;
  ASSERT_TRUE(a.Flush(&got, &dropped).ok());
  EXPECT_EQ(got.size(), kMaxHeldRecords);
  EXPECT_EQ(dropped, 5u);
  got.clear();
  a.Add(Kernel(a.Correlate(wire::kKernels), "k"));
  ASSERT_TRUE(a.Flush(&got, &dropped).ok());
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(dropped, 0u);  // counted once, since the last flush
}

TEST(SynthesizedActivity, StoppingDropsWhatWasNotFlushed) {
  SynthesizedActivity a;
  ASSERT_TRUE(a.Enable(wire::kKernels).ok());
  a.Add(Kernel(a.Correlate(wire::kKernels), "k"));
  ASSERT_TRUE(a.Enable(0).ok());
  std::vector<wire::Record> got;
  uint64_t dropped = 0;
  ASSERT_TRUE(a.Flush(&got, &dropped).ok());
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(a.StreamId(nullptr), 0u);
  int s1 = 0, s2 = 0;
  EXPECT_EQ(a.StreamId(&s1), a.StreamId(&s1));
  EXPECT_NE(a.StreamId(&s1), a.StreamId(&s2));
}

}  // namespace
}  // namespace remora::worker

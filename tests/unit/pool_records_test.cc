// server/pool/: the pool's records (what etcd holds, as JSON) and placement, pure code.
#include <gtest/gtest.h>

#include <set>

#include "pool/etcd_client.h"
#include "pool/placement.h"
#include "pool/records.h"

namespace remora::pool {
namespace {

PoolTenant Tenant(const std::string& name) {
  PoolTenant t;
  t.name = name;
  t.stored_key.fill(0x11);
  t.server_key = Key{};
  t.server_key->fill(0x22);
  t.created_at = 1700000000;
  return t;
}

ServerRecord Server(const std::string& name, std::vector<PoolGpu> gpus) {
  ServerRecord r;
  r.name = name;
  r.urls = {"tcp://" + name + ":7070"};
  r.gpus = std::move(gpus);
  return r;
}

PoolGpu Gpu(int index, const std::string& model, uint64_t total, uint64_t used = 0) {
  return PoolGpu{index, "GPU-" + model + "-" + std::to_string(index), model, total, used};
}

TEST(PoolRecords, TenantRoundTrips) {
  PoolTenant t = Tenant("alice");
  t.memory_limit = 1ull << 30;
  t.pool_limit = 3ull << 30;
  t.compute.weight = 3000;
  t.compute.max = sched::ComputeMax{20000, 100000};
  t.compute.priority = sched::Priority::kHigh;
  auto back = DecodeTenant(EncodeTenant(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "alice");
  EXPECT_EQ(back->stored_key, t.stored_key);
  EXPECT_EQ(back->server_key, t.server_key);
  EXPECT_EQ(back->memory_limit, t.memory_limit);
  EXPECT_EQ(back->pool_limit, t.pool_limit);
  EXPECT_EQ(back->created_at, t.created_at);
  EXPECT_EQ(back->compute, t.compute);
  PoolTenant none = Tenant("bob");
  auto b = DecodeTenant(EncodeTenant(none));
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->memory_limit);
  EXPECT_FALSE(b->pool_limit);
  EXPECT_TRUE(b->compute.empty());
}

TEST(PoolRecords, MalformedRecordsAreErrorsNotCrashes) {
  for (const char* text : {"", "[]", "{}", "{\"name\": 3}", "{\"name\": \"x\", \"stored_key\": \"zz\"}",
                           "{\"name\": \"Bad Name\", \"stored_key\": \"00\"}", "not json",
                           "{\"name\": \"x\", \"stored_key\": \"1111111111111111111111111111111111111111111111111111111111111111\", "
                           "\"compute\": {\"weight\": 0}}"})
    EXPECT_FALSE(DecodeTenant(text).ok()) << text;
  for (const char* text : {"", "{}", "{\"name\": \"s\", \"urls\": 1, \"gpus\": []}",
                           "{\"name\": \"s\", \"urls\": [], \"gpus\": [{\"index\": \"0\"}]}"})
    EXPECT_FALSE(DecodeServer(text).ok()) << text;
}

TEST(PoolRecords, ServerRoundTrips) {
  ServerRecord r = Server("gpu1", {Gpu(0, "H200", 141ull << 30, 5ull << 30)});
  r.tenants["alice"] = {1ull << 30, 2};
  r.sessions = 2;
  r.health = "draining";
  auto back = DecodeServer(EncodeServer(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->urls, r.urls);
  ASSERT_EQ(back->gpus.size(), 1u);
  EXPECT_EQ(back->gpus[0].uuid, "GPU-H200-0");
  EXPECT_EQ(back->gpus[0].used, 5ull << 30);
  EXPECT_EQ(back->tenants.at("alice").sessions, 2u);
  EXPECT_EQ(back->health, "draining");
}

TEST(PoolRecords, ServerNames) {
  EXPECT_TRUE(ValidateServerName("gpu-1.example_org").ok());
  for (const char* bad : {"", "-x", ".x", "a/b", "a b"}) EXPECT_FALSE(ValidateServerName(bad).ok()) << bad;
  EXPECT_FALSE(ValidateServerName(std::string(64, 'a')).ok());
}

TEST(PoolRecords, ViewOfTheKeys) {
  PoolKeys k("/remora/");
  std::map<std::string, KeyValue> kvs;
  auto put = [&](const std::string& key, const std::string& value, int64_t rev) {
    kvs[key] = KeyValue{key, value, rev, rev, 1, 0};
  };
  put(k.Tenant("alice"), EncodeTenant(Tenant("alice")), 2);
  put(k.Server("s1"), EncodeServer(Server("s1", {Gpu(0, "H200", 100)})), 3);
  put(k.Assign("alice", "s2", "GPU-b"), EncodeAssignment({"alice", "s2", "GPU-b", 1, 0}), 5);
  put(k.Assign("alice", "s1", "GPU-a"), EncodeAssignment({"alice", "s1", "GPU-a", 0, 0}), 4);
  put(k.Share("alice", "s1"), "1048576", 6);
  put(k.Share("alice", "s2"), "2048", 7);
  put(k.Applied("s1"), "7", 7);
  put(k.Tenant("bob"), "garbage", 8);                        // a record this server cannot read
  put(k.Share("alice", "s3"), "12x", 9);                     // not a count
  put("/other/tenants/x", EncodeTenant(Tenant("x")), 10);    // another prefix
  size_t skipped = 0;
  std::string why;
  PoolView v = BuildView(k, kvs, 10, &skipped, &why);
  EXPECT_EQ(skipped, 2u) << why;
  EXPECT_EQ(v.tenants.size(), 1u);
  EXPECT_EQ(v.servers.count("s1"), 1u);
  auto a = v.AssignmentsOf("alice");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].server, "s1") << "a tenant's GPUs are in the order they were assigned";
  EXPECT_EQ(a[1].gpu, 1);
  EXPECT_EQ(v.SharesOf("alice"), 1048576u + 2048u);
  EXPECT_EQ(v.applied.at("s1"), 7);
}

TEST(PoolRecords, PrefixEndAndBase64) {
  EXPECT_EQ(PrefixEnd("/remora/"), "/remora0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  std::string bytes("\x00\x01\xfe\xff key", 8);
  auto back = Base64Decode(Base64Encode(bytes));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, bytes);
  EXPECT_FALSE(Base64Decode("!!!").ok());
}

PoolView ThreeServers() {
  PoolView v;
  v.servers["s1"] = Server("s1", {Gpu(0, "NVIDIA H200", 100), Gpu(1, "NVIDIA H200", 100)});
  v.servers["s2"] = Server("s2", {Gpu(0, "NVIDIA H200", 100), Gpu(1, "NVIDIA H200", 100, 60)});
  v.servers["s3"] = Server("s3", {Gpu(0, "NVIDIA A100", 80)});
  v.tenants["alice"] = Tenant("alice");
  v.tenants["bob"] = Tenant("bob");
  return v;
}

TEST(PoolPlacement, SpreadTakesTheLeastLoadedOnDifferentServers) {
  PoolView v = ThreeServers();
  v.assignments.push_back({"bob", "s1", "GPU-NVIDIA H200-0", 0, 1});
  auto p = Place(v, {"alice", 3, PlacementPolicy::kSpread, "", 0, {}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 3u);
  std::set<std::string> servers;
  for (const auto& a : *p) servers.insert(a.server);
  EXPECT_EQ(servers.size(), 3u) << "one per server while free GPUs tie";
  for (const auto& a : *p) EXPECT_FALSE(a.server == "s1" && a.gpu == 0) << "bob's GPU is the most loaded";
  // Of s2's two, the one with no memory charged.
  for (const auto& a : *p)
    if (a.server == "s2") {
      EXPECT_EQ(a.gpu, 0);
    }
}

TEST(PoolPlacement, PackFillsOneServer) {
  PoolView v = ThreeServers();
  auto p = Place(v, {"alice", 2, PlacementPolicy::kPack, "", 0, {}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].server, (*p)[1].server);
  EXPECT_EQ((*p)[0].server, "s2") << "the busiest server first (60 charged)";
}

TEST(PoolPlacement, ConstraintsAndShortfall) {
  PoolView v = ThreeServers();
  auto a100 = Place(v, {"alice", 1, PlacementPolicy::kSpread, "a100", 0, {}});
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ((*a100)[0].server, "s3");
  auto free90 = Place(v, {"alice", 3, PlacementPolicy::kSpread, "", 90, {}});
  ASSERT_TRUE(free90.ok());
  for (const auto& x : *free90) EXPECT_NE(x.server, "s3") << "80 total";
  EXPECT_FALSE(Place(v, {"alice", 4, PlacementPolicy::kSpread, "", 90, {}}).ok());
  auto only = Place(v, {"alice", 2, PlacementPolicy::kSpread, "", 0, {"s1"}});
  ASSERT_TRUE(only.ok());
  EXPECT_EQ((*only)[0].server, "s1");
  EXPECT_EQ((*only)[1].server, "s1");
  // GPUs the tenant has are not chosen again; a draining server is not chosen.
  v.assignments.push_back({"alice", "s3", "GPU-NVIDIA A100-0", 0, 1});
  v.servers["s2"].health = "draining";
  auto rest = Place(v, {"alice", 2, PlacementPolicy::kSpread, "", 0, {}});
  ASSERT_TRUE(rest.ok());
  for (const auto& x : *rest) EXPECT_EQ(x.server, "s1");
  Status st = Place(v, {"alice", 3, PlacementPolicy::kSpread, "", 0, {}}).status();
  EXPECT_EQ(st.code(), Err::kInvalidValue);
  EXPECT_NE(st.message().find("3 asked"), std::string::npos) << st.message();
  EXPECT_FALSE(Place(v, {"alice", 0, PlacementPolicy::kSpread, "", 0, {}}).ok());
  EXPECT_TRUE(ParsePlacementPolicy("pack").ok());
  EXPECT_FALSE(ParsePlacementPolicy("random").ok());
}

}  // namespace
}  // namespace remora::pool

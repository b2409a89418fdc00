// server/supervisor: GPU probe parsing and the SQLite state store.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "supervisor/gpu_inventory.h"
#include "supervisor/state_store.h"
#include "supervisor/worker_launcher.h"
#include "test_util.h"

namespace remora::server {
namespace {

// ---- ParseProbe ----------------------------------------------------------------------

constexpr const char* kProbe =
    "backend\thost-emulated\t1\n"
    "driver\t13000\n"
    "gpu\t0\t17179869184\te0e1e2e3e4e5e6e7e8e9eaebecedeeef\t0000:80:00.0\tRemora host-emulated GPU 0 (not a GPU)\n"
    "gpu\t1\t85899345920\tf0f1f2f3f4f5f6f7f8f9fafbfcfdfeff\t0000:81:00.0\tNVIDIA H100 80GB HBM3\n";

TEST(ParseProbe, ParsesBackendDriverAndGpus) {
  auto inv = ParseProbe(kProbe);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->backend, "host-emulated");
  EXPECT_TRUE(inv->emulated);
  EXPECT_EQ(inv->driver_version, 13000);
  ASSERT_EQ(inv->gpus.size(), 2u);
  EXPECT_EQ(inv->gpus[0].index, 0);
  EXPECT_EQ(inv->gpus[0].total_memory, 16ull << 30);
  EXPECT_EQ(inv->gpus[0].uuid, "e0e1e2e3e4e5e6e7e8e9eaebecedeeef");
  EXPECT_EQ(inv->gpus[0].pci_bus_id, "0000:80:00.0");
  EXPECT_EQ(inv->gpus[0].name, "Remora host-emulated GPU 0 (not a GPU)") << "names keep their spaces";
  EXPECT_EQ(inv->gpus[1].index, 1);
  EXPECT_EQ(inv->gpus[1].total_memory, 80ull << 30);
  EXPECT_EQ(inv->gpus[1].name, "NVIDIA H100 80GB HBM3");

  EXPECT_EQ(inv->kernel_driver, "") << "the emulated backend has no kernel driver";

  auto cuda = ParseProbe("backend\tcuda\t0\ndriver\t13000\nkernel-driver\t580.159.04\n");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->kernel_driver, "580.159.04");
  EXPECT_FALSE(ParseProbe("backend\tcuda\t0\nkernel-driver\t580 bad\n").ok()) << "only digits and dots";
  EXPECT_EQ(cuda->backend, "cuda");
  EXPECT_FALSE(cuda->emulated);
  EXPECT_TRUE(cuda->gpus.empty()) << "a machine without GPUs is not an error here";
}

TEST(ParseProbe, MpsLinesMarkTheirGpus) {
  auto inv = ParseProbe(std::string(kProbe) + "mps\t1\t1\nmps\t0\t0\n");
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_FALSE(inv->gpus[0].mps);
  EXPECT_TRUE(inv->gpus[1].mps);
  EXPECT_FALSE(ParseProbe(std::string(kProbe) + "mps\t1\tyes\n").ok()) << "only 0 or 1";
}

TEST(ParseProbe, UnknownLineIsAnError) {
  auto inv = ParseProbe(std::string(kProbe) + "warning: something odd\n");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), Err::kInitializationError);
  EXPECT_NE(inv.status().message().find("something odd"), std::string::npos) << inv.status().message();
  // A known keyword with the wrong number of fields is unknown too.
  EXPECT_FALSE(ParseProbe("backend\tcuda\t0\ngpu\t0\t1\n").ok());
  EXPECT_FALSE(ParseProbe("backend\tcuda\n").ok());
}

TEST(ParseProbe, MissingBackendLineIsAnError) {
  auto inv = ParseProbe("driver\t13000\ngpu\t0\t1024\tuuid\t0000:01:00.0\tname\n");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), Err::kInitializationError);
  EXPECT_NE(inv.status().message().find("backend"), std::string::npos) << inv.status().message();
  EXPECT_FALSE(ParseProbe("").ok()) << "a probe that printed nothing";
}

// Numbers that do not parse are a probe error like any other bad line - never an
// exception escaping into the supervisor (which would terminate it).
// DISABLED: ParseProbe uses std::stoi/std::stoull, which throw std::invalid_argument /
// std::out_of_range on such input; nothing catches them. See the report.
TEST(ParseProbe, BadNumbersAreErrorsNotExceptions) {
  for (const char* text : {
           "backend\tcuda\t0\ndriver\tunknown\n",
           "backend\tcuda\t0\ngpu\tzero\t1024\tuuid\tbus\tname\n",
           "backend\tcuda\t0\ngpu\t0\t99999999999999999999999\tuuid\tbus\tname\n",
           "backend\tcuda\t0\ngpu\t0\t\tuuid\tbus\tname\n",
       }) {
    Result<Inventory> inv = Status(Err::kUnknown, "not run");
    EXPECT_NO_THROW(inv = ParseProbe(text)) << text;
    EXPECT_FALSE(inv.ok()) << text;
    EXPECT_EQ(inv.status().code(), Err::kInitializationError) << text;
  }
}

// ---- SQLite state store ----------------------------------------------------------------

TenantRecord Tenant(const std::string& name, std::optional<uint64_t> limit, std::vector<std::string> gpus = {}) {
  TenantRecord t;
  t.name = name;
  t.stored_key = StoredKeyFor(RandomSecret());
  t.memory_limit = limit;
  t.gpu_uuids = std::move(gpus);
  return t;
}

std::unique_ptr<StateStore> Open(const std::string& dir) {
  auto s = OpenSqliteStateStore(dir);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

const TenantRecord* FindTenant(const std::vector<TenantRecord>& all, const std::string& name) {
  for (const auto& t : all)
    if (t.name == name) return &t;
  return nullptr;
}

TEST(StateStore, CreateLoadDeleteTenants) {
  test::TempDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  auto empty = store->LoadTenants();
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  TenantRecord a = Tenant("alpha", 8ull << 30, {"uuid-b", "uuid-a"});
  ASSERT_TRUE(store->CreateTenant(a).ok());
  ASSERT_TRUE(store->CreateTenant(Tenant("beta", std::nullopt)).ok());
  auto all = store->LoadTenants();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  const TenantRecord* la = FindTenant(*all, "alpha");
  ASSERT_NE(la, nullptr);
  EXPECT_EQ(la->stored_key, a.stored_key);
  EXPECT_EQ(la->memory_limit, std::optional<uint64_t>(8ull << 30));
  EXPECT_EQ(la->gpu_uuids, (std::vector<std::string>{"uuid-a", "uuid-b"}));
  EXPECT_GT(la->created_at, 0) << "creation time filled in";
  const TenantRecord* lb = FindTenant(*all, "beta");
  ASSERT_NE(lb, nullptr);
  EXPECT_FALSE(lb->memory_limit.has_value()) << "unlimited stays unlimited";
  EXPECT_TRUE(lb->gpu_uuids.empty());

  ASSERT_TRUE(store->DeleteTenant("alpha").ok());
  Status again = store->DeleteTenant("alpha");
  EXPECT_EQ(again.code(), Err::kInvalidValue);
  all = store->LoadTenants();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].name, "beta");
  // Re-creating a deleted tenant starts clean: its attachments went with it.
  ASSERT_TRUE(store->CreateTenant(Tenant("alpha", std::nullopt)).ok());
  all = store->LoadTenants();
  ASSERT_TRUE(all.ok());
  ASSERT_NE(FindTenant(*all, "alpha"), nullptr);
  EXPECT_TRUE(FindTenant(*all, "alpha")->gpu_uuids.empty());
}

TEST(StateStore, DuplicateCreateIsRefusedAndChangesNothing) {
  test::TempDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  TenantRecord first = Tenant("alpha", 1024, {"g1"});
  ASSERT_TRUE(store->CreateTenant(first).ok());
  Status dup = store->CreateTenant(Tenant("alpha", 2048, {"g2"}));
  EXPECT_EQ(dup.code(), Err::kInvalidValue);
  EXPECT_NE(dup.message().find("already exists"), std::string::npos) << dup.message();
  auto all = store->LoadTenants();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].stored_key, first.stored_key) << "the original token still works";
  EXPECT_EQ((*all)[0].memory_limit, std::optional<uint64_t>(1024));
  EXPECT_EQ((*all)[0].gpu_uuids, std::vector<std::string>{"g1"});
  // The failed transaction was rolled back: the store keeps working.
  EXPECT_TRUE(store->CreateTenant(Tenant("beta", 1)).ok());
}

TEST(StateStore, UpdatesOfUnknownTenantsAreRefused) {
  test::TempDir dir;
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->SetMemoryLimit("ghost", 1).code(), Err::kInvalidValue);
  EXPECT_EQ(store->Attach("ghost", "gpu").code(), Err::kInvalidValue);
  EXPECT_EQ(store->DeleteTenant("ghost").code(), Err::kInvalidValue);
  auto all = store->LoadTenants();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
}

// Limits and attachments survive closing and reopening the store (a server restart).
TEST(StateStore, LimitsAndAttachmentsPersistAcrossReopen) {
  test::TempDir dir;
  {
    auto store = Open(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateTenant(Tenant("alpha", 1ull << 30, {"gpu-0"})).ok());
    ASSERT_TRUE(store->CreateTenant(Tenant("beta", 5ull << 30)).ok());
    ASSERT_TRUE(store->SetMemoryLimit("alpha", 3ull << 30).ok());
    ASSERT_TRUE(store->SetMemoryLimit("beta", std::nullopt).ok());
    ASSERT_TRUE(store->Attach("alpha", "gpu-1").ok());
    ASSERT_TRUE(store->Attach("alpha", "gpu-1").ok()) << "attaching twice is harmless";
    ASSERT_TRUE(store->Attach("beta", "gpu-0").ok());
    ASSERT_TRUE(store->Detach("alpha", "gpu-0").ok());
    ASSERT_TRUE(store->Detach("alpha", "never-attached").ok());
  }
  auto store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  auto all = store->LoadTenants();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  const TenantRecord* a = FindTenant(*all, "alpha");
  const TenantRecord* b = FindTenant(*all, "beta");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->memory_limit, std::optional<uint64_t>(3ull << 30));
  EXPECT_EQ(a->gpu_uuids, std::vector<std::string>{"gpu-1"});
  EXPECT_FALSE(b->memory_limit.has_value());
  EXPECT_EQ(b->gpu_uuids, std::vector<std::string>{"gpu-0"});
}

// Session ids are never reused, even across restarts.
TEST(StateStore, SessionIdsIncreaseStrictlyAcrossReopen) {
  test::TempDir dir;
  uint64_t last = 0;
  for (int open = 0; open < 3; open++) {
    auto store = Open(dir.path());
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 5; i++) {
      auto id = store->NextSessionId();
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      EXPECT_GT(*id, last);
      last = *id;
    }
  }
  EXPECT_GE(last, 15u);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// Whatever is at DIR/state.db that is not a Remora state database stops the server with a
// message naming the file - it must never start with empty state in its place.
TEST(StateStore, GarbageDatabaseIsAnErrorNamingTheFile) {
  for (const std::string& garbage : {std::string(8192, '\x5a'), std::string("hello\n"),
                                     std::string("SQLite format 3") + std::string(1, '\0') + std::string(4000, '\xff')}) {
    test::TempDir dir;
    std::string path = dir.File("state.db");
    WriteFile(path, garbage);
    auto s = OpenSqliteStateStore(dir.path());
    ASSERT_FALSE(s.ok()) << "opened a " << garbage.size() << "-byte garbage file";
    EXPECT_EQ(s.status().code(), Err::kInitializationError);
    EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().message();
    // And the file is left alone for the administrator to inspect.
    std::ifstream f(path, std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(content, garbage);
  }
}

// A state directory that cannot be created is an error, not a silent fallback.
TEST(StateStore, UnusableStateDirectoryIsAnError) {
  test::TempDir dir;
  WriteFile(dir.File("file"), "x");
  auto s = OpenSqliteStateStore(dir.File("file") + "/state");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Err::kInitializationError);
}

// A valid SQLite database of some other program at DIR/state.db is "not a Remora state
// database" (state_store.h) and must be refused like garbage, not adopted and extended
// with Remora's tables.
// DISABLED: Init() runs CREATE TABLE IF NOT EXISTS and inserts a fresh schema_version into
// any SQLite file without a `meta` table, so the foreign database is silently taken over
// and the server starts with empty state. See the report.
TEST(StateStore, ForeignSqliteDatabaseIsRefused) {
  test::TempDir dir;
  std::string path = dir.File("state.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE photos (id INTEGER PRIMARY KEY, data BLOB); INSERT INTO photos VALUES (1, x'00');",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = OpenSqliteStateStore(dir.path());
  ASSERT_FALSE(s.ok()) << "a foreign SQLite database was adopted as Remora state";
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace remora::server

// Workers get a clean environment, but where the administrator put NVIDIA's math libraries
// (REMORA_LIBRARY_PATH) must reach them: without it a worker loaded another cuDNN than the
// one PyTorch was built for, and PyTorch refused it.
TEST(WorkerEnvironment, KeepsOnlyTheDriversLoadersAndLibraryPath) {
  ::setenv("REMORA_LIBRARY_PATH", "/opt/cudnn/lib", 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "0", 1);
  ::setenv("REMORA_TOKEN", "secret", 1);
  ::setenv("PYTHONPATH", "/x", 1);
  auto env = remora::server::WorkerEnvironment();
  auto has = [&](const std::string& v) { return std::find(env.begin(), env.end(), v) != env.end(); };
  EXPECT_TRUE(has("REMORA_LIBRARY_PATH=/opt/cudnn/lib"));
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=0"));
  for (const auto& v : env) {
    EXPECT_FALSE(v.starts_with("REMORA_TOKEN=")) << v;
    EXPECT_FALSE(v.starts_with("PYTHONPATH=")) << v;
  }
  ::unsetenv("REMORA_LIBRARY_PATH");
  ::unsetenv("REMORA_TOKEN");
  ::unsetenv("PYTHONPATH");
}

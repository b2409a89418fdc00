// F1 (docs/SECURITY.md): the module cache cannot be used by one tenant against another -
// no substitution, no overwrite, no membership oracle, no disk fill - against a real
// remora-server (host backend) with hand-built moduleLoad requests.
#include <unistd.h>

#include "security_support.h"

namespace remora::security {
namespace {

class ModuleCacheAttack : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}) {
    ASSERT_TRUE(s_.Start(1, "", std::move(extra)));
    alice_ = s_.CreateTenant("alice");
    bob_ = s_.CreateTenant("bob");
    tiny_ = s_.CreateTenant("tiny", {"--memory", "1MiB"});
  }
  std::unique_ptr<RawSession> Open(const std::string& token) {
    auto r = RawSession::Open(s_.server.Url("tcp"), token);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  std::string Cache() const { return s_.server.state_dir() + "/modules"; }

  TenancyServer s_;
  std::string alice_, bob_, tiny_;
};

// The review's attack: alice uploads her image M under the name (hash) of bob's image V,
// so that bob, asking for V by name, would get M. The server computes the hash itself:
// a name that is not the image's hash is refused and nothing is stored.
TEST_F(ModuleCacheAttack, AnImageUnderAnotherImagesNameIsRefused) {
  Start();
  std::vector<std::byte> v = FakeFatbin(8192, 1), m = FakeFatbin(8192, 2);
  auto alice = Open(alice_);
  ASSERT_TRUE(alice);
  ModuleAnswer a = LoadModule(*alice, ModuleHash(v), &m, m.size());
  EXPECT_EQ(a.error, Err::kInvalidKernelImage) << a.message;
  EXPECT_NE(a.message.find("does not match its hash"), std::string::npos) << a.message;
  EXPECT_EQ(TreeBytes(Cache()), 0u) << "nothing of a refused image may be stored";
  // The same for a 16-byte (XXH3-sized) name: refused outright.
  std::vector<uint8_t> short_hash(16, 0x7f);
  EXPECT_EQ(LoadModule(*alice, short_hash, nullptr, v.size()).error, Err::kInvalidValue);
  // Bob asks for V by name: he must send it himself.
  auto bob = Open(bob_);
  ASSERT_TRUE(bob);
  ModuleAnswer b = LoadModule(*bob, ModuleHash(v), nullptr, v.size());
  EXPECT_EQ(b.error, Err::kSuccess) << b.message;
  EXPECT_TRUE(b.need_image);
}

// What alice loaded neither answers bob (no oracle: he gets needImage, not a handle) nor
// can be instantiated by him without the bytes; alice's own next session is served from her
// cache (repeated runs ship nothing).
TEST_F(ModuleCacheAttack, NoTenantSeesOrUsesAnothersCache) {
  Start();
  std::vector<std::byte> w = FakeFatbin(16384, 3);
  {
    auto alice = Open(alice_);
    ASSERT_TRUE(alice);
    ModuleAnswer first = LoadModule(*alice, ModuleHash(w), nullptr, w.size());
    ASSERT_TRUE(first.need_image) << first.message;
    ModuleAnswer up = LoadModule(*alice, ModuleHash(w), &w, w.size());
    ASSERT_EQ(up.error, Err::kSuccess) << up.message;
    EXPECT_NE(up.handle, 0u);
  }
  EXPECT_EQ(TreeBytes(Cache() + "/alice"), w.size()) << "alice's upload is in alice's cache";
  auto bob = Open(bob_);
  ASSERT_TRUE(bob);
  ModuleAnswer b = LoadModule(*bob, ModuleHash(w), nullptr, w.size());
  EXPECT_EQ(b.error, Err::kSuccess);
  EXPECT_TRUE(b.need_image) << "bob must not learn that alice loaded W, nor get a handle to it";
  EXPECT_EQ(b.handle, 0u);
  auto alice2 = Open(alice_);
  ASSERT_TRUE(alice2);
  ModuleAnswer again = LoadModule(*alice2, ModuleHash(w), nullptr, w.size());
  EXPECT_EQ(again.error, Err::kSuccess);
  EXPECT_FALSE(again.need_image) << "alice's own cache serves her next session";
  EXPECT_NE(again.handle, 0u);
}

// An entry is never replaced: a second upload of the same bytes keeps the first file, and an
// entry whose bytes were changed on disk is not served (the hash is checked on every read).
TEST_F(ModuleCacheAttack, EntriesAreNeverReplacedAndAlwaysVerified) {
  Start();
  std::vector<std::byte> w = FakeFatbin(4096, 5);
  std::string name;
  {
    auto alice = Open(alice_);
    ASSERT_TRUE(alice);
    ASSERT_EQ(LoadModule(*alice, ModuleHash(w), &w, w.size()).error, Err::kSuccess);
  }
  DIR* d = ::opendir((Cache() + "/alice").c_str());
  ASSERT_NE(d, nullptr);
  while (struct dirent* e = ::readdir(d))
    if (std::string(e->d_name).size() > 2) name = e->d_name;
  ::closedir(d);
  ASSERT_FALSE(name.empty());
  std::string path = Cache() + "/alice/" + name;
  struct stat before, after;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  {
    auto alice = Open(alice_);
    ASSERT_TRUE(alice);
    ASSERT_EQ(LoadModule(*alice, ModuleHash(w), &w, w.size()).error, Err::kSuccess);
  }
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "the entry was replaced";
  // Damage it: it must not be served, and the client is asked for the image again.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('X');
  }
  auto alice = Open(alice_);
  ASSERT_TRUE(alice);
  ModuleAnswer a = LoadModule(*alice, ModuleHash(w), nullptr, w.size());
  EXPECT_EQ(a.error, Err::kSuccess);
  EXPECT_TRUE(a.need_image) << "a damaged entry was served";
}

// The review's disk fill: tiny (1 MiB quota) uploaded 4 x 16 MiB images; all were refused,
// yet 64 MiB landed in the cache. Now the image is charged before it is kept, and only a
// loaded image is cached.
TEST_F(ModuleCacheAttack, RefusedImagesFillNoDisk) {
  Start();
  auto tiny = Open(tiny_);
  ASSERT_TRUE(tiny);
  for (int i = 0; i < 4; i++) {
    std::vector<std::byte> junk = FakeFatbin(16 << 20, static_cast<uint8_t>(10 + i));
    ModuleAnswer a = LoadModule(*tiny, ModuleHash(junk), &junk, junk.size());
    EXPECT_EQ(a.error, Err::kMemoryAllocation) << a.message;
  }
  EXPECT_EQ(TreeBytes(Cache()), 0u);
  // The session still works.
  auto r = tiny->Call([](wire::Request::Builder& req) { req.setPing(); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

// Budgets: each tenant's cache and all of them together stay within their sizes (least
// recently used entries go first).
TEST_F(ModuleCacheAttack, CachesStayWithinTheirBudgets) {
  Start({"--module-cache-tenant-size", "1MiB", "--module-cache-size", "1536KiB"});
  for (const std::string* token : {&alice_, &bob_}) {
    auto s = Open(*token);
    ASSERT_TRUE(s);
    for (int i = 0; i < 4; i++) {
      std::vector<std::byte> img = FakeFatbin(400 << 10, static_cast<uint8_t>(40 + i + (token == &bob_) * 10));
      ASSERT_EQ(LoadModule(*s, ModuleHash(img), &img, img.size()).error, Err::kSuccess);
      EXPECT_LE(TreeBytes(Cache() + (token == &alice_ ? "/alice" : "/bob")), 1u << 20);
    }
  }
  // The server-wide bound is applied when sessions end.
  EXPECT_TRUE(Eventually([&] { return TreeBytes(Cache()) <= 1536u << 10; })) << TreeBytes(Cache());
  // An image larger than a tenant's budget is loaded but not kept.
  auto s = Open(alice_);
  std::vector<std::byte> big = FakeFatbin(2 << 20, 99);
  ASSERT_EQ(LoadModule(*s, ModuleHash(big), &big, big.size()).error, Err::kSuccess);
  EXPECT_LE(TreeBytes(Cache() + "/alice"), 1u << 20);
}

// A cache directory left by an older server (one shared directory of files named by XXH3)
// is emptied at start; a deleted tenant's cache goes with it.
TEST_F(ModuleCacheAttack, OldSharedEntriesAndDeletedTenantsLeaveNothing) {
  testing::TempDir dir;
  std::string state = dir.path() + "/state";
  ::mkdir(state.c_str(), 0700);
  ::mkdir((state + "/modules").c_str(), 0700);
  std::ofstream(state + "/modules/7ffcf604aaaaaaaaaaaaaaaaaaaaf2c8.fatbin") << "EVIL KERNELS FROM ALICE";
  ASSERT_TRUE(s_.Start(1, state));
  EXPECT_EQ(TreeBytes(state + "/modules"), 0u);
  std::string carol = s_.CreateTenant("carol");
  {
    auto c = RawSession::Open(s_.server.Url("shm"), carol);
    ASSERT_TRUE(c.ok());
    std::vector<std::byte> img = FakeFatbin(4096, 77);
    ASSERT_EQ(LoadModule(**c, ModuleHash(img), &img, img.size()).error, Err::kSuccess);
  }
  EXPECT_GT(TreeBytes(state + "/modules/carol"), 0u);
  EXPECT_TRUE(Eventually([&] { return s_.Ctl({"tenant", "delete", "carol"}).exit_code == 0; }));
  struct stat st;
  EXPECT_NE(::stat((state + "/modules/carol").c_str(), &st), 0) << "the deleted tenant's cache is gone";
  s_.server.Stop();
}

// The driver's JIT cache (worker/main.cc, UseTenantJitCache): each tenant's sessions compile
// into a directory of that tenant's module cache, the worker user's alone - one tenant's
// compiled kernels are never another's to read or to plant. (The host backend compiles
// nothing; that the driver uses the directory was measured on the GPU, docs/PERFORMANCE.md.)
TEST_F(ModuleCacheAttack, EachTenantsSessionsGetAJitCacheOfTheirOwn) {
  Start();
  for (const auto& [name, token] : {std::pair{"alice", alice_}, std::pair{"bob", bob_}}) {
    auto r = Open(token);
    ASSERT_TRUE(r);
    std::vector<std::byte> img = FakeFatbin(4096, 5);
    ASSERT_EQ(LoadModule(*r, ModuleHash(img), &img, img.size()).error, Err::kSuccess);  // the worker runs
    std::string jit = Cache() + "/" + name + "/jit";
    struct stat st;
    ASSERT_EQ(::stat(jit.c_str(), &st), 0) << jit;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u) << jit << ": the worker user's alone";
  }
}

}  // namespace
}  // namespace remora::security

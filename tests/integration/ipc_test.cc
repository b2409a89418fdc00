// CUDA IPC between sessions of one server, with real processes (host-emulated backend):
// two applications of one tenant share memory and an event by IPC handle (data checked, the
// consumer's stream ordered after the producer's work); another tenant, a forged handle, a
// guessed one and a stale one are refused (and logged); an exporter's free while the memory
// is open elsewhere, an importer killed with SIGKILL, an exporter killed with SIGKILL and one
// that exits while its memory is open each leave the quota ledger exact (the exporter charged until the last importer closes).
#include <signal.h>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class Ipc : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(s_.Start());
    dir_ = s_.server.state_dir();
  }
  void TearDown() override { EXPECT_EQ(s_.server.Stop(), 0) << s_.server.Log(); }

  std::unique_ptr<MemShell> Shell(const std::string& token, const char* transport = "shm",
                                  const char* app = "app_ipc_shell") {
    auto env = s_.Env(transport, token);
    if (getenv("IPC_TEST_CLIENT_LOG")) env["REMORA_LOG"] = getenv("IPC_TEST_CLIENT_LOG");
    auto sh = std::make_unique<MemShell>(dir_, env, app);
    EXPECT_TRUE(sh->ok());
    return sh;
  }
  // The tenant's charged bytes, as the admin API reads the ledger.
  uint64_t Used(const std::string& tenant) { return s_.MemoryUsed(tenant); }
  static std::string Arg(const std::string& answer) {  // "ok X" -> "X"
    return answer.rfind("ok ", 0) == 0 ? answer.substr(3) : "";
  }

  // Whether the server runs the host-emulated backend (REMORA_TEST_BACKEND names another).
  static bool backend_is_host() {
    const char* b = std::getenv("REMORA_TEST_BACKEND");
    return b == nullptr || *b == '\0' || std::string(b) == "host";
  }
  // Polls the server's log for `text`.
  bool LogSays(const std::string& text) {
    return Eventually([&] { return s_.server.Log().find(text) != std::string::npos; });
  }

  // The exporter (`producer` program) shares memory and an event with the importer's.
  void ShareMemoryAndAnEvent(const std::string& token, const char* transport, const char* producer, const char* consumer) {
    auto a = Shell(token, transport, producer), b = Shell(token, transport, consumer);
    std::string block = Arg(a->Do("alloc 4"));
    ASSERT_FALSE(block.empty());
    ASSERT_EQ(a->Do("fill " + block + " 7"), "ok");
    std::string handle = Arg(a->Do("export " + block));
    ASSERT_EQ(handle.size(), 128u);
    EXPECT_EQ(Arg(a->Do("export " + block)), handle) << "the same allocation, the same handle";
    std::string opened = Arg(b->Do("open " + handle + " 4"));
    ASSERT_FALSE(opened.empty());
    EXPECT_EQ(b->Do("expect " + opened + " 7"), "ok") << "the importer reads the exporter's bytes";
    ASSERT_EQ(b->Do("fill " + opened + " 9"), "ok");
    EXPECT_EQ(a->Do("expect " + block + " 9"), "ok") << "and the exporter reads the importer's";
    EXPECT_EQ(b->Do("free " + opened), "err cudaErrorInvalidValue") << "opened memory is closed, not freed";

    // The event: the producer fills after 300 ms of GPU work and records; the consumer's
    // stream waits for the record, then reads.
    std::string pev = Arg(a->Do("event")), ps = Arg(a->Do("stream")), cs = Arg(b->Do("stream"));
    std::string ehandle = Arg(a->Do("eexport " + pev));
    ASSERT_EQ(ehandle.size(), 128u);
    std::string cev = Arg(b->Do("eopen " + ehandle));
    ASSERT_FALSE(cev.empty());
    ASSERT_EQ(a->Do("busy " + ps + " 300000"), "ok");
    ASSERT_EQ(a->Do("fillasync " + block + " 42 " + ps), "ok");
    ASSERT_EQ(a->Do("record " + pev + " " + ps), "ok");
    // (On the host-emulated backend "busy" runs for 300 ms; on a GPU it is an empty kernel.)
    if (backend_is_host()) {
      EXPECT_EQ(b->Do("query " + cev), "err cudaErrorNotReady") << "the producer's work is still running";
    }
    ASSERT_EQ(b->Do("wait " + cs + " " + cev), "ok");
    EXPECT_EQ(b->Do("expectasync " + opened + " 42 " + cs), "ok") << "the consumer's stream ran after the record";
    EXPECT_EQ(b->Do("evsync " + cev), "ok");
    EXPECT_EQ(b->Do("query " + cev), "ok");

    EXPECT_EQ(b->Do("close " + opened), "ok");
    EXPECT_EQ(a->Do("free " + block), "ok");
    a->Do("quit");
    b->Do("quit");
    // (The kernel's module stays charged while the sessions live.)
    EXPECT_TRUE(Eventually([&] { return Used("t") == 0; })) << Used("t");
    if (HasFailure()) std::printf("%s\n%s\n", s_.server.Log().c_str(), b->process().Output().c_str());
  }

  TenancyServer s_;
  std::string dir_;
};

TEST_F(Ipc, TwoProcessesOfOneTenantShareMemoryAndAnEvent) {
  std::string token = s_.CreateTenant("t");
  for (const char* transport : {"shm", "tcp"}) {
    SCOPED_TRACE(transport);
    ShareMemoryAndAnEvent(token, transport, "app_ipc_shell", "app_ipc_shell");
  }
}

// Programs linked with nvcc's default static runtime (issue 15) reach IPC through the driver
// facade (cuIpc*): with each other and with programs of the shared runtime.
TEST_F(Ipc, StaticRuntimeProgramsShareWithEitherRuntime) {
  std::string token = s_.CreateTenant("t");
  SCOPED_TRACE("static to shared");
  ShareMemoryAndAnEvent(token, "shm", "app_static_ipc_shell", "app_ipc_shell");
  SCOPED_TRACE("shared to static");
  ShareMemoryAndAnEvent(token, "shm", "app_ipc_shell", "app_static_ipc_shell");
  SCOPED_TRACE("static to static");
  ShareMemoryAndAnEvent(token, "tcp", "app_static_ipc_shell", "app_static_ipc_shell");
}

TEST_F(Ipc, AnotherTenantAForgedHandleAndAStaleOneAreRefused) {
  std::string ta = s_.CreateTenant("ta"), tb = s_.CreateTenant("tb");
  auto a = Shell(ta), a2 = Shell(ta), b = Shell(tb);
  std::string block = Arg(a->Do("alloc 1"));
  std::string handle = Arg(a->Do("export " + block));
  ASSERT_EQ(handle.size(), 128u);
  EXPECT_EQ(b->Do("open " + handle + " 1"), "err cudaErrorInvalidResourceHandle");
  EXPECT_TRUE(LogSays("to tenant 'tb'")) << s_.server.Log();
  // The nonce altered (one bit): a guess of the right export with the wrong secret.
  std::string forged = handle;
  forged[70] = forged[70] == '0' ? '1' : '0';
  EXPECT_EQ(a2->Do("open " + forged + " 1"), "err cudaErrorInvalidResourceHandle");
  EXPECT_TRUE(LogSays("the nonce does not match")) << s_.server.Log();
  // Made up from nothing; and the session's own handle (CUDA refuses that too).
  EXPECT_EQ(a2->Do("open " + std::string(128, '5') + " 1"), "err cudaErrorInvalidResourceHandle");
  EXPECT_NE(a->Do("open " + handle + " 1").rfind("err ", 0), std::string::npos);
  std::string ev = Arg(a->Do("event"));
  std::string eh = Arg(a->Do("eexport " + ev));
  EXPECT_EQ(b->Do("eopen " + eh), "err cudaErrorInvalidResourceHandle");
  EXPECT_EQ(a2->Do("open " + eh + " 1"), "err cudaErrorInvalidResourceHandle") << "an event handle is not memory";
  // An exported event destroyed by its exporter: its handle opens nothing more, while an
  // event opened before stays usable.
  std::string ev2 = Arg(a->Do("event"));
  std::string eh2 = Arg(a->Do("eexport " + ev2));
  ASSERT_EQ(eh2.size(), 128u);
  std::string opened_ev = Arg(a2->Do("eopen " + eh2));
  ASSERT_FALSE(opened_ev.empty());
  EXPECT_EQ(a->Do("edestroy " + ev2), "ok");
  EXPECT_EQ(a2->Do("eopen " + eh2), "err cudaErrorInvalidResourceHandle") << "a destroyed event's handle";
  EXPECT_EQ(a2->Do("query " + opened_ev), "ok") << "the event opened before the destruction";
  // Freed with nobody holding it: the handle is dead.
  EXPECT_EQ(a->Do("free " + block), "ok");
  EXPECT_EQ(a2->Do("open " + handle + " 1"), "err cudaErrorInvalidResourceHandle");
  EXPECT_TRUE(Eventually([&] { return Used("ta") == 0 && Used("tb") == 0; }));
  for (auto* sh : {a.get(), a2.get(), b.get()}) sh->Do("quit");
}

TEST_F(Ipc, ExporterFreeWhileOpenIsDeferredAndChargedUntilTheLastClose) {
  std::string token = s_.CreateTenant("t", {"--memory", "64MiB"});
  auto a = Shell(token), b = Shell(token), c = Shell(token);
  std::string block = Arg(a->Do("alloc 32"));
  ASSERT_EQ(a->Do("fill " + block + " 5"), "ok");
  std::string handle = Arg(a->Do("export " + block));
  std::string ob = Arg(b->Do("open " + handle + " 32")), oc = Arg(c->Do("open " + handle + " 32"));
  ASSERT_FALSE(ob.empty());
  ASSERT_FALSE(oc.empty());
  EXPECT_EQ(Used("t"), 32 * kMiB) << "charged once, to the exporter";
  EXPECT_EQ(a->Do("free " + block), "ok");
  EXPECT_EQ(Used("t"), 32 * kMiB) << "freed while open elsewhere: still charged";
  EXPECT_EQ(b->Do("expect " + ob + " 5"), "ok") << "and still valid for its importers";
  EXPECT_EQ(b->Do("alloc 48"), "err cudaErrorMemoryAllocation") << "the quota still counts it";
  EXPECT_EQ(b->Do("close " + ob), "ok");
  EXPECT_EQ(Used("t"), 32 * kMiB);
  EXPECT_EQ(c->Do("expect " + oc + " 5"), "ok");
  EXPECT_EQ(c->Do("close " + oc), "ok");
  EXPECT_TRUE(Eventually([&] { return Used("t") == 0; })) << "the last close frees it: " << Used("t");
  EXPECT_TRUE(LogSays("freed IPC export")) << s_.server.Log();
  for (auto* sh : {a.get(), b.get(), c.get()}) sh->Do("quit");
}

TEST_F(Ipc, AKilledImporterClosesItsOpensAndAKilledExporterStaysChargedUntilTheyClose) {
  std::string token = s_.CreateTenant("t");
  {
    // Importer SIGKILLed after the exporter freed: its open is closed, the deferred free happens.
    auto a = Shell(token), b = Shell(token);
    std::string block = Arg(a->Do("alloc 16"));
    std::string handle = Arg(a->Do("export " + block));
    ASSERT_FALSE(Arg(b->Do("open " + handle + " 16")).empty());
    ASSERT_EQ(a->Do("free " + block), "ok");
    EXPECT_EQ(Used("t"), 16 * kMiB);
    ::kill(b->process().pid(), SIGKILL);
    EXPECT_TRUE(Eventually([&] { return Used("t") == 0; })) << Used("t");
    a->Do("quit");
  }
  {
    // Exporter SIGKILLed while its memory is open: the bytes stay charged (the worker's slot
    // is kept) and the memory readable until the importer closes it.
    auto a = Shell(token), b = Shell(token);
    std::string block = Arg(a->Do("alloc 8")), other = Arg(a->Do("alloc 4"));
    ASSERT_EQ(a->Do("fill " + block + " 3"), "ok");
    std::string handle = Arg(a->Do("export " + block));
    std::string ob = Arg(b->Do("open " + handle + " 8"));
    ASSERT_FALSE(ob.empty());
    EXPECT_EQ(Used("t"), 12 * kMiB);
    ::kill(a->process().pid(), SIGKILL);
    EXPECT_TRUE(Eventually([&] { return Used("t") == 8 * kMiB; })) << "only the open bytes stay: " << Used("t");
    EXPECT_EQ(b->Do("expect " + ob + " 3"), "ok");
    EXPECT_EQ(b->Do("close " + ob), "ok");
    EXPECT_TRUE(Eventually([&] { return Used("t") == 0; })) << Used("t");
    b->Do("quit");
  }
  {
    // Exporter exits normally while its memory is open: its worker frees the rest and holds
    // that memory (charged) until the importer closes it, then ends.
    auto a = Shell(token), b = Shell(token);
    std::string block = Arg(a->Do("alloc 8")), other = Arg(a->Do("alloc 4"));
    ASSERT_EQ(a->Do("fill " + block + " 6"), "ok");
    std::string ob = Arg(b->Do("open " + Arg(a->Do("export " + block)) + " 8"));
    ASSERT_FALSE(ob.empty());
    EXPECT_EQ(a->Do("quit"), "bye");
    EXPECT_TRUE(Eventually([&] { return Used("t") == 8 * kMiB; })) << Used("t");
    EXPECT_TRUE(LogSays("kept until they close them"));
    EXPECT_EQ(b->Do("expect " + ob + " 6"), "ok");
    EXPECT_EQ(b->Do("close " + ob), "ok");
    EXPECT_TRUE(Eventually([&] { return Used("t") == 0; })) << Used("t");
    b->Do("quit");
  }
}

// Physical memory of the virtual memory API shared by POSIX descriptor
// (cuMemExportToShareableHandle / cuMemImportFromShareableHandle), as PyTorch's expandable
// segments share it: data both ways, other tenants and made-up descriptors refused, the
// exporter charged until the last importer lets go, a killed importer letting go; programs
// of the shared and of the static runtime alike.
TEST_F(Ipc, PhysicalMemorySharedByShareableHandle) {
  std::string token = s_.CreateTenant("t", {"--memory", "64MiB"}), other = s_.CreateTenant("u");
  for (const char* transport : {"shm", "tcp"}) {
    SCOPED_TRACE(transport);
    // Over tcp the exporter is the static-runtime program (its calls reach the facade).
    bool tcp = std::string(transport) == "tcp";
    auto a = Shell(token, transport, tcp ? "app_static_ipc_shell" : "app_ipc_shell"), b = Shell(token, transport),
         c = Shell(other, transport);
    std::string block = Arg(a->Do("vcreate 32"));
    ASSERT_FALSE(block.empty());
    ASSERT_EQ(a->Do("fill " + block + " 7"), "ok");
    std::string path = Arg(a->Do("vexport " + block));
    ASSERT_EQ(path.rfind("/proc/", 0), 0u) << path;
    std::string opened = Arg(b->Do("vimport " + path + " 32"));
    ASSERT_FALSE(opened.empty());
    EXPECT_EQ(b->Do("expect " + opened + " 7"), "ok") << "the importer reads the exporter's bytes";
    ASSERT_EQ(b->Do("fill " + opened + " 9"), "ok");
    EXPECT_EQ(a->Do("expect " + block + " 9"), "ok") << "and the exporter reads the importer's";
    EXPECT_EQ(Used("t"), 32 * kMiB) << "charged once, to the exporter";
    EXPECT_EQ(c->Do("vimport " + path + " 32"), "err CUDA_ERROR_INVALID_HANDLE") << "another tenant";
    EXPECT_TRUE(LogSays("not to tenant 'u'")) << s_.server.Log();
    EXPECT_EQ(c->Do("vimport /proc/self/exe 32"), "err CUDA_ERROR_INVALID_VALUE") << "not a shareable handle";
    // Released and unmapped by its exporter: still the importer's, still charged.
    EXPECT_EQ(a->Do("vrelease " + block), "ok");
    EXPECT_EQ(Used("t"), 32 * kMiB);
    EXPECT_EQ(b->Do("expect " + opened + " 9"), "ok");
    EXPECT_EQ(b->Do("alloc 48"), "err cudaErrorMemoryAllocation") << "the quota still counts it";
    EXPECT_EQ(b->Do("vrelease " + opened), "ok");
    EXPECT_TRUE(Eventually([&] { return Used("t") == 0; })) << "the last importer let go: " << Used("t");

    // An importer killed while it holds the memory lets go of it.
    block = Arg(a->Do("vcreate 16"));
    path = Arg(a->Do("vexport " + block));
    ASSERT_FALSE(Arg(b->Do("vimport " + path + " 16")).empty());
    EXPECT_EQ(a->Do("vrelease " + block), "ok");
    EXPECT_EQ(Used("t"), 16 * kMiB);
    ::kill(b->process().pid(), SIGKILL);
    EXPECT_TRUE(Eventually([&] { return Used("t") == 0; })) << Used("t");
    EXPECT_EQ(a->Do("vimport " + path + " 16"), "err CUDA_ERROR_INVALID_HANDLE") << "a released export is dead";
    for (auto* sh : {a.get(), c.get()}) sh->Do("quit");
  }
}

// Memory pools shared between processes (cudaMemPoolExportToShareableHandle and
// ImportFromShareableHandle, cudaMemPoolExportPointer and ImportPointer): data both ways; an
// imported pool allocates nothing of its own; a pointer opens only into an import of its own
// pool; other tenants refused; the exporter's stream-ordered free while imported deferred and
// charged until the importer frees it.
TEST_F(Ipc, MemoryPoolsSharedBetweenProcesses) {
  std::string token = s_.CreateTenant("t", {"--memory", "64MiB"}), other = s_.CreateTenant("u");
  for (const char* transport : {"shm", "tcp"}) {
    SCOPED_TRACE(transport);
    // Over tcp the importer is the static-runtime program (its calls reach the facade).
    bool tcp = std::string(transport) == "tcp";
    auto a = Shell(token, transport), b = Shell(token, transport, tcp ? "app_static_ipc_shell" : "app_ipc_shell"),
         c = Shell(other, transport);
    std::string pool = Arg(a->Do("pcreate"));
    ASSERT_FALSE(pool.empty());
    std::string block = Arg(a->Do("palloc " + pool + " 8"));
    ASSERT_FALSE(block.empty());
    ASSERT_EQ(a->Do("fill " + block + " 5"), "ok");
    std::string path = Arg(a->Do("pexport " + pool));
    ASSERT_EQ(path.rfind("/proc/", 0), 0u) << path;
    std::string data = Arg(a->Do("pexportptr " + block));
    ASSERT_EQ(data.size(), 128u);
    std::string bpool = Arg(b->Do("pimport " + path));
    ASSERT_FALSE(bpool.empty());
    std::string opened = Arg(b->Do("pimportptr " + bpool + " " + data + " 8"));
    ASSERT_FALSE(opened.empty());
    EXPECT_EQ(b->Do("expect " + opened + " 5"), "ok") << "the importer reads the exporter's bytes";
    ASSERT_EQ(b->Do("fill " + opened + " 6"), "ok");
    EXPECT_EQ(a->Do("expect " + block + " 6"), "ok") << "and the exporter reads the importer's";
    EXPECT_EQ(Used("t"), 8 * kMiB) << "charged once, to the exporter";
    EXPECT_EQ(b->Do("palloc " + bpool + " 1"), "err cudaErrorInvalidValue") << "an imported pool allocates nothing";
    EXPECT_EQ(c->Do("pimport " + path), "err cudaErrorInvalidResourceHandle") << "another tenant";
    EXPECT_EQ(c->Do("pimport /proc/self/exe"), "err cudaErrorInvalidValue") << "not a shareable handle";
    // An allocation of another pool does not open into this pool's import.
    std::string pool2 = Arg(a->Do("pcreate"));
    std::string block2 = Arg(a->Do("palloc " + pool2 + " 2"));
    std::string data2 = Arg(a->Do("pexportptr " + block2));
    ASSERT_EQ(data2.size(), 128u);
    EXPECT_EQ(b->Do("pimportptr " + bpool + " " + data2 + " 2"), "err cudaErrorInvalidValue");
    EXPECT_EQ(a->Do("pfree " + block2), "ok");
    // cudaMallocAsync from the device's current pool, set to the shared one: shareable too.
    ASSERT_EQ(a->Do("pcurrent " + pool), "ok");
    std::string block3 = Arg(a->Do("palloc 0 1"));
    ASSERT_EQ(a->Do("fill " + block3 + " 3"), "ok");
    std::string data3 = Arg(a->Do("pexportptr " + block3));
    ASSERT_EQ(data3.size(), 128u);
    std::string opened3 = Arg(b->Do("pimportptr " + bpool + " " + data3 + " 1"));
    ASSERT_FALSE(opened3.empty());
    EXPECT_EQ(b->Do("expect " + opened3 + " 3"), "ok");
    EXPECT_EQ(b->Do("pfree " + opened3), "ok");
    EXPECT_EQ(a->Do("pfree " + block3), "ok");
    // (A pool's freed memory stays charged while the pool keeps it, as the next allocation
    // finds out: the emulated pools keep nothing, a GPU's may keep some.)
    std::string probe = Arg(a->Do("alloc 1"));
    EXPECT_EQ(a->Do("free " + probe), "ok");
    uint64_t charged = Used("t");
    EXPECT_GE(charged, 8 * kMiB);
    if (backend_is_host()) {
      EXPECT_EQ(charged, 8 * kMiB);
    }
    // Freed by its exporter (stream-ordered) while imported: kept and charged until the
    // importer frees its pointer.
    EXPECT_EQ(a->Do("pfree " + block), "ok");
    EXPECT_EQ(Used("t"), charged);
    EXPECT_EQ(b->Do("expect " + opened + " 6"), "ok");
    EXPECT_EQ(b->Do("pfree " + opened), "ok");
    EXPECT_TRUE(Eventually([&] { return Used("t") == 0; })) << "the importer's free let it go: " << Used("t");
    EXPECT_EQ(b->Do("pimportptr " + bpool + " " + data + " 8"), "err cudaErrorInvalidResourceHandle")
        << "a freed allocation's export is dead";
    for (auto* sh : {a.get(), b.get(), c.get()}) sh->Do("quit");
  }
}

}  // namespace
}  // namespace remora::testing

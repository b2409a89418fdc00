// IpcRegistry (server/supervisor/ipc_registry.h): the capabilities of CUDA IPC between
// sessions - who may open what, of which kind, and who is charged for memory open elsewhere.
#include "supervisor/ipc_registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace remora::server {
namespace {

IpcParty Party(pid_t pid, const char* tenant, uint32_t slot = 0) {
  IpcParty p;
  p.pid = pid;
  p.session = static_cast<uint64_t>(pid);
  p.tenant = tenant;
  p.ledger_slot = slot;
  return p;
}

IpcHandle ExportOf(IpcRegistry& r, const IpcParty& who, IpcKind kind, uint64_t size, uint64_t* id) {
  IpcExportRequest req;
  req.kind = kind;
  req.gpu = 1;
  req.size = size;
  std::string why;
  auto h = r.Export(who, std::move(req), id, &why);
  EXPECT_TRUE(h.ok()) << why;
  return h.ok() ? *h : IpcHandle{};
}

// An export of `kind` that keeps a descriptor (the host backend's memory file): OK or why not.
Result<IpcHandle> ExportWithFd(IpcRegistry& r, const IpcParty& who, IpcKind kind, std::string* why) {
  IpcExportRequest req;
  req.kind = kind;
  req.fd = Fd(::dup(0));
  uint64_t id = 0;
  why->clear();
  return r.Export(who, std::move(req), &id, why);
}

// Issue 40, N1: per session, per tenant and, for exports that keep a descriptor, a share of
// the supervisor's descriptors (half of it at most for one tenant); CUDA_ERROR_OUT_OF_MEMORY
// past each, and everything counted back when exports go.
TEST(IpcRegistry, ExportsAreBoundedPerSessionTenantAndDescriptors) {
  IpcRegistry r;
  IpcLimits l;
  l.per_session = 3;
  l.per_tenant = 5;
  l.descriptors = 8;
  r.SetLimits(l);
  IpcParty a = Party(10, "t"), b = Party(11, "t"), c = Party(12, "u"), d = Party(13, "v");
  std::string why;
  for (int i = 0; i < 3; i++) ASSERT_TRUE(ExportWithFd(r, a, IpcKind::kEvent, &why).ok()) << why;
  auto refused = ExportWithFd(r, a, IpcKind::kEvent, &why);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().raw(), kCuOutOfMemory);
  EXPECT_NE(why.find("ipc-exports"), std::string::npos) << why;
  // The same tenant's second session: one more keeps a descriptor (4 = half of 8), then none.
  EXPECT_TRUE(ExportWithFd(r, b, IpcKind::kEvent, &why).ok()) << why;
  EXPECT_FALSE(ExportWithFd(r, b, IpcKind::kEvent, &why).ok());
  EXPECT_NE(why.find("share of the server's descriptor limit"), std::string::npos) << why;
  // Without a descriptor (the cuda backend's memory and events) up to the tenant's bound.
  uint64_t id = 0;
  IpcExportRequest plain;
  plain.kind = IpcKind::kMemory;
  plain.size = 4096;
  EXPECT_TRUE(r.Export(b, std::move(plain), &id, &why).ok()) << why;
  IpcExportRequest more;
  EXPECT_FALSE(r.Export(b, std::move(more), &id, &why).ok());
  EXPECT_NE(why.find("--ipc-exports-per-tenant"), std::string::npos) << why;
  EXPECT_EQ(r.TenantExports("t"), 5u);
  // Other tenants: their own shares, until the server's descriptors are used up.
  for (int i = 0; i < 3; i++) EXPECT_TRUE(ExportWithFd(r, c, IpcKind::kPool, &why).ok()) << why;
  EXPECT_TRUE(ExportWithFd(r, d, IpcKind::kPool, &why).ok()) << why;
  EXPECT_EQ(r.DescriptorExports(), 8u);
  EXPECT_FALSE(ExportWithFd(r, d, IpcKind::kPool, &why).ok());
  EXPECT_NE(why.find("the server holds 8"), std::string::npos) << why;
  // A session's end gives its exports back (none was open elsewhere).
  (void)r.SessionEnded(a.pid);
  EXPECT_EQ(r.TenantExports("t"), 2u);
  EXPECT_EQ(r.DescriptorExports(), 5u);
  EXPECT_TRUE(ExportWithFd(r, d, IpcKind::kPool, &why).ok()) << why;
  // An export open elsewhere when its exporter ends stays counted until it is closed.
  IpcParty e = Party(14, "w"), f = Party(15, "w");
  auto h = ExportWithFd(r, e, IpcKind::kMemory, &why);
  ASSERT_TRUE(h.ok()) << why;
  auto o = r.Open(f, IpcKind::kMemory, *h, &why);
  ASSERT_TRUE(o.ok()) << why;
  (void)r.SessionEnded(e.pid);
  EXPECT_EQ(r.TenantExports("w"), 1u);
  (void)r.Close(f.pid, o->export_id);
  EXPECT_EQ(r.TenantExports("w"), 0u);
}

TEST(IpcRegistry, OpensNeedTheTenantTheKindAndTheNonce) {
  IpcRegistry r;
  IpcParty a = Party(10, "t"), b = Party(11, "t"), c = Party(12, "u");
  uint64_t id = 0;
  IpcHandle h = ExportOf(r, a, IpcKind::kPhysical, 4096, &id);
  std::string why;
  EXPECT_FALSE(r.Open(c, IpcKind::kPhysical, h, &why).ok());
  EXPECT_NE(why.find("tenant 'u'"), std::string::npos) << why;
  EXPECT_FALSE(r.Open(b, IpcKind::kMemory, h, &why).ok()) << "a physical export is not cudaMalloc memory";
  EXPECT_FALSE(r.Open(b, IpcKind::kPool, h, &why).ok());
  IpcHandle forged = h;
  forged[30] ^= 1;
  EXPECT_FALSE(r.Open(b, IpcKind::kPhysical, forged, &why).ok());
  auto o = r.Open(b, IpcKind::kPhysical, h, &why);
  ASSERT_TRUE(o.ok()) << why;
  EXPECT_EQ(o->export_id, id);
  EXPECT_EQ(o->size, 4096u);
  EXPECT_EQ(o->gpu, 1);
}

TEST(IpcRegistry, OnlyShareableHandlesOpenInTheirOwnSession) {
  IpcRegistry r;
  IpcParty a = Party(10, "t");
  uint64_t mem = 0, phys = 0;
  IpcHandle hm = ExportOf(r, a, IpcKind::kMemory, 4096, &mem);
  IpcHandle hp = ExportOf(r, a, IpcKind::kPhysical, 4096, &phys);
  std::string why;
  EXPECT_FALSE(r.Open(a, IpcKind::kMemory, hm, &why).ok()) << "CUDA lets no process open its own IPC handle";
  EXPECT_TRUE(r.Open(a, IpcKind::kPhysical, hp, &why).ok()) << "the driver imports a process's own descriptor";
}

TEST(IpcRegistry, MemoryOpenElsewhereStaysChargedToItsExporter) {
  IpcRegistry r;
  IpcParty a = Party(10, "t", 3), b = Party(11, "t");
  uint64_t pool = 0, ptr = 0;
  IpcHandle hpool = ExportOf(r, a, IpcKind::kPool, 0, &pool);
  IpcHandle hptr = ExportOf(r, a, IpcKind::kPoolPointer, 1 << 20, &ptr);
  std::string why;
  ASSERT_TRUE(r.Open(b, IpcKind::kPool, hpool, &why).ok());
  ASSERT_TRUE(r.Open(b, IpcKind::kPoolPointer, hptr, &why).ok());
  // The exporter frees the pointer while it is open: revoked, kept until the close.
  EXPECT_EQ(r.Unexport(a.pid, ptr), 1);
  EXPECT_FALSE(r.Open(Party(12, "t"), IpcKind::kPoolPointer, hptr, &why).ok()) << "revoked";
  auto actions = r.Close(b.pid, ptr);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].kind, IpcAction::Kind::kRelease);
  EXPECT_EQ(actions[0].pid, a.pid);
  // A pool holds no memory of its own; a pointer of it does.
  hptr = ExportOf(r, a, IpcKind::kPoolPointer, 2 << 20, &ptr);
  ASSERT_TRUE(r.Open(b, IpcKind::kPoolPointer, hptr, &why).ok());
  auto bytes = r.OpenBytesOf(a.pid);
  EXPECT_EQ(bytes[1], uint64_t{2} << 20);
  // The exporter dies: the open bytes stay in its slot until the importer closes them.
  EXPECT_TRUE(r.SessionEnded(a.pid).empty());
  actions = r.Close(b.pid, ptr);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].kind, IpcAction::Kind::kUncharge);
  EXPECT_EQ(actions[0].ledger_slot, 3u);
  EXPECT_EQ(actions[0].bytes, uint64_t{2} << 20);
}

TEST(IpcRegistry, UnknownWireKindsAreNotKinds) {
  for (uint32_t k = 0; k < 5; k++) EXPECT_TRUE(IpcKindOf(k).has_value()) << k;
  EXPECT_FALSE(IpcKindOf(5).has_value());
  EXPECT_FALSE(IpcKindOf(255).has_value());
}

}  // namespace
}  // namespace remora::server

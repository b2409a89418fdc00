// IpcRegistry (server/supervisor/ipc_registry.h): the capabilities of CUDA IPC between
// sessions - who may open what, of which kind, and who is charged for memory open elsewhere.
#include "supervisor/ipc_registry.h"

#include <gtest/gtest.h>

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
  return r.Export(who, std::move(req), id);
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

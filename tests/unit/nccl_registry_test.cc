// NcclRegistry (server/supervisor/nccl_registry.h): capabilities resolve only for their tenant
// and with their nonce; a member that ends tells the others once, one that left tells nobody;
// remote members by link; a link that goes down ends its members on both sides.
#include "supervisor/nccl_registry.h"

#include <gtest/gtest.h>

namespace remora::server {
namespace {

NcclIdBytes Real(uint8_t v) {
  NcclIdBytes r{};
  r.fill(v);
  return r;
}

TEST(NcclRegistry, ACapabilityResolvesForItsTenantOnly) {
  NcclRegistry reg(0x1234, "10.0.0.1:7100");
  NcclMember creator{0x1234, 1, 101, 0};
  NcclClique clique;
  auto cap = reg.Register(creator, "alice", Real(7), &clique);
  ASSERT_TRUE(cap.ok());
  EXPECT_EQ(clique.server, 0x1234u);
  EXPECT_NE(*cap, Real(7)) << "the real id never leaves the server";
  auto parsed = NcclRegistry::Parse(*cap);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->server, 0x1234u);
  EXPECT_EQ(parsed->number, clique.id);
  EXPECT_EQ(parsed->address, "10.0.0.1:7100");

  std::string why;
  auto real = reg.Resolve(*parsed, "alice", NcclMember{0x1234, 2, 102, 0}, &why);
  ASSERT_TRUE(real) << why;
  EXPECT_EQ(*real, Real(7));
  EXPECT_FALSE(reg.Resolve(*parsed, "bob", NcclMember{0x1234, 3, 103, 0}, &why));
  EXPECT_EQ(why, "it belongs to another tenant");
  NcclCapability forged = *parsed;
  forged.nonce[3] ^= 1;
  EXPECT_FALSE(reg.Resolve(forged, "alice", NcclMember{0x1234, 3, 103, 0}, &why));
  EXPECT_NE(why.find("nonce"), std::string::npos);
  NcclCapability other = *parsed;
  other.number += 99;
  EXPECT_FALSE(reg.Resolve(other, "alice", NcclMember{0x1234, 3, 103, 0}, &why));
  NcclIdBytes garbage = Real(1);
  EXPECT_FALSE(NcclRegistry::Parse(garbage)) << "not a capability";
}

TEST(NcclRegistry, AMemberThatEndsTellsTheOthersOnceAndOneThatLeftNobody) {
  NcclRegistry reg(0x1, "");
  NcclMember a{0x1, 1, 11, 0}, b{0x1, 2, 12, 0}, c{0x1, 3, 13, 0}, remote{0x2, 9, -1, 5};
  NcclClique clique;
  auto cap = reg.Register(a, "t", Real(1), &clique);
  ASSERT_TRUE(cap.ok());
  auto parsed = *NcclRegistry::Parse(*cap);
  std::string why;
  ASSERT_TRUE(reg.Resolve(parsed, "t", b, &why));
  ASSERT_TRUE(reg.Resolve(parsed, "t", c, &why));
  ASSERT_TRUE(reg.Resolve(parsed, "t", remote, &why));
  // b destroyed its communicators: it left, nobody is told.
  EXPECT_TRUE(reg.MemberEnded(b, &clique, true, "").empty());
  // c is killed: a, and the remote member (through its link), are told; c is not.
  auto notices = reg.MemberEnded(c, nullptr, false, "killed");
  ASSERT_EQ(notices.size(), 2u);
  for (const NcclNotice& n : notices) {
    EXPECT_TRUE(n.to == a || n.to == remote);
    EXPECT_EQ(n.clique, clique);
    EXPECT_EQ(n.reason, "killed");
  }
  // The clique is dead: it resolves no more, and a later end tells nobody again.
  EXPECT_FALSE(reg.Resolve(parsed, "t", NcclMember{0x1, 4, 14, 0}, &why));
  EXPECT_TRUE(reg.MemberEnded(a, nullptr, false, "exit").empty());
  // The last member gone, the clique is forgotten.
  EXPECT_TRUE(reg.LinkLost(5, "down").empty());
  EXPECT_EQ(reg.cliques(), 0u);
}

TEST(NcclRegistry, ALinkThatGoesDownEndsItsMembersOnBothSides) {
  // Origin side: a remote member behind link 5 is gone when the link is.
  NcclRegistry origin(0x1, "");
  NcclMember a{0x1, 1, 11, 0}, remote{0x2, 9, -1, 5};
  NcclClique clique;
  auto cap = origin.Register(a, "t", Real(1), &clique);
  std::string why;
  ASSERT_TRUE(origin.Resolve(*NcclRegistry::Parse(*cap), "t", remote, &why));
  auto notices = origin.LinkLost(5, "server 2 is gone");
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].to, a);

  // Member side: local sessions that joined another server's clique through link 7.
  NcclRegistry member(0x2, "");
  NcclClique theirs{0x1, 42};
  member.JoinedRemote(7, theirs, 21, 1);
  member.JoinedRemote(7, theirs, 22, 2);
  // One of them ends: the origin is told through link 7.
  auto tell = member.LocalEndedRemote(21, nullptr);
  ASSERT_EQ(tell.size(), 1u);
  EXPECT_EQ(tell[0].first, 7u);
  EXPECT_EQ(tell[0].second, theirs);
  // The link goes down: the other is told the clique is lost.
  auto lost = member.LinkLost(7, "origin gone");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].to.pid, 22);
  EXPECT_EQ(lost[0].clique, theirs);
  // A clique the origin says lost reaches its local members once.
  member.JoinedRemote(8, theirs, 23, 3);
  EXPECT_EQ(member.RemoteLost(theirs), std::vector<pid_t>{23});
  EXPECT_TRUE(member.RemoteLost(theirs).empty());
}

TEST(NcclRegistry, ATenantHoldsABoundedNumberOfIds) {
  NcclRegistry reg(0x1, "");
  NcclClique clique;
  int made = 0;
  while (reg.Register(NcclMember{0x1, 1, 11, 0}, "t", Real(1), &clique).ok() && made < 100000) made++;
  EXPECT_EQ(made, 4096);
  EXPECT_TRUE(reg.Register(NcclMember{0x1, 2, 12, 0}, "other", Real(1), &clique).ok()) << "another tenant is not affected";
}

}  // namespace
}  // namespace remora::server

// Per-peer shares of a listener's slots (server/supervisor/peer_shares.h; docs/SECURITY.md,
// N8): one peer cannot hold all the slots, and a peer that holds fewer always gets in.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include "supervisor/peer_shares.h"

namespace remora::server {
namespace {

TEST(PeerShares, APeerHoldsItsShareAndNoMore) {
  PeerShares s(8, 3);
  for (uint64_t id = 1; id <= 3; id++) {
    auto d = s.Admit("a");
    ASSERT_TRUE(d.admit);
    s.Add(id, "a");
  }
  auto d = s.Admit("a");
  EXPECT_FALSE(d.admit);
  EXPECT_EQ(d.refusal, "3 connections from a have not logged in yet (at most 3 per address)");
  // A settled (logged-in) connection leaves the peer's share.
  s.Settle(2);
  EXPECT_TRUE(s.Admit("a").admit);
  EXPECT_EQ(s.Unsettled("a"), 2u);
}

TEST(PeerShares, WhenFullTheBiggestHolderYieldsToSmallerOnes) {
  PeerShares s(4, 4, "are open");
  for (uint64_t id = 1; id <= 4; id++) {
    ASSERT_TRUE(s.Admit("flood").admit);
    s.Add(id, "flood");
  }
  auto d = s.Admit("admin");
  ASSERT_TRUE(d.admit);
  ASSERT_TRUE(d.evict.has_value());
  EXPECT_EQ(*d.evict, 1u) << "the oldest of the biggest holder";
  EXPECT_EQ(s.Unsettled("flood"), 3u) << "an evicted connection stops counting at once";
  s.Add(5, "admin");
  s.Remove(1);
  // The flooder, now below its share but holding more than anyone, cannot take it back...
  auto again = s.Admit("flood");
  EXPECT_FALSE(again.admit);
  EXPECT_EQ(again.refusal, "all 4 connections are in use");
  // ...and a second newcomer still gets in, at the flooder's expense.
  auto other = s.Admit("other");
  ASSERT_TRUE(other.admit && other.evict.has_value());
  EXPECT_EQ(*other.evict, 2u);
}

TEST(PeerShares, SettledConnectionsAreNeverEvicted) {
  PeerShares s(2, 2);
  ASSERT_TRUE(s.Admit("a").admit);
  s.Add(1, "a");
  s.Settle(1);
  ASSERT_TRUE(s.Admit("b").admit);
  s.Add(2, "b");
  s.Settle(2);
  auto d = s.Admit("c");
  EXPECT_FALSE(d.admit) << "only logged-in connections: nothing to evict";
}

TEST(PeerShares, PeersAreAddressesAndIpv6Slash64s) {
  struct sockaddr_in v4 = {};
  v4.sin_family = AF_INET;
  inet_pton(AF_INET, "198.51.100.7", &v4.sin_addr);
  EXPECT_EQ(PeerShareKey(reinterpret_cast<sockaddr*>(&v4), sizeof(v4)), "198.51.100.7");
  struct sockaddr_in6 v6 = {};
  v6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8:1:2:aaaa:bbbb:cccc:dddd", &v6.sin6_addr);
  EXPECT_EQ(PeerShareKey(reinterpret_cast<sockaddr*>(&v6), sizeof(v6)), "2001:db8:1:2::/64");
  inet_pton(AF_INET6, "2001:db8:1:2:ffff::1", &v6.sin6_addr);
  EXPECT_EQ(PeerShareKey(reinterpret_cast<sockaddr*>(&v6), sizeof(v6)), "2001:db8:1:2::/64") << "one /64, one peer";
  inet_pton(AF_INET6, "::ffff:203.0.113.9", &v6.sin6_addr);
  EXPECT_EQ(PeerShareKey(reinterpret_cast<sockaddr*>(&v6), sizeof(v6)), "203.0.113.9");
}

}  // namespace
}  // namespace remora::server

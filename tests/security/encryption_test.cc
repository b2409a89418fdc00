// Issue 17's encryption check and F6's "all TCP is plaintext" (docs/SECURITY.md): a passive
// observer records every byte of a tcp:// session between a client and a real server; with
// encryption on, a known payload never appears in what it saw; with encryption off it does
// (so the observer really sees the data path).
#include "relay.h"
#include "security_support.h"

namespace remora::security {
namespace {

constexpr char kPattern[] = "REMORA-PLAINTEXT-PAYLOAD-0123456789";

std::vector<std::byte> Payload(size_t n) {
  std::vector<std::byte> p(n);
  for (size_t i = 0; i < n; i++) p[i] = static_cast<std::byte>(kPattern[i % (sizeof(kPattern) - 1)]);
  return p;
}

class Encryption : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(s_.Start());
    token_ = s_.CreateTenant("alice");
    port_ = ParseEndpoint(s_.server.Url("tcp"))->port;
  }
  // Copies `data` to the device and back through a recording relay; returns what the
  // observer saw (both directions).
  std::string CopyThrough(EncryptMode mode, const std::vector<std::byte>& data, bool* encrypted) {
    Relay observer("127.0.0.1", port_);
    ConnectOptions o;
    o.encrypt = mode;
    auto s = RawSession::Open(observer.Url(), token_, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return "";
    *encrypted = (*s)->session().keys.has_value();
    auto alloc = (*s)->Call([&](wire::Request::Builder& q) { q.initMemAlloc().setSize(data.size()); });
    EXPECT_TRUE(alloc.ok() && alloc->error == Err::kSuccess);
    uint64_t dev = alloc->Decode([](wire::Reply::Reader r) { return r.getPointer(); });
    auto up = (*s)->Call([&](wire::Request::Builder& q) {
      auto c = q.initMemcpyHtoD();
      c.setDst(dev);
      c.setSize(data.size());
      c.initStream().setHandle(0);
    }, data);
    EXPECT_TRUE(up.ok() && up->error == Err::kSuccess);
    auto down = (*s)->Call([&](wire::Request::Builder& q) {
      auto c = q.initMemcpyDtoH();
      c.setSrc(dev);
      c.setSize(data.size());
      c.initStream().setHandle(0);
    });
    EXPECT_TRUE(down.ok() && down->error == Err::kSuccess);
    EXPECT_EQ(down->bulk, data) << "the data did not survive the round trip";
    s->reset();
    return observer.ClientToServer() + observer.ServerToClient();
  }

  TenancyServer s_;
  std::string token_;
  uint16_t port_ = 0;
};

TEST_F(Encryption, APassiveObserverSeesNoPlaintextWhenEncrypted) {
  std::vector<std::byte> data = Payload(5 << 20);  // several records, inline and chunked
  bool encrypted = false;
  std::string seen = CopyThrough(EncryptMode::kOn, data, &encrypted);
  EXPECT_TRUE(encrypted);
  EXPECT_GT(seen.size(), 2 * data.size()) << "the observer saw the whole exchange";
  EXPECT_EQ(seen.find(kPattern), std::string::npos) << "the payload crossed the wire in the clear";
  seen = CopyThrough(EncryptMode::kOff, data, &encrypted);
  EXPECT_FALSE(encrypted);
  EXPECT_NE(seen.find(kPattern), std::string::npos) << "without encryption the observer must see it (else this test proves nothing)";
}

// A real application through the shim, encrypted end to end, with every byte checked; and a
// server that requires encryption refuses a client that refuses it.
TEST_F(Encryption, ApplicationsRunEncryptedAndRequirementsAreKept) {
  Relay observer("127.0.0.1", port_);
  auto env = s_.Env("tcp", token_);
  env["REMORA_SERVER"] = observer.Url();
  env["REMORA_ENCRYPT"] = "on";
  env["REMORA_LOG"] = "info";
  RunResult r = testing::Run({BinDir() + "/app_roundtrip", "--max-bytes", "8388608"}, env, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("encrypted"), std::string::npos) << r.output;
  TenancyServer strict;
  ASSERT_TRUE(strict.Start(1, "", {"--encrypt", "on"}));
  std::string t = strict.CreateTenant("bob");
  auto env2 = strict.Env("tcp", t);
  env2["REMORA_ENCRYPT"] = "off";
  RunResult refused = testing::Run({BinDir() + "/app_device_info"}, env2, 60);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("requires encryption"), std::string::npos) << refused.output;
  env2.erase("REMORA_ENCRYPT");
  RunResult ok = testing::Run({BinDir() + "/app_device_info"}, env2, 60);
  EXPECT_EQ(ok.exit_code, 0) << "auto agrees with a server that requires encryption: " << ok.output;
}

}  // namespace
}  // namespace remora::security

// protocol/: tenant tokens and the challenge-response proof (auth.h).
#include <gtest/gtest.h>

#include <cstring>

#include "remora/protocol/auth.h"

namespace remora {
namespace {

Token MakeToken(std::string tenant) {
  Token t;
  t.tenant = std::move(tenant);
  t.secret = RandomSecret();
  return t;
}

TEST(Token, FormatParseRoundTrip) {
  Token t = MakeToken("team-a_1");
  std::string text = FormatToken(t);
  EXPECT_EQ(text.rfind("remora1.team-a_1.", 0), 0u) << text;
  auto back = ParseToken(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tenant, "team-a_1");
  EXPECT_EQ(back->secret, t.secret);
  // Token files usually end with a newline.
  auto with_newline = ParseToken(text + "\n");
  ASSERT_TRUE(with_newline.ok());
  EXPECT_EQ(with_newline->secret, t.secret);
}

TEST(Token, SecretsAreRandom) {
  EXPECT_NE(RandomSecret(), RandomSecret());
  EXPECT_NE(RandomNonce(), RandomNonce());
}

TEST(Token, RejectsMalformedTokens) {
  Token t = MakeToken("alpha");
  std::string good = FormatToken(t);
  std::string b64 = good.substr(std::string("remora1.alpha.").size());
  for (const std::string& text : {
           std::string(""),
           std::string("alpha.") + b64,                   // no prefix
           "remora2.alpha." + b64,                          // other version
           std::string("remora1.alpha"),                    // no secret
           std::string("remora1.alpha."),                   // empty secret
           "remora1." + b64,                                // no tenant
           std::string("remora1..") + b64,                           // empty tenant
           "remora1.Alpha." + b64,                          // uppercase tenant
           "remora1.al.pha." + b64,                         // dot in tenant
           "remora1.alpha." + b64.substr(0, b64.size() - 2),  // secret too short
           "remora1.alpha." + b64 + "AAAA",                 // secret too long
           "remora1.alpha." + b64.substr(0, b64.size() - 1) + "=",  // padding/invalid char
           "remora1.alpha." + b64.substr(0, 10) + "!" + b64.substr(11),  // not base64url
       }) {
    auto r = ParseToken(text);
    EXPECT_FALSE(r.ok()) << "'" << text << "' was accepted";
    if (!r.ok()) { EXPECT_EQ(r.status().code(), Err::kInvalidValue) << text; }
  }
}

TEST(TenantName, Validation) {
  for (const char* ok : {"a", "0", "tenant", "team-a", "a_b", "x1-2_3", "9lives"})
    EXPECT_TRUE(ValidateTenantName(ok).ok()) << ok;
  EXPECT_TRUE(ValidateTenantName(std::string(63, 'a')).ok());
  for (const std::string& bad : {std::string(""), std::string(64, 'a'), std::string("-a"), std::string("_a"),
                                 std::string("A"), std::string("a b"), std::string("a.b"), std::string("a/b"),
                                 std::string("caf\xc3\xa9"), std::string("a\n"), std::string("a\0b", 3)}) {
    Status st = ValidateTenantName(bad);
    EXPECT_FALSE(st.ok()) << "'" << bad << "' accepted";
    EXPECT_EQ(st.code(), Err::kInvalidValue);
  }
}

// An authentication message as the handshake builds one: a label, the tenant, and what
// binds it to one exchange (here: two nonces).
std::string Msg(std::string_view tenant, const Nonce& a, const Nonce& b) {
  std::string m = "remora-auth-v2|" + std::string(tenant) + "|";
  m.append(reinterpret_cast<const char*>(a.data()), a.size());
  m.append(reinterpret_cast<const char*>(b.data()), b.size());
  return m;
}

class ProofTest : public ::testing::Test {
 protected:
  Secret secret = RandomSecret();
  Key stored = StoredKeyFor(secret);
  Nonce cn = RandomNonce();
  Nonce sn = RandomNonce();
};

TEST_F(ProofTest, RightSecretIsAccepted) {
  Key proof = ClientProof(secret, Msg("alpha", cn, sn));
  EXPECT_TRUE(VerifyProof(stored, Msg("alpha", cn, sn), proof));
}

TEST_F(ProofTest, WrongSecretIsRejected) {
  Key proof = ClientProof(RandomSecret(), Msg("alpha", cn, sn));
  EXPECT_FALSE(VerifyProof(stored, Msg("alpha", cn, sn), proof));
}

// The proof binds the tenant name: a valid proof for one tenant does not log in as another.
TEST_F(ProofTest, WrongTenantIsRejected) {
  Key proof = ClientProof(secret, Msg("alpha", cn, sn));
  EXPECT_FALSE(VerifyProof(stored, Msg("beta", cn, sn), proof));
  EXPECT_FALSE(VerifyProof(stored, Msg("alph", cn, sn), proof));
  EXPECT_FALSE(VerifyProof(stored, Msg("", cn, sn), proof));
}

// The proof binds both nonces: a recorded proof cannot be replayed in another handshake.
TEST_F(ProofTest, WrongNoncesAreRejected) {
  Key proof = ClientProof(secret, Msg("alpha", cn, sn));
  EXPECT_FALSE(VerifyProof(stored, Msg("alpha", RandomNonce(), sn), proof));
  EXPECT_FALSE(VerifyProof(stored, Msg("alpha", cn, RandomNonce()), proof));
  EXPECT_FALSE(VerifyProof(stored, Msg("alpha", sn, cn), proof)) << "swapped nonces";
  EXPECT_NE(proof, ClientProof(secret, Msg("alpha", cn, RandomNonce()))) << "a fresh challenge gives a fresh proof";
}

// Any single flipped bit of the proof makes it invalid.
TEST_F(ProofTest, EveryFlippedProofBitIsRejected) {
  Key proof = ClientProof(secret, Msg("alpha", cn, sn));
  for (size_t bit = 0; bit < proof.size() * 8; bit++) {
    Key p = proof;
    p[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(VerifyProof(stored, Msg("alpha", cn, sn), p)) << "bit " << bit;
  }
  EXPECT_FALSE(VerifyProof(stored, Msg("alpha", cn, sn), Key{}));
}

// What the server stores (and what crosses the wire) reveals neither the secret nor a
// usable key: the stored key differs per secret, is not the secret, and the proof is
// neither the secret nor the stored key.
TEST_F(ProofTest, StoredKeyDoesNotRevealTheSecret) {
  EXPECT_EQ(StoredKeyFor(secret), stored) << "deterministic";
  Secret other = secret;
  other[0] ^= 1;
  EXPECT_NE(StoredKeyFor(other), stored);
  EXPECT_NE(StoredKeyFor(RandomSecret()), stored);
  EXPECT_NE(0, std::memcmp(stored.data(), secret.data(), stored.size()));
  Key proof = ClientProof(secret, Msg("alpha", cn, sn));
  EXPECT_NE(0, std::memcmp(proof.data(), secret.data(), proof.size()));
  EXPECT_NE(proof, stored);
  // Knowing the stored key is not enough to log in: using it as if it were the secret fails.
  Secret as_secret;
  std::memcpy(as_secret.data(), stored.data(), as_secret.size());
  EXPECT_FALSE(VerifyProof(stored, Msg("alpha", cn, sn), ClientProof(as_secret, Msg("alpha", cn, sn))));
}

// The server's signature: only a holder of the ServerKey makes it, and it binds the message.
TEST_F(ProofTest, ServerSignatureProvesTheServer) {
  Key server_key = ServerKeyFor(secret);
  std::string m = Msg("alpha", cn, sn);
  Key sig = ServerSignature(server_key, m);
  EXPECT_TRUE(VerifyServerSignature(server_key, m, sig));
  EXPECT_FALSE(VerifyServerSignature(server_key, Msg("alpha", cn, RandomNonce()), sig));
  EXPECT_FALSE(VerifyServerSignature(ServerKeyFor(RandomSecret()), m, sig));
  EXPECT_FALSE(VerifyServerSignature(server_key, m, ServerSignature(stored, m))) << "StoredKey cannot sign";
  EXPECT_NE(server_key, stored);
  Verifier v = VerifierFor(secret);
  EXPECT_EQ(v.stored_key, stored);
  EXPECT_EQ(v.server_key, server_key);
}

// Admin and tenant logins never share an authentication message (domain separation): a
// tenant named "admin" cannot replay anything into an admin login.
TEST_F(ProofTest, AdminMessagesAreSeparateFromTenantMessages) {
  std::array<uint8_t, 32> binding{};
  binding[0] = 7;
  EXPECT_NE(AdminAuthMessage(cn, sn, binding), Msg("admin", cn, sn));
  EXPECT_EQ(AdminAuthMessage(cn, sn, binding).rfind("remora-admin-v2|", 0), 0u);
  EXPECT_FALSE(VerifyProof(stored, AdminAuthMessage(cn, sn, binding), ClientProof(secret, Msg("admin", cn, sn))));
  // The admin channel's binding is part of what is proved: a proof made on one channel is
  // refused on another (a man in the middle holds two channels with different bindings).
  std::array<uint8_t, 32> other = binding;
  other[31] ^= 1;
  EXPECT_FALSE(VerifyProof(stored, AdminAuthMessage(cn, sn, other), ClientProof(secret, AdminAuthMessage(cn, sn, binding))));
}

TEST(KeyHex, RoundTripAndRejects) {
  Key k = StoredKeyFor(RandomSecret());
  std::string hex = ToHex(k.data(), k.size());
  EXPECT_EQ(hex.size(), 64u);
  auto back = KeyFromHex(hex);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, k);
  EXPECT_FALSE(KeyFromHex(hex.substr(0, 62)).ok());
  EXPECT_FALSE(KeyFromHex(hex + "00").ok());
  EXPECT_FALSE(KeyFromHex(std::string(64, 'g')).ok());
  EXPECT_FALSE(KeyFromHex("").ok());
}

}  // namespace
}  // namespace remora

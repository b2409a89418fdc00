// NcclRegistry: a server's record of NCCL unique ids and of who joined the communicators made
// from them (docs/ARCHITECTURE.md, "NCCL"). A worker that made a real ncclUniqueId registers it
// here; its application gets a capability instead, 128 opaque bytes {magic, this server's id
// (random per start), the id's number, a 128-bit random nonce, the address of this server's
// peer listener}. A session that presents a capability gets the real id only if it is of this
// server, live, its nonce matches (compared in constant time) and the session is of the
// registering session's tenant; anything else gets one answer, the reason going to the log.
// Another server's capability is resolved by asking that server over the peer link
// (peer_link.h), which checks the same things; the real id never reaches a client.
//
// The sessions that made or resolved an id are the members of its clique. When one ends without
// having left (it destroyed its communicators: it left), or its server's link goes down, every
// other member is told (NcclNotice), once: their workers abort the communicators of the clique,
// so no rank waits for a rank that is gone. The clique is then dead: it resolves no more.
//
// This server is also a member server of other servers' cliques: the sessions here that
// resolved through a peer link are remembered by link, so their ends are reported to the
// origin and the origin's notices (or the link's loss) reach them.
//
// Pure bookkeeping: no sockets. The supervisor's loop thread only.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "remora/base/status.h"

namespace remora::server {

inline constexpr size_t kNcclIdBytes = 128;
using NcclIdBytes = std::array<uint8_t, kNcclIdBytes>;

// ncclResult_t values the registry answers (the supervisor never includes NCCL's header).
inline constexpr uint32_t kNcclSuccess = 0;
inline constexpr uint32_t kNcclSystemError = 2;
inline constexpr uint32_t kNcclInvalidArgument = 4;

// A session that made or joined a clique: of this server (`link` 0, `pid` its worker), or of
// another server (`server` its id, `link` the peer link it resolved through).
struct NcclMember {
  uint64_t server = 0;
  uint64_t session = 0;
  pid_t pid = -1;
  uint64_t link = 0;
  bool operator<(const NcclMember& o) const { return std::tie(server, session, link) < std::tie(o.server, o.session, o.link); }
  bool operator==(const NcclMember& o) const { return server == o.server && session == o.session && link == o.link; }
};

// A clique: the origin server's id and the unique id's number there.
struct NcclClique {
  uint64_t server = 0, id = 0;
  bool operator<(const NcclClique& o) const { return std::tie(server, id) < std::tie(o.server, o.id); }
  bool operator==(const NcclClique& o) const { return server == o.server && id == o.id; }
};

// Tell `to` that clique `clique` lost a member (`reason` says who and how).
struct NcclNotice {
  NcclMember to;
  NcclClique clique;
  std::string reason;
};

// A capability's fields.
struct NcclCapability {
  uint64_t server = 0;
  uint64_t number = 0;
  std::array<uint8_t, 16> nonce{};
  std::string address;  // the origin's peer listener, "HOST:PORT", or empty
};

class NcclRegistry {
 public:
  // `advertise`: this server's peer listener as other servers reach it ("" without one).
  NcclRegistry(uint64_t server_id, std::string advertise);
  uint64_t server_id() const { return server_id_; }

  // ---- this server's ids --------------------------------------------------------------------
  // A worker's real id: the capability its application gets, and the clique. Fails when the
  // tenant holds too many.
  Result<NcclIdBytes> Register(const NcclMember& creator, const std::string& tenant, const NcclIdBytes& real,
                               NcclClique* clique);
  static std::optional<NcclCapability> Parse(const NcclIdBytes& capability);
  // The real id of one of this server's capabilities, for `member` of `tenant` (who becomes a
  // member of its clique); nullopt with `why` otherwise.
  std::optional<NcclIdBytes> Resolve(const NcclCapability& cap, const std::string& tenant, const NcclMember& member,
                                     std::string* why);
  // A member is gone (`left`: it left cleanly, nobody is told): the notices to deliver.
  std::vector<NcclNotice> MemberEnded(const NcclMember& member, const NcclClique* only, bool left, const std::string& reason);

  // ---- other servers' ids (this server is a member server) -----------------------------------
  // Local session `pid`/`session` joined another server's clique through `link`.
  void JoinedRemote(uint64_t link, const NcclClique& clique, pid_t pid, uint64_t session);
  // A local session ended (or left `only`): the cliques whose origin to tell, by link.
  std::vector<std::pair<uint64_t, NcclClique>> LocalEndedRemote(pid_t pid, const NcclClique* only);
  // The origin says the clique lost a member: the local workers to tell.
  std::vector<pid_t> RemoteLost(const NcclClique& clique);

  // ---- links ---------------------------------------------------------------------------------------
  // A peer link went down: its remote members of this server's cliques are gone (notices), and
  // this server's members of cliques resolved through it lose them (notices to local members).
  std::vector<NcclNotice> LinkLost(uint64_t link, const std::string& reason);

  size_t cliques() const { return cliques_.size(); }

 private:
  struct Clique {
    std::array<uint8_t, 16> nonce{};
    std::string tenant;
    NcclIdBytes real{};
    std::set<NcclMember> members;
    bool dead = false;
  };
  std::vector<NcclNotice> Lost(uint64_t number, Clique& c, const NcclMember& gone, const std::string& reason);

  uint64_t server_id_;
  std::string advertise_;
  uint64_t next_ = 1;
  std::map<uint64_t, Clique> cliques_;
  std::map<std::string, size_t> per_tenant_;
  // Member-server side: (link, clique) -> local members (pid, session).
  std::map<std::pair<uint64_t, NcclClique>, std::set<std::pair<pid_t, uint64_t>>> remote_;
};

}  // namespace remora::server

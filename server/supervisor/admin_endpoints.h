// The admin API's endpoints: its listening sockets (the state directory's Unix socket, an
// optional TCP address) and the admin token file that TCP administrators prove. Blocking
// system calls only; called once, by AdminServer::Start, before its thread starts.
#pragma once

#include <string>

#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/auth.h"

namespace remora::server {

// A listening Unix socket at `path`, mode 0600. Refused if a server already answers there
// (same state directory); a stale socket file is replaced.
Result<Fd> BindUnix(const std::string& path);

// A listening TCP socket for `url` (tcp://HOST:PORT; port 0 picks one); `bound_url` gets the
// address it was bound to.
Result<Fd> BindTcp(const std::string& url, std::string* bound_url);

// Reads the admin token from `path` (a regular file of this uid, mode 0600 or stricter,
// never through a symbolic link), creating it (0600, a fresh random token) if it does not
// exist. Returns its verifier.
Result<Verifier> LoadOrCreateAdminToken(const std::string& path);

}  // namespace remora::server

// libfuse3's high-level operations of remorafs: a thin adapter from FUSE calls to fs::Tree.
//
// Contract:
//  - fuse_new's user_data must be the fs::Tree, which must outlive the mount. The operations
//    are thread-safe (they may run on libfuse's worker threads at once).
//  - Nothing is cached by the kernel (entry, attribute and negative timeouts 0, direct I/O):
//    every lookup and read reaches the Tree, so every read reflects the server.
//  - Changes (write, truncate, mkdir, rmdir) and reads of token files are allowed only to
//    root and the user remorafs runs as (fuse_get_context()->uid), in addition to the
//    kernel's mode checks (remorafs always mounts with default_permissions).
//  - Each failure is one warning line in the log ("OP PATH: <strerror>: <why>"), except
//    lookups of names that do not exist (debug level: shells and ls probe for names).
#pragma once

#include <fuse.h>

namespace remora::fs {

const fuse_operations& Operations();

}  // namespace remora::fs

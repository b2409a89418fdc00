#include "remora/memmgr/handle_table.h"

namespace remora {

const char* HandleKindName(HandleKind kind) {
  switch (kind) {
    case HandleKind::kStream: return "stream";
    case HandleKind::kEvent: return "event";
    case HandleKind::kModule: return "module";
    case HandleKind::kFunction: return "function";
    case HandleKind::kVariable: return "variable";
    case HandleKind::kPool: return "memory pool";
    case HandleKind::kPhysical: return "physical allocation";
    case HandleKind::kLink: return "link state";
  }
  return "handle";
}

}  // namespace remora

// Placeholder until the RDMA transport lands: rdma:// is refused with a clear error.
#include "transport_internal.h"

namespace remora {

Result<Connected> RdmaConnect(const Endpoint& ep, const ConnectOptions&) {
  return Error(Err::kNotSupported, "{}: this build has no RDMA transport", ep.ToUrl());
}
Result<std::unique_ptr<Listener>> RdmaListen(const Endpoint& ep) {
  return Error(Err::kNotSupported, "{}: this build has no RDMA transport", ep.ToUrl());
}
Result<std::unique_ptr<Connection>> RdmaAdopt(Fd, std::vector<Fd>) {
  return Error(Err::kNotSupported, "this build has no RDMA transport");
}
std::string RdmaUnavailableReason() { return "this build has no RDMA transport"; }

}  // namespace remora

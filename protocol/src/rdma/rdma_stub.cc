// The rdma:// record of a build without the verbs headers: it refuses with a clear error.
#include "transport_internal.h"

namespace remora {
namespace {

Result<Connected> RdmaConnect(const Endpoint& ep, const ConnectOptions&) {
  return Error(Err::kNotSupported, "{}: this build has no RDMA transport", ep.ToUrl());
}
Result<std::unique_ptr<Listener>> RdmaListen(const Endpoint& ep, const ListenOptions&) {
  return Error(Err::kNotSupported, "{}: this build has no RDMA transport", ep.ToUrl());
}
Result<std::unique_ptr<Connection>> RdmaAdopt(Fd, std::vector<Fd>, const std::optional<SessionKeys>&, int) {
  return Error(Err::kNotSupported, "this build has no RDMA transport");
}
std::string RdmaUnavailable() { return "this build has no RDMA transport"; }

}  // namespace

const TransportOps kRdmaTransport = {"rdma", TransportKind::kRdma, "rdma-host-staged", RdmaConnect, RdmaListen, RdmaAdopt,
                                     RdmaUnavailable};

}  // namespace remora

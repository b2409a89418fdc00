// Shared-memory transport. Private to protocol/.
#pragma once

#include <memory>

#include "remora/protocol/connection.h"
#include "shm/segment.h"

namespace remora {

std::unique_ptr<Connection> MakeShmRequester(Fd sock, shm::Segment segment, std::string peer);
std::unique_ptr<Connection> MakeShmExecutor(Fd sock, shm::Segment segment, std::string peer);

}  // namespace remora

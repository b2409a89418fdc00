// Private to the host backend's graphs (host_graph*.cc): the capture record and the casts
// between the driver's handles and the emulated objects (a handle is the object's address).
#pragma once

#include <map>
#include <vector>

#include "worker/backend/host/host_graph.h"

namespace remora::worker {

struct HostGraphs::Capture {
  uint64_t id = 0;
  DStream origin = nullptr;
  EmuGraph* graph = nullptr;
  bool into_user_graph = false;  // cuStreamBeginCaptureToGraph: the application owns it
  bool invalidated = false;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::map<DStream, std::vector<EmuNode*>> deps;  // every stream in the capture: its tail
};

namespace host_graph {
inline EmuGraph* G(CUgraph g) { return reinterpret_cast<EmuGraph*>(g); }
inline EmuNode* N(CUgraphNode n) { return reinterpret_cast<EmuNode*>(n); }
inline CUgraphNode H(EmuNode* n) { return reinterpret_cast<CUgraphNode>(n); }
inline CUresult R(const Status& st) { return st.ok() ? CUDA_SUCCESS : static_cast<CUresult>(st.raw()); }
}  // namespace host_graph

}  // namespace remora::worker

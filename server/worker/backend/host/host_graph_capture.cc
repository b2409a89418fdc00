// Stream capture on the host backend (host_graph.h): work issued on a capturing stream
// becomes a node of the capture's graph.
#include <algorithm>
#include <set>

#include "worker/backend/host/host_graph_internal.h"

namespace remora::worker {

using namespace host_graph;  // NOLINT: the casts of host_graph_internal.h

namespace {

// Everything `from` depends on, itself included.
std::set<EmuNode*> Ancestors(const std::vector<EmuNode*>& from) {
  std::set<EmuNode*> seen;
  std::vector<EmuNode*> todo(from.begin(), from.end());
  while (!todo.empty()) {
    EmuNode* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    todo.insert(todo.end(), n->deps.begin(), n->deps.end());
  }
  return seen;
}

}  // namespace


HostGraphs::Capture* HostGraphs::CaptureOf(DStream s) const {
  auto it = streams_.find(s);
  return it == streams_.end() ? nullptr : it->second;
}

Status HostGraphs::LegacyAllowed() const {
  for (const auto& [s, c] : streams_)
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && host_.BlockingStream(s))
      return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                    "the legacy stream synchronises with a stream being captured");
  return Status::Ok();
}

Status HostGraphs::CaptureWork(DStream s, CUgraphNodeType type, std::function<void()> work, const CUgraphNodeParams* params) {
  Capture* c = CaptureOf(s);
  if (c == nullptr) return Error(Err::kUnknown, "internal: capture work on a stream that does not capture");
  if (c->invalidated) return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the capture was invalidated");
  EmuNode* n = Append(c->graph, c->deps[s], type);
  n->work = std::move(work);
  if (params != nullptr) {
    n->params = *params;
    n->params.type = type;
  }
  c->deps[s] = {n};
  return Status::Ok();
}

Status HostGraphs::CaptureEventRecord(DEvent e, DStream s) {
  Capture* c = CaptureOf(s);
  if (c == nullptr) return Error(Err::kUnknown, "internal: capture event on a stream that does not capture");
  event_deps_[e] = {c, c->deps[s]};
  return Status::Ok();
}

Result<bool> HostGraphs::CaptureWait(DStream s, DEvent e) {
  auto it = event_deps_.find(e);
  if (it == event_deps_.end() || captures_.count(it->second.first) == 0) return false;
  Capture* c = it->second.first;
  Capture* mine = CaptureOf(s);
  if (mine != nullptr && mine != c)
    return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "the wait would merge two captures");
  // The stream joins the capture (or adds the event's work to what it depends on).
  std::vector<EmuNode*>& tail = c->deps[s];
  for (EmuNode* n : it->second.second)
    if (std::find(tail.begin(), tail.end(), n) == tail.end()) tail.push_back(n);
  streams_[s] = c;
  return true;
}

CUresult HostGraphs::Violation(DStream s) {
  if (Capture* c = CaptureOf(s)) c->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult HostGraphs::Unsafe() {
  if (mode_ == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  // Every capture here was begun by this (the worker's) thread, so any one not relaxed
  // prohibits the call, whether the thread is in global or thread-local mode.
  bool prohibited = false;
  for (Capture* c : captures_)
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
      c->invalidated = true;
      prohibited = true;
    }
  return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

void HostGraphs::ForgetStream(DStream s) {
  if (Capture* c = CaptureOf(s)) {
    c->invalidated = true;
    c->deps.erase(s);
    streams_.erase(s);
  }
}

CUresult HostGraphs::BeginCapture(DStream s, CUstreamCaptureMode mode, EmuGraph* into, const CUgraphNode* deps, size_t n) {
  if (s == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream cannot capture
  if (CaptureOf(s) != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  if (into != nullptr && !Known(reinterpret_cast<CUgraph>(into))) return CUDA_ERROR_INVALID_VALUE;
  auto* c = new Capture;
  c->id = next_capture_id_++;
  c->origin = s;
  c->mode = mode;
  c->into_user_graph = into != nullptr;
  c->graph = into != nullptr ? into : new EmuGraph;
  if (into == nullptr) live_graphs_.insert(c->graph);
  std::vector<EmuNode*> tail;
  for (size_t i = 0; i < n; i++) {
    if (!Known(deps[i]) || N(deps[i])->graph != c->graph) {
      if (into == nullptr) delete c->graph;
      delete c;
      return CUDA_ERROR_INVALID_VALUE;
    }
    tail.push_back(N(deps[i]));
  }
  c->deps[s] = tail;
  captures_.insert(c);
  streams_[s] = c;
  return CUDA_SUCCESS;
}

void HostGraphs::EndCaptureOf(Capture* c) {
  for (auto it = streams_.begin(); it != streams_.end();) it = it->second == c ? streams_.erase(it) : std::next(it);
  for (auto it = event_deps_.begin(); it != event_deps_.end();)
    it = it->second.first == c ? event_deps_.erase(it) : std::next(it);
  captures_.erase(c);
  delete c;
}

CUresult HostGraphs::EndCapture(DStream s, CUgraph* out) {
  Capture* c = CaptureOf(s);
  if (c == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (c->origin != s) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  // Where the graph goes nowhere else the caller must take it (the driver refuses a NULL
  // phGraph then, the capture going on); into the application's graph it may pass NULL.
  if (out == nullptr && !c->into_user_graph) return CUDA_ERROR_INVALID_VALUE;
  if (out) *out = nullptr;
  CUresult result = CUDA_SUCCESS;
  if (c->invalidated) {
    result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    // Every stream that joined must have been joined back into the origin.
    std::set<EmuNode*> joined = Ancestors(c->deps[s]);
    for (const auto& [other, tail] : c->deps)
      for (EmuNode* n : tail)
        if (!joined.count(n)) result = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  EmuGraph* g = c->graph;
  bool into = c->into_user_graph;
  EndCaptureOf(c);
  if (result != CUDA_SUCCESS) {
    if (!into) {
      Unregister(g);
      delete g;
    }
    return result;
  }
  if (!into) graphs_.insert(g);
  if (out) *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult HostGraphs::IsCapturing(DStream s, CUstreamCaptureStatus* status) {
  if (s == nullptr && !LegacyAllowed().ok()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  Capture* c = CaptureOf(s);
  *status = c == nullptr ? CU_STREAM_CAPTURE_STATUS_NONE
                         : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

CUresult HostGraphs::CaptureInfo(DStream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                 const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count) {
  CUresult r = IsCapturing(s, status);
  if (r != CUDA_SUCCESS) return r;
  Capture* c = CaptureOf(s);
  if (c == nullptr) return CUDA_SUCCESS;
  if (id) *id = c->id;
  if (graph) *graph = reinterpret_cast<CUgraph>(c->graph);
  std::vector<CUgraphNode>& keep = c->graph->capture_deps;
  keep.clear();
  for (EmuNode* n : c->deps[s]) keep.push_back(H(n));
  if (deps) *deps = keep.data();
  if (edges) *edges = nullptr;
  if (count) *count = keep.size();
  return CUDA_SUCCESS;
}

CUresult HostGraphs::UpdateCaptureDependencies(DStream s, CUgraphNode* deps, size_t n, unsigned flags) {
  Capture* c = CaptureOf(s);
  if (c == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  std::vector<EmuNode*>& tail = c->deps[s];
  if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) tail.clear();
  else if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) {
    if (!Known(deps[i]) || N(deps[i])->graph != c->graph) return CUDA_ERROR_INVALID_VALUE;
    tail.push_back(N(deps[i]));
  }
  return CUDA_SUCCESS;
}

CUresult HostGraphs::ExchangeMode(CUstreamCaptureMode* mode) {
  if (*mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, mode_);
  return CUDA_SUCCESS;
}

}  // namespace remora::worker

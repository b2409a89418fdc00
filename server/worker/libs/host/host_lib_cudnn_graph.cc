// The host backend's cuDNN: what the finalize of a tensor, an operation or a graph derives,
// and the execution of an emulated graph on the CPU (host_lib_cudnn.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <tuple>

#include "worker/libs/host/host_lib_cudnn.h"

namespace remora::worker::host_dnn {
namespace {

constexpr int kMaxDims = 8;
constexpr uint64_t kMatmulWorkspace = 256;

template <typename T>
std::optional<T> One(const Desc& d, int name, cudnnBackendAttributeType_t type) {
  auto v = d.Values<T>(name, type);
  if (v.size() != 1) return std::nullopt;
  return v[0];
}

// A finalized tensor named by attribute `name` of `d`, or nullptr (absent is `absent`).
cudnnStatus_t TensorAttr(const Desc& d, int name, Desc* (*find)(void*, uint64_t), void* ctx, const TensorInfo** out) {
  *out = nullptr;
  auto v = d.Values<uint64_t>(name, CUDNN_TYPE_BACKEND_DESCRIPTOR);
  if (v.empty()) return CUDNN_STATUS_BAD_PARAM;
  Desc* t = find(ctx, v[0]);
  if (t == nullptr || t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
  if (!t->finalized || !t->tensor) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  *out = &*t->tensor;
  return CUDNN_STATUS_SUCCESS;
}

double Alpha(const Desc& d, int name) {
  if (auto f = One<float>(d, name, CUDNN_TYPE_FLOAT)) return *f;
  if (auto g = One<double>(d, name, CUDNN_TYPE_DOUBLE)) return *g;
  return 1.0;
}

bool Binary(cudnnPointwiseMode_t m) {
  return m == CUDNN_POINTWISE_ADD || m == CUDNN_POINTWISE_SUB || m == CUDNN_POINTWISE_MUL || m == CUDNN_POINTWISE_MAX ||
         m == CUDNN_POINTWISE_MIN;
}
bool Unary(cudnnPointwiseMode_t m) { return m == CUDNN_POINTWISE_IDENTITY || m == CUDNN_POINTWISE_RELU_FWD; }

// `in` broadcasts to `out`: same rank, each dimension equal or 1.
bool Broadcasts(const TensorInfo& in, const TensorInfo& out) {
  if (in.dims.size() != out.dims.size()) return false;
  for (size_t i = 0; i < in.dims.size(); i++)
    if (in.dims[i] != out.dims[i] && in.dims[i] != 1) return false;
  return true;
}

cudnnStatus_t FinalizeTensor(Desc& d) {
  TensorInfo t;
  auto uid = One<int64_t>(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64);
  auto type = One<cudnnDataType_t>(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE);
  auto align = One<int64_t>(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64);
  t.dims = d.Values<int64_t>(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64);
  t.strides = d.Values<int64_t>(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64);
  if (!uid || !type || !align || t.dims.empty() || t.dims.size() != t.strides.size() || t.dims.size() > kMaxDims)
    return CUDNN_STATUS_BAD_PARAM;
  for (size_t i = 0; i < t.dims.size(); i++)
    if (t.dims[i] <= 0 || t.strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  t.uid = *uid;
  t.type = *type;
  t.is_virtual = One<uint8_t>(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN).value_or(0) != 0;
  t.by_value = One<uint8_t>(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN).value_or(0) != 0;
  if (t.by_value && (t.is_virtual || t.Elements() != 1)) return CUDNN_STATUS_BAD_PARAM;
  if (t.by_value ? (t.type != CUDNN_DATA_FLOAT && t.type != CUDNN_DATA_DOUBLE) : t.type != CUDNN_DATA_FLOAT)
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  d.tensor = t;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t FinalizeOp(Desc& d, Desc* (*find)(void*, uint64_t), void* ctx) {
  OpInfo op;
  const TensorInfo *x = nullptr, *b = nullptr, *y = nullptr;
  if (d.type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
    auto pw = d.Values<uint64_t>(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR);
    Desc* p = pw.empty() ? nullptr : find(ctx, pw[0]);
    if (p == nullptr || p->type != CUDNN_BACKEND_POINTWISE_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
    if (!p->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
    op.mode = p->pw_mode;
    if (cudnnStatus_t r = TensorAttr(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, find, ctx, &x); r) return r;
    if (cudnnStatus_t r = TensorAttr(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, find, ctx, &y); r) return r;
    if (Binary(op.mode) && TensorAttr(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, find, ctx, &b) != CUDNN_STATUS_SUCCESS)
      return CUDNN_STATUS_BAD_PARAM;
    if (!Broadcasts(*x, *y) || (b != nullptr && !Broadcasts(*b, *y)) || y->by_value) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    op.alpha1 = Alpha(d, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1);
    op.alpha2 = Alpha(d, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2);
  } else {
    op.kind = OpInfo::Kind::kMatmul;
    auto md = d.Values<uint64_t>(CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR);
    Desc* m = md.empty() ? nullptr : find(ctx, md[0]);
    if (m == nullptr || m->type != CUDNN_BACKEND_MATMUL_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
    if (!m->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
    if (cudnnStatus_t r = TensorAttr(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC, find, ctx, &x); r) return r;
    if (cudnnStatus_t r = TensorAttr(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC, find, ctx, &b); r) return r;
    if (cudnnStatus_t r = TensorAttr(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC, find, ctx, &y); r) return r;
    size_t n = y->dims.size();
    if (n < 2 || x->dims.size() != n || b->dims.size() != n || x->by_value || b->by_value || y->by_value)
      return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    if (x->dims[n - 2] != y->dims[n - 2] || b->dims[n - 1] != y->dims[n - 1] || x->dims[n - 1] != b->dims[n - 2])
      return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    for (size_t i = 0; i + 2 < n; i++)
      if ((x->dims[i] != y->dims[i] && x->dims[i] != 1) || (b->dims[i] != y->dims[i] && b->dims[i] != 1))
        return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  }
  op.x = *x;
  op.y = *y;
  if (b != nullptr) {
    op.b = *b;
    op.has_b = true;
  }
  d.op = op;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t FinalizeOperationGraph(Desc& d, Desc* (*find)(void*, uint64_t), void* ctx) {
  auto ops = d.Values<uint64_t>(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR);
  if (ops.empty()) return CUDNN_STATUS_BAD_PARAM;
  auto g = std::make_shared<GraphInfo>();
  for (uint64_t bits : ops) {
    Desc* o = find(ctx, bits);
    if (o == nullptr || !o->op) return o != nullptr && !o->finalized ? CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED : CUDNN_STATUS_BAD_PARAM;
    g->ops.push_back(*o->op);
    if (o->op->kind == OpInfo::Kind::kMatmul) g->workspace = kMatmulWorkspace;
  }
  // Each virtual tensor is produced by exactly one operation before it is read (in some order).
  std::set<int64_t> produced;
  for (const OpInfo& op : g->ops) {
    if (!produced.insert(op.y.uid).second) return CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;
  }
  for (const OpInfo& op : g->ops)
    for (const TensorInfo* in : {&op.x, op.has_b ? &op.b : nullptr})
      if (in != nullptr && in->is_virtual && produced.count(in->uid) == 0) return CUDNN_STATUS_BAD_PARAM;
  d.graph = g;
  return CUDNN_STATUS_SUCCESS;
}

// The graph of the descriptor named by attribute `name` of `d`, which must be finalized and
// of `type`.
cudnnStatus_t GraphOf(Desc& d, int name, cudnnBackendDescriptorType_t type, Desc* (*find)(void*, uint64_t), void* ctx) {
  auto v = d.Values<uint64_t>(name, CUDNN_TYPE_BACKEND_DESCRIPTOR);
  Desc* o = v.empty() ? nullptr : find(ctx, v[0]);
  if (o == nullptr || o->type != type) return CUDNN_STATUS_BAD_PARAM;
  if (!o->finalized || !o->graph) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  d.graph = o->graph;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

int64_t TensorInfo::Elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

uint64_t TensorInfo::Span() const {
  uint64_t last = 0;
  for (size_t i = 0; i < dims.size(); i++) last += static_cast<uint64_t>(dims[i] - 1) * static_cast<uint64_t>(strides[i]);
  return (last + 1) * sizeof(float);
}

cudnnStatus_t FinalizeGraphPart(Desc& d, Desc* (*find)(void*, uint64_t), void* ctx) {
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return FinalizeTensor(d);
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: {
      auto mode = One<cudnnPointwiseMode_t>(d, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE);
      if (!mode || !One<cudnnDataType_t>(d, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE)) return CUDNN_STATUS_BAD_PARAM;
      if (!Binary(*mode) && !Unary(*mode)) return CUDNN_STATUS_NOT_SUPPORTED;
      d.pw_mode = *mode;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
      return One<cudnnDataType_t>(d, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return FinalizeOp(d, find, ctx);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return FinalizeOperationGraph(d, find, ctx);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      return GraphOf(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, find, ctx);
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: {
      cudnnStatus_t r = GraphOf(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, find, ctx);
      if (r != CUDNN_STATUS_SUCCESS) return r;
      return One<int64_t>(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64).value_or(-1) == 0 ? CUDNN_STATUS_SUCCESS
                                                                                                  : CUDNN_STATUS_NOT_SUPPORTED;
    }
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      return GraphOf(d, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR, find, ctx);
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      if (d.Values<uint64_t>(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE).empty()) return CUDNN_STATUS_BAD_PARAM;
      return GraphOf(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, find, ctx);
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
      auto ptrs = d.Values<uint64_t>(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR);
      auto uids = d.Values<int64_t>(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64);
      if (ptrs.size() != uids.size()) return CUDNN_STATUS_BAD_PARAM;
      return std::set<int64_t>(uids.begin(), uids.end()).size() == uids.size() ? CUDNN_STATUS_SUCCESS
                                                                                : CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;
    }
    default: return CUDNN_STATUS_NOT_SUPPORTED;  // not emulated
  }
}

// ---- execution ----------------------------------------------------------------------------
namespace {

// A tensor's values during one execution: host memory of the emulated device, a by-value
// scalar, or an intermediate of the execution's own.
struct Buffer {
  float* data = nullptr;
  std::vector<int64_t> dims, strides;
};

float Apply(cudnnPointwiseMode_t m, float a, float b) {
  switch (m) {
    case CUDNN_POINTWISE_ADD: return a + b;
    case CUDNN_POINTWISE_SUB: return a - b;
    case CUDNN_POINTWISE_MUL: return a * b;
    case CUDNN_POINTWISE_MAX: return std::max(a, b);
    case CUDNN_POINTWISE_MIN: return std::min(a, b);
    case CUDNN_POINTWISE_RELU_FWD: return a > 0 ? a : 0;
    default: return a;  // identity
  }
}

// The element of `t` at the index `idx` of its output, broadcasting dimensions of 1.
float& At(const Buffer& t, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t i = 0; i < idx.size(); i++) off += (t.dims[i] == 1 ? 0 : idx[i]) * t.strides[i];
  return t.data[off];
}

void RunOp(const OpInfo& op, const Buffer& x, const Buffer& b, const Buffer& y) {
  std::vector<int64_t> idx(y.dims.size(), 0);
  const size_t n = y.dims.size();
  if (op.kind == OpInfo::Kind::kPointwise) {
    for (;;) {
      float xv = static_cast<float>(op.alpha1) * At(x, idx);
      float bv = op.has_b ? static_cast<float>(op.alpha2) * At(b, idx) : 0.0f;
      At(y, idx) = Apply(op.mode, xv, bv);
      size_t d = n;
      while (d > 0 && ++idx[d - 1] == y.dims[d - 1]) idx[--d] = 0;
      if (d == 0) return;
    }
  }
  // Matmul: y[.., m, n] = sum_k x[.., m, k] b[.., k, n].
  const int64_t K = x.dims[n - 1];
  for (;;) {
    std::vector<int64_t> xi = idx, bi = idx;
    float sum = 0;
    for (int64_t k = 0; k < K; k++) {
      xi[n - 1] = k;
      bi[n - 2] = k;
      sum += At(x, xi) * At(b, bi);
    }
    At(y, idx) = sum;
    size_t d = n;
    while (d > 0 && ++idx[d - 1] == y.dims[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

cudnnStatus_t ExecuteGraph(EmulatedDevice& device, DStream stream, const GraphInfo& graph, const std::map<int64_t, uint64_t>& pointers,
                           uint64_t workspace) {
  if (graph.workspace > 0 && (workspace == 0 || !device.Translate(workspace, graph.workspace).ok()))
    return CUDNN_STATUS_BAD_PARAM;
  // Resolve every tensor now (a missing or bad pointer fails the call), reading by-value
  // scalars now as the library does; intermediates live with the task.
  auto scalars = std::make_shared<std::map<int64_t, float>>();
  auto inter = std::make_shared<std::map<int64_t, std::vector<float>>>();
  std::map<int64_t, Buffer> buffers;
  auto resolve = [&](const TensorInfo& t) -> cudnnStatus_t {
    if (buffers.count(t.uid)) return CUDNN_STATUS_SUCCESS;
    Buffer b{nullptr, t.dims, t.strides};
    if (t.is_virtual) {
      std::vector<float>& v = (*inter)[t.uid];
      v.assign(static_cast<size_t>(t.Span() / sizeof(float)), 0.0f);
      b.data = v.data();
    } else {
      auto it = pointers.find(t.uid);
      if (it == pointers.end() || it->second == 0) return CUDNN_STATUS_BAD_PARAM;
      if (t.by_value) {
        const void* host = reinterpret_cast<const void*>(static_cast<uintptr_t>(it->second));
        float v = 0;
        if (t.type == CUDNN_DATA_DOUBLE) {
          double dv = 0;
          std::memcpy(&dv, host, sizeof(dv));
          v = static_cast<float>(dv);
        } else {
          std::memcpy(&v, host, sizeof(v));
        }
        b.data = &((*scalars)[t.uid] = v);
      } else {
        auto h = device.Translate(it->second, t.Span());
        if (!h.ok()) return CUDNN_STATUS_BAD_PARAM;
        b.data = reinterpret_cast<float*>(*h);
      }
    }
    buffers[t.uid] = b;
    return CUDNN_STATUS_SUCCESS;
  };
  for (const OpInfo& op : graph.ops)
    for (const TensorInfo* t : {&op.x, &op.y, op.has_b ? &op.b : nullptr})
      if (t != nullptr)
        if (cudnnStatus_t r = resolve(*t); r != CUDNN_STATUS_SUCCESS) return r;
  // In dependency order: an operation runs once the intermediates it reads are produced.
  std::vector<const OpInfo*> order, left;
  for (const OpInfo& op : graph.ops) left.push_back(&op);
  std::set<int64_t> ready;
  while (!left.empty()) {
    auto it = std::find_if(left.begin(), left.end(), [&](const OpInfo* op) {
      for (const TensorInfo* t : {&op->x, op->has_b ? &op->b : nullptr})
        if (t != nullptr && t->is_virtual && ready.count(t->uid) == 0) return false;
      return true;
    });
    if (it == left.end()) return CUDNN_STATUS_BAD_PARAM;  // a cycle
    ready.insert((*it)->y.uid);
    order.push_back(*it);
    left.erase(it);
  }
  auto ops = std::make_shared<std::vector<std::tuple<OpInfo, Buffer, Buffer, Buffer>>>();
  for (const OpInfo* op : order)
    ops->emplace_back(*op, buffers[op->x.uid], op->has_b ? buffers[op->b.uid] : Buffer{}, buffers[op->y.uid]);
  Status st = device.InOrder(stream, [ops, scalars, inter] {
    for (const auto& [op, x, b, y] : *ops) RunOp(op, x, b, y);
  });
  return st.ok() ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

}  // namespace remora::worker::host_dnn

// The Known tree of a finalized backend descriptor (protocol/api/cudnn_known.h): what the
// library computed, read back with the library's own queries right after the finalize.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "cudnn_api.h"
#include "cudnn_hooks.h"
#include "cudnn_known.h"
#include "worker/calls/generated_call.h"
#include "worker/libs/lib_cudnn.h"

namespace remora::worker::gen::cudnn {
namespace {

using api::dnn::KnownAttr;
using api::dnn::KnownNode;

// The attributes KnownAttributes lists for `type`, as the library answers them for `d`; an
// attribute the library does not answer is left out (the client then asks the library).
KnownNode Read(Api& api, cudnnBackendDescriptor_t d, cudnnBackendDescriptorType_t type, int depth) {
  KnownNode node;
  node.type = type;
  if (depth > api::dnn::kKnownDepth) return node;
  for (const auto& k : api::dnn::KnownAttributes(type)) {
    KnownAttr a;
    a.type = k.type;
    if (k.type != CUDNN_TYPE_BACKEND_DESCRIPTOR) {
      a.asked = k.max;
      a.bytes.resize(static_cast<size_t>(api::dnn::AttributeBytes(k.type, k.max)));
      if (api.cudnnBackendGetAttribute(d, k.name, k.type, k.max, &a.count, a.bytes.data()) != CUDNN_STATUS_SUCCESS || a.count < 0)
        continue;
      a.bytes.resize(static_cast<size_t>(api::dnn::AttributeBytes(k.type, std::min(a.count, k.max))));
      node.attrs[k.name] = std::move(a);
      continue;
    }
    if (api.cudnnBackendGetAttribute(d, k.name, k.type, 0, &a.count, nullptr) != CUDNN_STATUS_SUCCESS || a.count < 0) continue;
    std::vector<cudnnBackendDescriptor_t> made;
    bool ok = true;
    for (int64_t i = 0; i < std::min(a.count, k.max) && ok; i++) {
      made.emplace_back();
      ok = api.cudnnBackendCreateDescriptor(k.child, &made.back()) == CUDNN_STATUS_SUCCESS;
      if (!ok) made.pop_back();
    }
    a.asked = static_cast<int64_t>(made.size());
    int64_t filled = 0;
    if (ok && !made.empty())
      ok = api.cudnnBackendGetAttribute(d, k.name, k.type, a.asked, &filled, made.data()) == CUDNN_STATUS_SUCCESS && filled >= 0 &&
           filled <= a.asked;
    if (ok)
      for (int64_t i = 0; i < filled; i++) a.children.push_back(Read(api, made[static_cast<size_t>(i)], k.child, depth + 1));
    for (auto it = made.rbegin(); it != made.rend(); ++it) (void)api.cudnnBackendDestroyDescriptor(*it);
    if (ok) node.attrs[k.name] = std::move(a);
  }
  return node;
}

}  // namespace

Status BackendFinalizeKnown(OpContext& x, LibObject* desc, void* known, size_t capacity, size_t* knownSize) {
  *knownSize = 0;
  RETURN_IF_ERROR(BackendFinalize(x, desc));
  const auto* d = dynamic_cast<const DnnDescriptor*>(desc->extra.get());
  if (d == nullptr || !api::dnn::FinalizeBringsKnown(d->type)) return Status::Ok();
  std::vector<std::byte> tree;
  api::dnn::AppendKnown(&tree, Read(x.Library<Api>(), desc->As<cudnnBackendDescriptor_t>(), d->type, 0));
  if (tree.size() <= capacity) {
    std::memcpy(known, tree.data(), tree.size());
    *knownSize = tree.size();
  }
  return Status::Ok();
}

Status BackendFillPosted(OpContext& x, LibObject* desc, cudnnBackendAttributeName_t name, int64_t requested, const void* filled) {
  std::vector<uint64_t> ids(static_cast<size_t>(requested > 0 ? requested : 0));
  if (!ids.empty()) std::memcpy(ids.data(), filled, ids.size() * sizeof(uint64_t));
  int64_t count = 0;
  return BackendGetAttribute(x, desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, requested, &count, ids.empty() ? nullptr : ids.data());
}

}  // namespace remora::worker::gen::cudnn

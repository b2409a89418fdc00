// cuDNN's backend API in the client: what the client mirrors of the backend descriptors it
// created, from what it sent (a pure function of the application's calls, never asked of the
// server), and the hooks protocol/api/cudnn.api names.
//
// * Which finalizes are answered (FinalizeAnswered): those of descriptors whose status
//   cudnn-frontend decides on - operation graphs, heuristics, engines, engine configurations,
//   plans, kernel caches, device properties - and of any descriptor the client does not know.
//   Tensors, operations and their descriptors and variant packs are finalized posted: a
//   failure surfaces at the next answered call naming them (server/worker/libs/lib_cudnn.h).
// * By-value tensors: a tensor finalized with CUDNN_ATTR_TENSOR_IS_BY_VALUE true is a scalar
//   the library reads from a host pointer at execution. Each descriptor's finalize gathers the
//   by-value tensors (unique id -> bytes) of the descriptors its attributes name, so that an
//   operation graph knows those of its operations, an engine or engine configuration those of
//   its graph (a configuration the heuristics filled in, those of the heuristics' graph) and a
//   plan those of its configuration. At cudnnBackendExecute each variant-pack pointer that is
//   not the session's device memory must be one of the plan's by-value tensors: its bytes are
//   read then and sent with the execute (ByValues).
//
// Thread-safe (one mutex). Entries are dropped when their descriptor is destroyed; a
// descriptor finalized from a serialized plan (no graph the client saw) has no by-value
// tensors, and an execute naming a host pointer with it is refused with CUDNN_STATUS_BAD_PARAM.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "remora/base/status.h"

namespace remora::gen::cudnn {

void MirrorBackendCreate(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor);
void MirrorBackendDestroy(cudnnBackendDescriptor_t descriptor);
void MirrorBackendSet(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                      int64_t count, const void* elements);
void MirrorBackendGet(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                      int64_t requested, int64_t* count, void* elements);
void MirrorBackendFinalize(cudnnBackendDescriptor_t descriptor);
// cudnnBackendInitialize: the descriptor is blank again.
void MirrorBackendInitialize(cudnnBackendDescriptor_t descriptor);
// The type `descriptor` was created with (-1: not one this client created).
int BackendTypeOf(cudnnBackendDescriptor_t descriptor);
// Whether cudnnBackendFinalize of `descriptor` waits for its status (see above).
bool FinalizeAnswered(cudnnBackendDescriptor_t descriptor);
// cudnnBackendGetAttribute answered in the client where the answer is what the application
// set: an attribute (not a descriptor or handle) read with the type it was set with, of a
// descriptor whose finalize was answered with success (so the library took every setter).
// False: the library's to answer.
bool LocalGetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                       int64_t requested, int64_t* count, void* elements);

// Known trees (protocol/api/cudnn_known.h): whether an answered finalize of `descriptor` asks
// for one (remoraCudnnBackendFinalizeKnown), and the tree it brought (`n` bytes; none if 0 or
// not well formed), kept until the descriptor is set, re-initialized, finalized again or
// destroyed.
bool FinalizeBringsKnown(cudnnBackendDescriptor_t descriptor);
void MirrorBackendKnown(cudnnBackendDescriptor_t descriptor, const void* tree, size_t n);
// cudnnBackendGetAttribute answered from the descriptor's Known tree: true if the tree holds
// the answer (the attribute, with the type asked, and every element asked for). A query of
// descriptors fills the application's from the tree (their own trees from then on) and puts
// their ids in `*fill`: the same query, posted to the worker (remoraCudnnBackendFillPosted),
// fills the library's objects.
bool KnownGetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                       int64_t requested, int64_t* count, void* elements, std::vector<uint64_t>* fill);

// The bytes of the by-value tensors of an execute of `pack` with `plan`, read from the
// application's host pointers now (api::dnn::AppendByValue records; empty if none), or
// CUDNN_STATUS_BAD_PARAM naming a pointer that is neither device memory of the session nor a
// by-value tensor of the plan.
Status ByValues(cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack, std::vector<std::byte>* values);

}  // namespace remora::gen::cudnn

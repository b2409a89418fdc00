// server/worker: cuDNN's backend API on the worker (lib_cudnn.h) with the host backend's
// emulated cuDNN, over the pipe transport, as the shim encodes the calls: posted attribute
// setters, finalizes, destroys and executes whose failures surface at the next answered call
// naming the descriptor (or a descriptor made to refer to it), else at the session's next
// synchronising call - once; by-value tensors whose bytes travel with the execute; pointers
// outside the session refused before the library runs anything.
#include <cudnn.h>
#include <gtest/gtest.h>

#include <cstring>

#include "cudnn_hooks.h"
#include "cudnn_wire.h"
#include "executor_harness.h"

namespace remora::worker::unit {
namespace {

namespace dn = ::remora::gen::cudnn;

constexpr uint64_t Id(HandleKind kind, uint64_t n) { return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (n << 4); }
constexpr uint64_t kHandle = Id(HandleKind::kCudnnHandle, 1);
constexpr Err Dnn(cudnnStatus_t s) { return static_cast<Err>(s); }

class CudnnTest : public ExecutorTest {
 protected:
  Reply Lib(dn::Fn fn, const api::ArgWriter& args, bool answered) {
    auto fill = [&](wire::Request::Builder r) {
      auto a = r.initApiCall();
      a.setLibrary(dn::kLibrary);
      a.setFunction(fn);
      a.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(args.bytes().data()), args.bytes().size()));
    };
    if (!answered) {
      Send(fill, {}, false);
      return Reply{};
    }
    return Call(fill);
  }
  void SetUp() override {
    ExecutorTest::SetUp();
    Reply c = Lib(dn::k_cudnnCreate, HandleArg(kHandle), true);
    ASSERT_EQ(c.error, Err::kSuccess) << c.message;
  }
  // A backend descriptor of `type`, created posted.
  uint64_t Make(cudnnBackendDescriptorType_t type) {
    uint64_t id = Id(HandleKind::kCudnnBackendDescriptor, ++next_);
    api::ArgWriter w;
    w.Put(type);
    w.Put<uint64_t>(id);
    Lib(dn::k_cudnnBackendCreateDescriptor, w, false);
    return id;
  }
  template <typename T>
  void Set(uint64_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::vector<T> v) {
    api::ArgWriter w = HandleArg(d);
    w.Put(name);
    w.Put(type);
    w.Put<int64_t>(static_cast<int64_t>(v.size()));
    w.PutArray(v.data(), v.size() * sizeof(T), 1);
    Lib(dn::k_cudnnBackendSetAttribute, w, false);
  }
  Reply Finalize(uint64_t d, bool answered) { return Lib(dn::k_cudnnBackendFinalize, HandleArg(d), answered); }
  void Destroy(uint64_t d) { Lib(dn::k_cudnnBackendDestroyDescriptor, HandleArg(d), false); }
  Reply Get(uint64_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::vector<uint64_t> elements) {
    api::ArgWriter w = HandleArg(d);
    w.Put(name);
    w.Put(type);
    w.Put<int64_t>(static_cast<int64_t>(elements.size()));
    w.PutOptional(elements.data(), elements.size() * sizeof(uint64_t));
    return Lib(dn::k_cudnnBackendGetAttribute, w, true);
  }
  uint64_t Tensor(int64_t uid, std::vector<int64_t> dims, bool by_value = false) {
    uint64_t t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    std::vector<int64_t> strides(dims.size(), 1);
    for (size_t i = dims.size() - 1; i > 0; i--) strides[i - 1] = strides[i] * dims[i];
    Set<int32_t>(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, {CUDNN_DATA_FLOAT});
    Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims);
    Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides);
    Set<int64_t>(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, {uid});
    Set<int64_t>(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, {16});
    if (by_value) Set<uint8_t>(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, {1});
    Finalize(t, false);
    return t;
  }
  // y (uid 3) = x (uid 1, 4 floats) * scale (uid 2, a by-value float): the plan, or 0.
  uint64_t ScalePlan() {
    uint64_t x = Tensor(1, {1, 2, 2}), s = Tensor(2, {1, 1, 1}, true), y = Tensor(3, {1, 2, 2});
    uint64_t pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    Set<int32_t>(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, {CUDNN_POINTWISE_MUL});
    Set<int32_t>(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, {CUDNN_DATA_FLOAT});
    Finalize(pw, false);
    uint64_t op = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    Set<uint64_t>(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, {pw});
    Set<uint64_t>(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, {x});
    Set<uint64_t>(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, {s});
    Set<uint64_t>(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, {y});
    Finalize(op, false);
    uint64_t graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    Set<uint64_t>(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, {kHandle});
    Set<uint64_t>(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, {op});
    EXPECT_EQ(Finalize(graph, true).error, Err::kSuccess);
    uint64_t heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    Set<uint64_t>(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, {graph});
    Set<int32_t>(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, {CUDNN_HEUR_MODE_A});
    EXPECT_EQ(Finalize(heur, true).error, Err::kSuccess);
    uint64_t cfg = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    Reply r = Get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, {cfg});
    EXPECT_EQ(r.error, Err::kSuccess) << r.message;
    uint64_t plan = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    Set<uint64_t>(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, {kHandle});
    Set<uint64_t>(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, {cfg});
    Reply f = Finalize(plan, true);
    EXPECT_EQ(f.error, Err::kSuccess) << f.message;
    return f.error == Err::kSuccess ? plan : 0;
  }
  uint64_t Pack(std::vector<uint64_t> ptrs, std::vector<int64_t> uids) {
    uint64_t pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs);
    Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids);
    Finalize(pack, false);
    return pack;
  }
  void Execute(uint64_t plan, uint64_t pack) {
    api::ArgWriter w = HandleArg(kHandle);
    w.Put<uint64_t>(plan);
    w.Put<uint64_t>(pack);
    Lib(dn::k_cudnnBackendExecute, w, false);
  }
  void ExecuteByValue(uint64_t plan, uint64_t pack, const std::vector<std::byte>& values) {
    api::ArgWriter w = HandleArg(kHandle);
    w.Put<uint64_t>(plan);
    w.Put<uint64_t>(pack);
    w.PutArray(values.data(), values.size(), 1);
    w.Put<size_t>(values.size());
    Lib(dn::k_remoraCudnnBackendExecuteByValue, w, false);
  }
  uint64_t Upload(const std::vector<float>& v) {
    Reply a = Alloc(v.size() * sizeof(float));
    EXPECT_EQ(a.error, Err::kSuccess);
    std::vector<std::byte> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    EXPECT_EQ(HtoD(a.pointer, bytes).error, Err::kSuccess);
    return a.pointer;
  }
  std::vector<float> Download(uint64_t p, size_t n) {
    Reply r = DtoH(p, n * sizeof(float));
    std::vector<float> v(n);
    if (r.bulk.size() == n * sizeof(float)) std::memcpy(v.data(), r.bulk.data(), r.bulk.size());
    return v;
  }
  static std::vector<std::byte> Scale(float s, int64_t uid = 2) {
    std::vector<std::byte> blob;
    api::dnn::AppendByValue(&blob, uid, &s, sizeof(s));
    return blob;
  }

  uint64_t next_ = 0;
};

TEST_F(CudnnTest, ByValueScalarsTravelWithTheExecute) {
  uint64_t plan = ScalePlan();
  ASSERT_NE(plan, 0u);
  uint64_t x = Upload({1, 2, 3, 4}), y = Upload({0, 0, 0, 0});
  // The client's host address of the scalar travels in the pack; its bytes with the execute.
  uint64_t pack = Pack({x, 0x7ffc12345678, y}, {1, 2, 3});
  ExecuteByValue(plan, pack, Scale(2.5f));
  Reply sync = StreamSync(0);
  EXPECT_EQ(sync.async_error, Err::kSuccess) << sync.async_message;
  EXPECT_EQ(Download(y, 4), (std::vector<float>{2.5f, 5, 7.5f, 10}));
  // Without the bytes, the host address is refused, never read: the next synchronising call
  // says so, once.
  Execute(plan, pack);
  Reply refused = Ping();
  EXPECT_EQ(refused.async_error, Dnn(CUDNN_STATUS_BAD_PARAM)) << refused.async_message;
  EXPECT_EQ(Ping().async_error, Err::kSuccess) << "reported once";
  EXPECT_EQ(Download(y, 4), (std::vector<float>{2.5f, 5, 7.5f, 10})) << "nothing ran";
}

TEST_F(CudnnTest, MalformedOrForeignByValuesAreRefused) {
  uint64_t plan = ScalePlan();
  ASSERT_NE(plan, 0u);
  uint64_t x = Upload({1, 2, 3, 4}), y = Upload({0, 0, 0, 0});
  uint64_t pack = Pack({x, 0x1000, y}, {1, 2, 3});
  std::vector<std::byte> bad = Scale(1.0f);
  bad.pop_back();  // a record shorter than its size says
  ExecuteByValue(plan, pack, bad);
  EXPECT_EQ(Ping().async_error, Err::kInvalidValue);
  ExecuteByValue(plan, pack, Scale(1.0f, /*uid=*/9));  // not a tensor of the pack
  EXPECT_EQ(Ping().async_error, Dnn(CUDNN_STATUS_BAD_PARAM));
  std::vector<std::byte> twice = Scale(1.0f);
  std::vector<std::byte> again = Scale(2.0f);
  twice.insert(twice.end(), again.begin(), again.end());
  ExecuteByValue(plan, pack, twice);
  EXPECT_EQ(Ping().async_error, Err::kInvalidValue);
  EXPECT_EQ(Download(y, 4), (std::vector<float>{0, 0, 0, 0})) << "nothing ran";
}

TEST_F(CudnnTest, APackPointingOutsideTheSessionNeverReachesTheLibrary) {
  uint64_t plan = ScalePlan();
  ASSERT_NE(plan, 0u);
  uint64_t x = Upload({1, 2, 3, 4}), y = Upload({0, 0, 0, 0});
  Reply freed = Alloc(64);
  ASSERT_EQ(Free(freed.pointer).error, Err::kSuccess);
  for (uint64_t forged : {uint64_t{0x7f0000001000}, freed.pointer}) {
    uint64_t pack = Pack({x, 0x1000, forged}, {1, 2, 3});
    ExecuteByValue(plan, pack, Scale(3.0f));
    Reply sync = StreamSync(0);
    EXPECT_EQ(sync.async_error, Dnn(CUDNN_STATUS_BAD_PARAM)) << std::hex << forged << ": " << sync.async_message;
    EXPECT_NE(sync.async_message.find("not device memory of this session"), std::string::npos) << sync.async_message;
  }
  EXPECT_EQ(Download(y, 4), (std::vector<float>{0, 0, 0, 0}));
}

TEST_F(CudnnTest, APostedSetterFailureIsReportedByTheNextAnsweredCallOnTheDescriptor) {
  uint64_t t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  Set<int32_t>(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT32, {1, 2, 3});  // INT64 is its type
  Set<int64_t>(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, {1});         // skipped meanwhile
  EXPECT_EQ(Ping().async_error, Err::kSuccess) << "not the session's: the descriptor keeps it";
  Reply f = Finalize(t, true);
  EXPECT_EQ(f.error, Dnn(CUDNN_STATUS_BAD_PARAM)) << f.message;
  EXPECT_NE(f.message.find("cudnnBackendSetAttribute"), std::string::npos) << f.message;
  EXPECT_EQ(Ping().async_error, Err::kSuccess) << "reported once";
  // Reported, the descriptor is the library's again: its own state decides.
  Reply again = Finalize(t, true);
  EXPECT_EQ(again.error, Dnn(CUDNN_STATUS_BAD_PARAM)) << "still incomplete: " << again.message;
}

TEST_F(CudnnTest, AFailureMovesToTheDescriptorsThatReferToIt) {
  uint64_t x = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  Finalize(x, false);  // posted, and fails: no attributes
  uint64_t y = Tensor(3, {1, 2, 2});
  uint64_t pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  Set<int32_t>(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, {CUDNN_POINTWISE_IDENTITY});
  Set<int32_t>(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, {CUDNN_DATA_FLOAT});
  Finalize(pw, false);
  uint64_t op = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  Set<uint64_t>(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, {pw});
  Set<uint64_t>(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, {x});
  Set<uint64_t>(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, {y});
  Finalize(op, false);
  uint64_t graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Set<uint64_t>(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, {op});
  Reply f = Finalize(graph, true);
  EXPECT_EQ(f.error, Dnn(CUDNN_STATUS_BAD_PARAM)) << f.message;
  EXPECT_NE(f.message.find("cudnnBackendFinalize"), std::string::npos) << "the tensor's finalize: " << f.message;
  EXPECT_EQ(StreamSync(0).async_error, Err::kSuccess) << "reported once, by the graph";
}

TEST_F(CudnnTest, AFailureOnADestroyedDescriptorGoesToTheNextSynchronisingCall) {
  uint64_t t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  Finalize(t, false);  // fails, posted
  Destroy(t);
  Reply sync = StreamSync(0);
  EXPECT_EQ(sync.async_error, Dnn(CUDNN_STATUS_BAD_PARAM)) << sync.async_message;
  EXPECT_EQ(StreamSync(0).async_error, Err::kSuccess) << "reported once";
}

TEST_F(CudnnTest, AVariantPackThatDoesNotFinalizeFailsItsExecute) {
  uint64_t plan = ScalePlan();
  ASSERT_NE(plan, 0u);
  uint64_t x = Upload({1, 2, 3, 4}), y = Upload({0, 0, 0, 0});
  uint64_t pack = Pack({x, 0x1000, y}, {1, 2});  // fewer ids than pointers: its finalize fails
  ExecuteByValue(plan, pack, Scale(3.0f));
  Reply sync = StreamSync(0);
  EXPECT_EQ(sync.async_error, Dnn(CUDNN_STATUS_BAD_PARAM)) << sync.async_message;
  EXPECT_NE(sync.async_message.find("cudnnBackendFinalize"), std::string::npos) << sync.async_message;
  Destroy(pack);
  EXPECT_EQ(StreamSync(0).async_error, Err::kSuccess) << "the execute reported it; the destroy has nothing left";
}

TEST_F(CudnnTest, ForgedDescriptorIdsInAttributesAreRefused) {
  uint64_t graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Set<uint64_t>(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, {Id(HandleKind::kCudnnBackendDescriptor, 999)});
  Reply f = Finalize(graph, true);
  EXPECT_EQ(f.error, Dnn(CUDNN_STATUS_BAD_PARAM)) << f.message;
  uint64_t t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  Set<uint64_t>(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, {t});  // a descriptor as a handle
  EXPECT_EQ(Finalize(graph, true).error, Dnn(CUDNN_STATUS_BAD_PARAM));
}

}  // namespace
}  // namespace remora::worker::unit

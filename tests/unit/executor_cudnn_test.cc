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
#include "cudnn_known.h"
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
    graph_ = graph;
    heur_ = heur;
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
  uint64_t graph_ = 0, heur_ = 0;  // ScalePlan's
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

// The heuristics' finalize brings back their results, each configuration with its engine's
// index and notes, its knob choices and workspace, as the library answers them one by one.
TEST_F(CudnnTest, AnAnsweredFinalizeBringsBackWhatTheLibraryComputed) {
  uint64_t plan = ScalePlan();
  ASSERT_NE(plan, 0u);
  uint64_t heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  Set<uint64_t>(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, {graph_});
  Set<int32_t>(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, {CUDNN_HEUR_MODE_A});
  api::ArgWriter w = HandleArg(heur);
  w.Put<uint64_t>(api::dnn::kKnownCapacity);
  w.Put<size_t>(api::dnn::kKnownCapacity);
  Reply f = Lib(dn::k_remoraCudnnBackendFinalizeKnown, w, true);
  ASSERT_EQ(f.error, Err::kSuccess) << f.message;
  api::ArgReader r(f.api_result.data(), f.api_result.size());
  std::vector<std::byte> tree(api::dnn::kKnownCapacity);
  r.GetArray(tree.data(), tree.size(), 1);
  size_t n = r.Get<size_t>();
  ASSERT_TRUE(r.Finish().ok());
  ASSERT_GT(n, 0u);
  api::dnn::KnownNode known;
  ASSERT_TRUE(api::dnn::ParseKnown(tree.data(), n, &known));
  EXPECT_EQ(known.type, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const auto& results = known.attrs.at(CUDNN_ATTR_ENGINEHEUR_RESULTS);
  ASSERT_EQ(results.count, 1);  // the host backend's one engine
  ASSERT_EQ(results.children.size(), 1u);
  const auto& cfg = results.children[0];
  EXPECT_EQ(cfg.type, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  EXPECT_EQ(cfg.attrs.at(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES).count, 0);
  EXPECT_EQ(cfg.attrs.at(CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE).bytes.size(), sizeof(int64_t));
  EXPECT_FALSE(cfg.attrs.count(CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED));  // the library does not answer it: left to the library
  const auto& engine = cfg.attrs.at(CUDNN_ATTR_ENGINECFG_ENGINE).children.at(0);
  int64_t index = -1;
  ASSERT_EQ(engine.attrs.at(CUDNN_ATTR_ENGINE_GLOBAL_INDEX).bytes.size(), sizeof(index));
  std::memcpy(&index, engine.attrs.at(CUDNN_ATTR_ENGINE_GLOBAL_INDEX).bytes.data(), sizeof(index));
  EXPECT_EQ(index, 0);
  EXPECT_EQ(engine.attrs.at(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE).count, 0);

  // The client's fill of its own configuration, posted, makes a configuration a plan can use.
  uint64_t mine = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  api::ArgWriter fw = HandleArg(heur);
  fw.Put(CUDNN_ATTR_ENGINEHEUR_RESULTS);
  fw.Put<int64_t>(1);
  uint64_t ids[1] = {mine};
  fw.PutArray(ids, sizeof(ids), 1);
  Lib(dn::k_remoraCudnnBackendFillPosted, fw, false);
  uint64_t again = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  Set<uint64_t>(again, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, {kHandle});
  Set<uint64_t>(again, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, {mine});
  Reply p = Finalize(again, true);
  EXPECT_EQ(p.error, Err::kSuccess) << p.message;
}

// A posted fill naming a descriptor that is not the session's: the failure waits on the
// queried descriptor and is reported by the next answered call on it, once.
TEST_F(CudnnTest, APostedFillOfAForgedDescriptorFailsTheNextAnsweredCall) {
  ASSERT_NE(ScalePlan(), 0u);
  uint64_t heur = heur_;
  api::ArgWriter fw = HandleArg(heur);
  fw.Put(CUDNN_ATTR_ENGINEHEUR_RESULTS);
  fw.Put<int64_t>(1);
  uint64_t ids[1] = {Id(HandleKind::kCudnnBackendDescriptor, 999)};
  fw.PutArray(ids, sizeof(ids), 1);
  Lib(dn::k_remoraCudnnBackendFillPosted, fw, false);
  Reply g = Get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, {});
  EXPECT_EQ(g.error, Dnn(CUDNN_STATUS_BAD_PARAM)) << g.message;
  Reply h = Get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, {});
  EXPECT_EQ(h.error, Err::kSuccess) << h.message;
}

TEST(CudnnKnown, ATreeReadsBackAsWrittenAndAnythingElseIsRefused) {
  api::dnn::KnownNode cfg, root;
  cfg.type = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
  int64_t ws = 4096;
  auto& a = cfg.attrs[CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE];
  a.type = CUDNN_TYPE_INT64;
  a.count = 1;
  a.bytes.resize(sizeof(ws));
  std::memcpy(a.bytes.data(), &ws, sizeof(ws));
  root.type = CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR;
  auto& res = root.attrs[CUDNN_ATTR_ENGINEHEUR_RESULTS];
  res.type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  res.count = 3;  // counted 3, asked for 3, filled 2 (as cuDNN's heuristics do)
  res.asked = 3;
  res.children = {cfg, cfg};
  std::vector<std::byte> bytes;
  api::dnn::AppendKnown(&bytes, root);
  api::dnn::KnownNode back;
  ASSERT_TRUE(api::dnn::ParseKnown(bytes.data(), bytes.size(), &back));
  ASSERT_EQ(back.attrs.at(CUDNN_ATTR_ENGINEHEUR_RESULTS).children.size(), 2u);
  EXPECT_EQ(back.attrs.at(CUDNN_ATTR_ENGINEHEUR_RESULTS).count, 3);
  EXPECT_EQ(back.attrs.at(CUDNN_ATTR_ENGINEHEUR_RESULTS).asked, 3);
  EXPECT_EQ(back.attrs.at(CUDNN_ATTR_ENGINEHEUR_RESULTS).children[1].attrs.at(CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE).bytes, a.bytes);
  for (size_t cut = 0; cut < bytes.size(); cut++) EXPECT_FALSE(api::dnn::ParseKnown(bytes.data(), cut, &back)) << cut;
  bytes.push_back(std::byte{0});
  EXPECT_FALSE(api::dnn::ParseKnown(bytes.data(), bytes.size(), &back));  // trailing bytes
  // Nested deeper than any tree the worker writes.
  api::dnn::KnownNode deep = cfg;
  for (int i = 0; i <= api::dnn::kKnownDepth; i++) {
    api::dnn::KnownNode up;
    up.type = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
    auto& c = up.attrs[CUDNN_ATTR_ENGINECFG_ENGINE];
    c.type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    c.count = 1;
    c.children = {deep};
    deep = up;
  }
  bytes.clear();
  api::dnn::AppendKnown(&bytes, deep);
  EXPECT_FALSE(api::dnn::ParseKnown(bytes.data(), bytes.size(), &back));
  // A child count no input could hold.
  std::vector<std::byte> forged(8 + 4 + 4 + 8 + 8 + 4 + 4, std::byte{0});
  uint32_t one = 1, many = 0xffffffffu;
  std::memcpy(forged.data() + 4, &one, 4);
  std::memcpy(forged.data() + 8 + 4 + 4 + 8 + 8 + 4, &many, 4);
  EXPECT_FALSE(api::dnn::ParseKnown(forged.data(), forged.size(), &back));
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

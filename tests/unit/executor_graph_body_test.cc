// A conditional node's body graphs, as the worker hands them out: cuGraphAddNode answers with
// an array of its own (phGraph_out is CUDA-owned; the host emulation answers the same way),
// and the ids the client gets must name those graphs - nodes can be added to them.
#include <cuda.h>

#include "executor_harness.h"

namespace remora::worker::unit {
namespace {

namespace gen = ::remora::gen::cuda;

class GraphBodyTest : public ExecutorTest {
 protected:
  uint64_t CreateGraph() {
    api::ArgWriter w;
    w.Put<unsigned>(0);
    Reply r = Api(gen::k_cuGraphCreate, w);
    EXPECT_EQ(r.error, Err::kSuccess) << r.message;
    api::ArgReader rd(r.api_result.data(), r.api_result.size());
    return rd.Get<uint64_t>();
  }
  // cuGraphAddNode_v2 as the shim encodes it (protocol/api/cuda_graph_wire.h), no edge data.
  Reply AddNode(uint64_t graph, const std::vector<uint64_t>& deps, const std::function<void(api::ArgWriter&)>& params) {
    api::ArgWriter w;
    w.Put<uint64_t>(graph);
    w.PutArray(deps.data(), deps.size(), sizeof(uint64_t));
    w.Put<uint8_t>(0);
    params(w);
    return Api(gen::k_cuGraphAddNode_v2, w);
  }
};

TEST_F(GraphBodyTest, NodesGoIntoTheBodiesOfAConditionalNode) {
  uint64_t g = CreateGraph();
  ASSERT_NE(g, 0u);
  api::ArgWriter hw;
  hw.Put<uint64_t>(g);
  hw.Put<void*>(nullptr);  // the context: the worker's own
  hw.Put<unsigned>(1);
  hw.Put<unsigned>(CU_GRAPH_COND_ASSIGN_DEFAULT);
  Reply h = Api(gen::k_cuGraphConditionalHandleCreate, hw);
  ASSERT_EQ(h.error, Err::kSuccess) << h.message;
  uint64_t handle = api::ArgReader(h.api_result.data(), h.api_result.size()).Get<uint64_t>();

  for (uint32_t size : {1u, 2u}) {
    Reply c = AddNode(g, {}, [&](api::ArgWriter& w) {
      w.Put<uint32_t>(CU_GRAPH_NODE_TYPE_CONDITIONAL);
      w.Put<uint64_t>(handle);
      w.Put<uint32_t>(CU_GRAPH_COND_TYPE_IF);
      w.Put<uint32_t>(size);
    });
    ASSERT_EQ(c.error, Err::kSuccess) << c.message;
    api::ArgReader rd(c.api_result.data(), c.api_result.size());
    uint64_t node = rd.Get<uint64_t>();
    EXPECT_NE(node, 0u);
    ASSERT_EQ(rd.Get<uint64_t>(), size);
    std::vector<uint64_t> bodies;
    for (uint32_t i = 0; i < size; i++) bodies.push_back(rd.Get<uint64_t>());
    ASSERT_TRUE(rd.Finish().ok());
    for (uint64_t body : bodies) {
      EXPECT_NE(body, 0u);
      EXPECT_NE(body, g);
      // An empty node, then one after it: the body is a live graph of the session.
      Reply e = AddNode(body, {}, [](api::ArgWriter& w) { w.Put<uint32_t>(CU_GRAPH_NODE_TYPE_EMPTY); });
      ASSERT_EQ(e.error, Err::kSuccess) << e.message;
      uint64_t first = api::ArgReader(e.api_result.data(), e.api_result.size()).Get<uint64_t>();
      Reply e2 = AddNode(body, {first}, [](api::ArgWriter& w) { w.Put<uint32_t>(CU_GRAPH_NODE_TYPE_EMPTY); });
      EXPECT_EQ(e2.error, Err::kSuccess) << e2.message;
    }
    if (size == 2) {
      EXPECT_NE(bodies[0], bodies[1]);
    }
  }
}

}  // namespace
}  // namespace remora::worker::unit

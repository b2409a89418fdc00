// shim/census: the call census a bench reads per interval (REMORA_CALL_STATS=FILE): requests
// counted by name and by whether they waited, intervals between cudaProfilerStart and
// cudaProfilerStop (the markers themselves outside), the application's synchronisations apart
// from the other round trips, and the JSON lines written to the file.
#include "census.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cuda_wire.h"
#include "cudnn_wire.h"
#include "remora/protocol/message.h"

namespace remora::shim {
namespace {

// Counts one request built by `fill`.
template <typename F>
void Count(Census& c, bool round_trip, F&& fill) {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  fill(req);
  c.Count(req.asReader(), round_trip);
}
void Api(Census& c, uint16_t library, uint32_t function, bool round_trip) {
  Count(c, round_trip, [&](wire::Request::Builder r) {
    auto a = r.initApiCall();
    a.setLibrary(library);
    a.setFunction(function);
  });
}
void Marker(Census& c, uint32_t function) { Api(c, gen::cuda::kLibrary, function, true); }

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

class CensusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/remora-census-XXXXXX";
    int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(CensusTest, AnIntervalCountsWhatIsBetweenTheProfilerMarkers) {
  Census c(path_);
  Api(c, gen::cudnn::kLibrary, gen::cudnn::k_cudnnBackendSetAttribute, false);  // before: the session's only
  Marker(c, gen::cuda::k_cuProfilerStart);
  for (int i = 0; i < 3; i++) {
    Api(c, gen::cudnn::kLibrary, gen::cudnn::k_cudnnBackendSetAttribute, false);
    Api(c, gen::cudnn::kLibrary, gen::cudnn::k_cudnnBackendExecute, false);
  }
  Api(c, gen::cudnn::kLibrary, gen::cudnn::k_cudnnBackendGetAttribute, true);     // Remora's round trip
  Api(c, gen::cuda::kLibrary, gen::cuda::k_cuStreamSynchronize, true);            // the application's
  Count(c, true, [](wire::Request::Builder r) { r.initMemcpyDtoH().setSize(4); });  // .item()
  Census::Totals t = c.interval();
  EXPECT_EQ(t.messages, 9u);
  EXPECT_EQ(t.posted, 6u);
  EXPECT_EQ(t.round_trips, 3u);
  EXPECT_EQ(t.synchronising, 2u) << "the stream synchronisation and the copy into host memory";
  Marker(c, gen::cuda::k_cuProfilerStop);
  Api(c, gen::cudnn::kLibrary, gen::cudnn::k_cudnnBackendExecute, false);  // after: not in the interval
  EXPECT_EQ(c.interval().messages, 9u);
  EXPECT_EQ(c.session().messages, 13u) << "everything, the markers included";

  std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), 1u) << "one line per interval, at its stop";
  const std::string& l = lines[0];
  EXPECT_NE(l.find("\"interval\": 1,"), std::string::npos) << l;
  EXPECT_NE(l.find("\"messages\": 9,"), std::string::npos) << l;
  EXPECT_NE(l.find("\"other_round_trips\": 1,"), std::string::npos) << l;
  EXPECT_NE(l.find("{\"call\": \"cudnnBackendSetAttribute\", \"round_trips\": 0, \"posted\": 3, \"synchronising\": false}"),
            std::string::npos) << l;
  EXPECT_NE(l.find("{\"call\": \"cudnnBackendGetAttribute\", \"round_trips\": 1, \"posted\": 0, \"synchronising\": false}"),
            std::string::npos) << l;
  EXPECT_NE(l.find("{\"call\": \"cuStreamSynchronize\", \"round_trips\": 1, \"posted\": 0, \"synchronising\": true}"),
            std::string::npos) << l;
  EXPECT_NE(l.find("{\"call\": \"memcpyDtoH\", \"round_trips\": 1, \"posted\": 0, \"synchronising\": true}"), std::string::npos) << l;

  c.Report();
  c.Report();  // once
  lines = Lines(path_);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("\"interval\": \"session\", \"messages\": 13,"), std::string::npos) << lines[1];
}

TEST_F(CensusTest, EachStartBeginsAFreshInterval) {
  Census c(path_);
  for (int round = 1; round <= 2; round++) {
    Marker(c, gen::cuda::k_cuProfilerStart);
    for (int i = 0; i < round; i++) Api(c, gen::cudnn::kLibrary, gen::cudnn::k_cudnnBackendFinalize, false);
    Marker(c, gen::cuda::k_cuProfilerStop);
  }
  std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("\"interval\": 1, \"messages\": 1,"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"interval\": 2, \"messages\": 2,"), std::string::npos) << lines[1];
}

TEST_F(CensusTest, DetailsAreCountedPerIntervalAndOnlyWhenNoted) {
  Census c(path_);
  Marker(c, gen::cuda::k_cuProfilerStart);
  Api(c, gen::cudnn::kLibrary, gen::cudnn::k_cudnnBackendGetAttribute, true);
  c.Detail("attribute 1302 of \"engine\"");
  c.Detail("attribute 1302 of \"engine\"");
  Marker(c, gen::cuda::k_cuProfilerStop);
  Marker(c, gen::cuda::k_cuProfilerStart);
  Api(c, gen::cudnn::kLibrary, gen::cudnn::k_cudnnBackendGetAttribute, true);
  Marker(c, gen::cuda::k_cuProfilerStop);
  std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("\"details\": {\"attribute 1302 of \\\"engine\\\"\": 2}"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].find("details"), std::string::npos) << lines[1];
  EXPECT_NE(c.SessionLine().find("\": 2}"), std::string::npos) << c.SessionLine();
}

TEST_F(CensusTest, UnknownRequestsAndFunctionsAreNamedByNumber) {
  Census c(path_);
  Marker(c, gen::cuda::k_cuProfilerStart);
  Api(c, 4, 9999, true);
  Api(c, 77, 1, false);
  std::string l = c.IntervalLine();
  EXPECT_NE(l.find("\"apiCall library 4 @9999\""), std::string::npos) << l;
  EXPECT_NE(l.find("\"apiCall library 77 @1\""), std::string::npos) << l;
}

}  // namespace
}  // namespace remora::shim

// server/worker/calls/generated_call.h: how large the output arrays of one generated call may
// be. Results over a reply's size are held and read back in pieces, so one output may be far
// larger than a request's arguments (cuSolverRf's L factor: 5.4 MB), while the call's outputs
// together stay within what a session may hold as one result; a client asking for more is
// refused before anything is allocated, and the session goes on.
#include <gtest/gtest.h>

#include "executor_harness.h"
#include "remora/protocol/api_args.h"

namespace remora::worker::unit {
namespace {

namespace cu = ::remora::gen::cuda;

// remoraHeldResultPiece (cuda.api @194) of `size` bytes of an unknown held result: its output
// array's capacity is decoded (OutArray) before the hook looks the result up.
api::ArgWriter Piece(uint64_t size) {
  api::ArgWriter w;
  w.Put<int>(0);            // device
  w.Put<uint64_t>(12345);   // id: none held
  w.Put<uint64_t>(0);       // offset
  w.Put<uint64_t>(size);    // the output's capacity
  w.Put<uint64_t>(size);    // size
  return w;
}

class OutputsTest : public ExecutorTest {};

TEST_F(OutputsTest, AnOutputLargerThanARequestsArgumentsIsAccepted) {
  // 8 MiB: past api::kMaxArgBytes. The hook then refuses the piece for what it is (larger than
  // a piece, and no such result) - not the request as malformed.
  Reply r = Api(cu::k_remoraHeldResultPiece, Piece(2 * api::kMaxArgBytes));
  EXPECT_EQ(r.error, Err::kInvalidValue);
  EXPECT_EQ(r.message.find("malformed"), std::string::npos) << r.message;
}

TEST_F(OutputsTest, OutputsBeyondWhatACallMayReturnAreRefusedAndTheSessionGoesOn) {
  Reply r = Api(cu::k_remoraHeldResultPiece, Piece(api::kMaxHeldResultBytes + 1));
  EXPECT_EQ(r.error, Err::kInvalidValue);
  EXPECT_NE(r.message.find("beyond"), std::string::npos) << r.message;
  EXPECT_EQ(Ping().error, Err::kSuccess);
}

// Arguments sent ahead in pieces (remoraStageArgsPiece, posted) and named by the call.
class StagedArgsTest : public ExecutorTest {
 protected:
  void Piece(uint64_t id, uint64_t total, uint64_t offset, const std::vector<std::byte>& bytes) {
    api::ArgWriter w;
    w.Put<int>(0);
    w.Put<uint64_t>(id);
    w.Put<uint64_t>(total);
    w.Put<uint64_t>(offset);
    w.Put<uint64_t>(bytes.size());
    w.Put<uint8_t>(1);  // the bytes are there
    w.Append(bytes.data(), bytes.size());
    Api(cu::k_remoraStageArgsPiece, w, false);
  }
  Reply CallStaged(cu::Fn fn, uint64_t id) {
    return Call([&](wire::Request::Builder r) {
      auto a = r.initApiCall();
      a.setLibrary(cu::kLibrary);
      a.setFunction(fn);
      a.setStagedArgs(id);
    });
  }
};

TEST_F(StagedArgsTest, ACallTakesItsArgumentsSentAhead) {
  const api::ArgWriter query = StreamArg(0);  // cuStreamQuery of the default stream
  const std::vector<std::byte>& args = query.bytes();
  Piece(41, args.size(), 0, {args.begin(), args.begin() + 4});
  Piece(41, args.size(), 4, {args.begin() + 4, args.end()});
  EXPECT_EQ(CallStaged(cu::k_cuStreamQuery, 41).error, Err::kSuccess);
  Reply again = CallStaged(cu::k_cuStreamQuery, 41);
  EXPECT_EQ(again.error, Err::kInvalidValue) << "taken by the first call";
  EXPECT_NE(again.message.find("no staged arguments"), std::string::npos) << again.message;
}

TEST_F(StagedArgsTest, ForgedOrIncompleteArgumentsAreRefusedAndTheSessionGoesOn) {
  Reply forged = CallStaged(cu::k_cuStreamQuery, 999);
  EXPECT_EQ(forged.error, Err::kInvalidValue);
  Piece(5, 100, 0, std::vector<std::byte>(9));
  Reply part = CallStaged(cu::k_cuStreamQuery, 5);
  EXPECT_EQ(part.error, Err::kInvalidValue);
  EXPECT_NE(part.message.find("9 of their 100"), std::string::npos) << part.message;
  EXPECT_EQ(Ping().error, Err::kSuccess);
  EXPECT_EQ(StreamQuery(0).error, Err::kSuccess);
}

}  // namespace
}  // namespace remora::worker::unit

// A bulk transfer that fails part-way (the transport's staging allocation refused, as
// cuMemHostAlloc is while a global-mode stream capture is in progress) fails its own call
// only: the executor drains the rest of the request's bulk, answers the error and the session
// goes on. The fault is injected behind the Connection interface; the rest is the real
// executor on the host-emulated driver.
#include <cuda.h>  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: the code the real failure carries

#include <atomic>
#include <cstring>

#include "executor_harness.h"

namespace remora::worker::unit {
namespace {

// Forwards to the executor's real end of the connection, but hands each incoming bulk out in
// slices of kSlice bytes (as the TCP transport does with its staging chunks) and, when armed,
// refuses the slice number `fail_at` once, leaving its bytes unread as TCP leaves them in the
// socket.
class FaultyBulkConnection final : public Connection {
 public:
  static constexpr size_t kSlice = 64 << 10;

  explicit FaultyBulkConnection(std::unique_ptr<Connection> c) : c_(std::move(c)) {}
  void Arm(int fail_at) { fail_at_.store(fail_at); }
  int failures() const { return failures_.load(); }

  const Capabilities& capabilities() const override { return c_->capabilities(); }
  std::string Describe() const override { return c_->Describe(); }
  Status Send(const OutFrame& f, ConstBytes bulk, MutableBytes reply_bulk) override { return c_->Send(f, bulk, reply_bulk); }
  Result<InFrame> Receive(int timeout_ms) override { return c_->Receive(timeout_ms); }
  Status Flush() override { return c_->Flush(); }
  Status ReceiveBulk(MutableBytes dst) override { return c_->ReceiveBulk(dst); }
  void SetStaging(StagingAllocator* s) override { c_->SetStaging(s); }
  std::vector<SharedRegion> SharedRegions() const override { return c_->SharedRegions(); }
  Result<std::optional<InFrame>> Poll() override {
    ASSIGN_OR_RETURN(std::optional<InFrame> f, c_->Poll());
    if (f) slice_ = 0;
    return f;
  }
  Result<std::optional<BulkChunk>> PollBulkChunk() override {
    if (rest_.size == 0) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> whole, c_->PollBulkChunk());
      if (!whole) return whole;
      rest_ = *whole;
      parent_ = *whole;
    }
    if (fail_at_.load() == slice_) {
      fail_at_.store(-1);
      failures_++;
      return Status(Domain::kCuda, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuMemHostAlloc (injected)");
    }
    slice_++;
    size_t n = std::min(kSlice, rest_.size);
    BulkChunk c{rest_.data, n, rest_.offset, rest_.id};
    rest_.data += n;
    rest_.size -= n;
    rest_.offset += n;
    if (rest_.size == 0) c_->ReleaseBulkChunk(parent_);
    return std::optional<BulkChunk>(c);
  }
  void ReleaseBulkChunk(const BulkChunk&) override {}  // slices of a chunk released whole above
  Status Post(const OutFrame& f, uint64_t bulk_bytes) override { return c_->Post(f, bulk_bytes); }
  Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t max) override { return c_->AcquireBulkChunk(max); }
  Status CommitBulkChunk(const BulkChunk& chunk, size_t bytes) override { return c_->CommitBulkChunk(chunk, bytes); }
  Result<bool> Progress() override { return c_->Progress(); }
  void WaitForActivity(int64_t timeout_us) override { c_->WaitForActivity(timeout_us); }

 private:
  std::unique_ptr<Connection> c_;
  BulkChunk rest_{}, parent_{};
  int slice_ = 0;
  std::atomic<int> fail_at_{-1};
  std::atomic<int> failures_{0};
};

class TransferFaultTest : public ExecutorTest {
 protected:
  TransferFaultTest() {
    wrap_connection_ = [this](std::unique_ptr<Connection> c) {
      auto f = std::make_unique<FaultyBulkConnection>(std::move(c));
      faulty_ = f.get();
      return std::unique_ptr<Connection>(std::move(f));
    };
  }
  FaultyBulkConnection* faulty_ = nullptr;
};

TEST_F(TransferFaultTest, AFailedTransferFailsItsCallAndTheSessionGoesOn) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  auto before = test::RandomBytes(300000, 1);
  ASSERT_EQ(HtoD(a.pointer, before).error, Err::kSuccess);

  // The third slice of the next copy is refused: the copy fails with the driver's code...
  faulty_->Arm(2);
  auto data = test::RandomBytes(300000, 2);
  Reply w = HtoD(a.pointer, data);
  EXPECT_EQ(faulty_->failures(), 1);
  EXPECT_NE(w.error, Err::kSuccess) << "a copy whose bytes could not all be taken in reported success";
  EXPECT_EQ(w.error_domain, static_cast<uint16_t>(Domain::kCuda));
  EXPECT_NE(w.message.find("cuMemHostAlloc"), std::string::npos) << w.message;

  // ...and the session goes on, in step with the client: the next calls work.
  EXPECT_FALSE(run_done_.load()) << run_status_.ToString();
  EXPECT_EQ(Ping().error, Err::kSuccess);
  auto after = test::RandomBytes(300000, 3);
  Reply w2 = HtoD(a.pointer, after);
  ASSERT_EQ(w2.error, Err::kSuccess) << w2.message;
  Reply r = DtoH(a.pointer, after.size());
  ASSERT_EQ(r.error, Err::kSuccess) << r.message;
  ASSERT_EQ(r.bulk.size(), after.size());
  EXPECT_EQ(std::memcmp(r.bulk.data(), after.data(), after.size()), 0);
}

TEST_F(TransferFaultTest, AFailureOnTheFirstSliceDrainsTheWholeCopy) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  faulty_->Arm(0);
  Reply w = HtoD(a.pointer, test::RandomBytes(200000, 4));
  EXPECT_NE(w.error, Err::kSuccess);
  auto data = test::RandomBytes(1000, 5);
  ASSERT_EQ(HtoD(a.pointer, data).error, Err::kSuccess);
  Reply r = DtoH(a.pointer, data.size());
  ASSERT_EQ(r.bulk.size(), data.size());
  EXPECT_EQ(std::memcmp(r.bulk.data(), data.data(), data.size()), 0);
  EXPECT_FALSE(run_done_.load()) << run_status_.ToString();
}

}  // namespace
}  // namespace remora::worker::unit

// base/: sizes (ParseSize/FormatSize), Status/Result and the error-propagation macros.
#include <gtest/gtest.h>

// GCC 12 reports a false -Wmaybe-uninitialized in std::variant<int, Status>'s destructor
// when a Result<int> is built from a constant in the same function (clang has no such warning).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <memory>
#include <set>

#include "remora/base/status.h"
#include "remora/base/util.h"

namespace remora {
namespace {

constexpr uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;

uint64_t SizeOf(std::string_view s) {
  auto r = ParseSize(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().ToString();
  if (!r.ok() || !r->has_value()) {
    ADD_FAILURE() << s << " did not parse to a number";
    return 0;
  }
  return **r;
}

// Every documented spelling parses to the binary multiple (cgroup style: "k" is 1024).
TEST(ParseSize, AcceptsPlainAndSuffixedSizes) {
  EXPECT_EQ(SizeOf("4096"), 4096u);
  EXPECT_EQ(SizeOf("0"), 0u);
  EXPECT_EQ(SizeOf("512MiB"), 512 * MiB);
  EXPECT_EQ(SizeOf("8GiB"), 8 * GiB);
  EXPECT_EQ(SizeOf("1.5G"), 3 * GiB / 2);
  EXPECT_EQ(SizeOf("64k"), 64 * KiB);
  EXPECT_EQ(SizeOf("64KB"), 64 * KiB);
  EXPECT_EQ(SizeOf("2T"), 2 * TiB);
  EXPECT_EQ(SizeOf("100b"), 100u);
  EXPECT_EQ(SizeOf("3 MiB"), 3 * MiB);          // a space before the unit
  EXPECT_EQ(SizeOf("  16m\n"), 16 * MiB);       // surrounding whitespace (files, echo)
  EXPECT_EQ(SizeOf("0.5k"), 512u);
}

// Found by fuzz target `parse`: integers past 2^63 came back wrong (llround overflowed), and
// FormatSize's PiB did not parse back.
TEST(ParseSize, LargeValuesAreExactAndRoundTrip) {
  EXPECT_EQ(SizeOf("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(SizeOf("9223372036854775809"), 9223372036854775809ull);
  EXPECT_EQ(SizeOf("16383PiB"), 16383 * 1024 * TiB);
  EXPECT_EQ(SizeOf("1.5PiB"), 1536 * TiB);
  // (FormatSize rounds: within 0.05% of 2^64 it prints a size that no longer fits.)
  for (uint64_t v : {uint64_t{1} << 50, uint64_t{3} << 52, uint64_t{UINT64_MAX / 3}, UINT64_MAX - (UINT64_MAX >> 11)}) {
    uint64_t back = SizeOf(FormatSize(v));
    EXPECT_GE(static_cast<long double>(back), static_cast<long double>(v) * 0.95L) << FormatSize(v);
    EXPECT_LE(static_cast<long double>(back), static_cast<long double>(v) * 1.05L) << FormatSize(v);
  }
  for (const char* s : {"18446744073709551616", "16384PiB", "16EiB", "17179869184G"}) {
    auto r = ParseSize(s);
    EXPECT_FALSE(r.ok()) << s << " parsed to " << (r.ok() && r->has_value() ? **r : 0);
  }
}

// Found by fuzz target `remorafs_path`: what a user wrote came back verbatim in the message,
// newlines included (an error message, and the log line it goes to, is one line).
TEST(ParseSize, ErrorsQuoteTheTextPrintably) {
  auto r = ParseSize("12 parsecs\nfake log line\x1b[31m");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find('\x1b'), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("\\x0a"), std::string::npos) << r.status().message();
  EXPECT_EQ(Printable("ok 'text'"), "ok 'text'");
  EXPECT_EQ(Printable(std::string(300, 'a')).size(), 128u + 3);
  EXPECT_EQ(Printable("\\"), "\\x5c");
}

// "max" and "unlimited" mean no limit: an OK result holding nullopt (not 0, not an error).
TEST(ParseSize, MaxMeansUnlimited) {
  for (const char* s : {"max", "unlimited", "max\n"}) {
    auto r = ParseSize(s);
    ASSERT_TRUE(r.ok()) << s;
    EXPECT_FALSE(r->has_value()) << s;
  }
}

// Everything that is not a size is kInvalidValue, never a silently wrong number.
TEST(ParseSize, RejectsGarbage) {
  for (const char* s : {"", "   ", "abc", "-5", "-1G", "1.5", "1.5B", "10XB", "12 parsecs", "1.2.3M",
                        ".", "k", "G5", "1e3", "nan", "inf", "0x10", "99999999999999999999",
                        "20000000T"}) {
    auto r = ParseSize(s);
    EXPECT_FALSE(r.ok()) << "'" << s << "' parsed to " << (r.ok() && r->has_value() ? **r : 0);
    if (!r.ok()) { EXPECT_EQ(r.status().code(), Err::kInvalidValue) << s; }
  }
}

TEST(FormatSize, UsesBinaryUnitsWithOneDecimalWhenNeeded) {
  EXPECT_EQ(FormatSize(0), "0 B");
  EXPECT_EQ(FormatSize(1023), "1023 B");
  EXPECT_EQ(FormatSize(1024), "1 KiB");
  EXPECT_EQ(FormatSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatSize(512 * MiB), "512 MiB");
  EXPECT_EQ(FormatSize(8 * GiB), "8 GiB");
  EXPECT_EQ(FormatSize(3 * TiB / 2), "1.5 TiB");
}

// Whatever FormatSize prints for a whole number of units parses back to the same value
// (modulo the space, which ParseSize accepts).
TEST(FormatSize, RoundTripsThroughParseSize) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{4096}, 64 * KiB, 3 * MiB / 2, 8 * GiB, 2 * TiB}) {
    EXPECT_EQ(SizeOf(FormatSize(v)), v) << FormatSize(v);
  }
}

TEST(Status, DefaultIsOkAndErrorsCarryCodeAndMessage) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.code(), Err::kSuccess);
  EXPECT_EQ(ok.ToString(), "cudaSuccess");

  Status e = Error(Err::kMemoryAllocation, "need {} more", 42);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), Err::kMemoryAllocation);
  EXPECT_EQ(e.message(), "need 42 more");
  EXPECT_EQ(e.ToString(), "cudaErrorMemoryAllocation: need 42 more");
  EXPECT_EQ(Status(Err::kTimeout, "").ToString(), "cudaErrorTimeout");
}

// Codes are the numbers of cudaError_t: the shim casts them.
TEST(Status, ErrCodesMatchCudaErrorNumbers) {
  EXPECT_EQ(static_cast<uint32_t>(Err::kInvalidValue), 1u);
  EXPECT_EQ(static_cast<uint32_t>(Err::kMemoryAllocation), 2u);
  EXPECT_EQ(static_cast<uint32_t>(Err::kDevicesUnavailable), 46u);
  EXPECT_EQ(static_cast<uint32_t>(Err::kNoDevice), 100u);
  EXPECT_EQ(static_cast<uint32_t>(Err::kNotReady), 600u);
  EXPECT_EQ(static_cast<uint32_t>(Err::kNotSupported), 801u);
}

TEST(ErrName, NamesKnownCodesAndFallsBackForOthers) {
  EXPECT_EQ(ErrName(Err::kSuccess), "cudaSuccess");
  EXPECT_EQ(ErrName(Err::kInvalidValue), "cudaErrorInvalidValue");
  EXPECT_EQ(ErrName(Err::kDevicesUnavailable), "cudaErrorDevicesUnavailable");
  EXPECT_EQ(ErrName(Err::kNoDevice), "cudaErrorNoDevice");
  EXPECT_EQ(ErrName(Err::kUnknown), "cudaErrorUnknown");
  // A code Remora has no name for (e.g. a newer driver's) still formats, with its number.
  Err other = static_cast<Err>(12345);
  EXPECT_EQ(ErrName(other), "cudaError(other)");
  EXPECT_EQ(Status(other, "x").ToString(), "cudaError(12345): x");
  // Every named code has a distinct "cudaError..." name.
  std::set<std::string_view> seen;
  for (uint32_t c = 0; c < 1000; c++) {
    std::string_view n = ErrName(static_cast<Err>(c));
    if (n == "cudaError(other)") continue;
    EXPECT_TRUE(n.rfind("cuda", 0) == 0) << c;
    EXPECT_TRUE(seen.insert(n).second) << "duplicate name " << n;
  }
  EXPECT_GE(seen.size(), 30u);
}

TEST(Result, HoldsValueOrError) {
  Result<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  EXPECT_TRUE(v.status().ok());

  Result<std::string> e = Error(Err::kInvalidValue, "bad");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Err::kInvalidValue);
  Status taken = e.take_status();
  EXPECT_EQ(taken.message(), "bad");
}

// A Result built from an OK Status would claim success without a value: it becomes an error.
TEST(Result, FromOkStatusIsAnError) {
  Result<int> r = Status::Ok();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kUnknown);
}

Status FailsWith(Err code, int* calls) {
  (*calls)++;
  return code == Err::kSuccess ? Status::Ok() : Status(code, "inner");
}

Status UsesReturnIfError(Err code, int* calls, bool* reached_end) {
  RETURN_IF_ERROR(FailsWith(code, calls));
  *reached_end = true;
  return Status::Ok();
}

TEST(Macros, ReturnIfErrorPropagatesAndEvaluatesOnce) {
  int calls = 0;
  bool end = false;
  Status s = UsesReturnIfError(Err::kNotReady, &calls, &end);
  EXPECT_EQ(s.code(), Err::kNotReady);
  EXPECT_EQ(s.message(), "inner");
  EXPECT_FALSE(end);
  EXPECT_EQ(calls, 1);

  calls = 0;
  EXPECT_TRUE(UsesReturnIfError(Err::kSuccess, &calls, &end).ok());
  EXPECT_TRUE(end);
  EXPECT_EQ(calls, 1);
}

Result<std::unique_ptr<int>> MakeBox(bool fail, int v) {
  if (fail) return Error(Err::kMemoryAllocation, "no box");
  return std::make_unique<int>(v);
}

Result<int> Sum(bool fail_first, bool fail_second) {
  ASSIGN_OR_RETURN(auto a, MakeBox(fail_first, 2));      // move-only values work
  ASSIGN_OR_RETURN(std::unique_ptr<int> b, MakeBox(fail_second, 3));
  return *a + *b;
}

TEST(Macros, AssignOrReturnBindsValueOrReturnsStatus) {
  auto ok = Sum(false, false);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 5);
  auto e1 = Sum(true, false);
  ASSERT_FALSE(e1.ok());
  EXPECT_EQ(e1.status().code(), Err::kMemoryAllocation);
  EXPECT_EQ(e1.status().message(), "no box");
  EXPECT_FALSE(Sum(false, true).ok());
}

}  // namespace
}  // namespace remora

// core/log: print0 writes on rank 0 only, one flushed line to stdout; warn writes on every rank to
// stderr and names the rank once there is more than one; the process is rank 0 of 1 until told.
#include "core/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace nanoddp {
namespace {

using ::testing::internal::CaptureStderr;
using ::testing::internal::CaptureStdout;
using ::testing::internal::GetCapturedStderr;
using ::testing::internal::GetCapturedStdout;

// Each test leaves the process as it found it: rank 0 of 1.
class Log : public ::testing::Test {
 protected:
  void TearDown() override { log::set_rank(0, 1); }
};

// Before set_rank (or after a test restored it): rank 0 of 1, so single-process tools print.
TEST_F(Log, RanksAreSetAndReadBack) {
  EXPECT_EQ(log::rank(), 0);
  EXPECT_EQ(log::world_size(), 1);
  EXPECT_TRUE(log::is_primary());
  log::set_rank(3, 4);
  EXPECT_EQ(log::rank(), 3);
  EXPECT_EQ(log::world_size(), 4);
  EXPECT_FALSE(log::is_primary());
}

TEST_F(Log, Print0WritesOnRankZeroOnly) {
  for (int rank : {0, 1, 3}) {
    log::set_rank(rank, 4);
    CaptureStdout();
    CaptureStderr();
    log::print0("step {} loss {:.2f}", 7, 1.5);
    log::print0_line("done");
    const std::string out = GetCapturedStdout(), err = GetCapturedStderr();
    EXPECT_EQ(out, rank == 0 ? "step 7 loss 1.50\ndone\n" : "") << "rank " << rank;
    EXPECT_EQ(err, "") << "rank " << rank;
  }
}

// Off a terminal (a file, the launcher's pipe) the live line is an ordinary line, so logs keep
// every step, and ending it adds nothing.
TEST_F(Log, StatusLineOffATerminalIsAPrint0Line) {
  if (::isatty(STDOUT_FILENO) == 1) GTEST_SKIP() << "stdout is a terminal: the live line is rewritten in place";
  for (int rank : {0, 2}) {
    log::set_rank(rank, 3);
    CaptureStdout();
    log::status0("step 1");
    log::status0("step 2");
    log::end_status0();
    EXPECT_EQ(GetCapturedStdout(), rank == 0 ? "step 1\nstep 2\n" : "") << "rank " << rank;
  }
}

TEST_F(Log, WarningsComeFromEveryRankAndNameItWhenThereAreSeveral) {
  log::set_rank(2, 4);
  CaptureStdout();
  CaptureStderr();
  log::warn("shard {} is short", 5);
  EXPECT_EQ(GetCapturedStderr(), "[rank 2] warning: shard 5 is short\n");
  EXPECT_EQ(GetCapturedStdout(), "");
  log::set_rank(0, 1);
  CaptureStderr();
  log::warn_line("alone");
  EXPECT_EQ(GetCapturedStderr(), "warning: alone\n");
}

// Any thread may log: lines from several threads arrive whole, none lost.
TEST_F(Log, LinesFromThreadsDoNotInterleave) {
  log::set_rank(0, 2);
  const int threads = 4, lines = 300;
  CaptureStdout();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++)
    pool.emplace_back([t] {
      for (int i = 0; i < lines; i++) log::print0("thread {} line {} {}", t, i, std::string(64, 'a' + t));
    });
  for (auto& th : pool) th.join();
  std::istringstream out(GetCapturedStdout());
  std::set<std::string> seen;
  for (std::string line; std::getline(out, line);) {
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "thread %d line %d", &t, &i), 2) << line;
    EXPECT_EQ(line, fmt::format("thread {} line {} {}", t, i, std::string(64, 'a' + t)));
    seen.insert(line);
  }
  EXPECT_EQ(seen.size(), size_t{threads * lines});
}

}  // namespace
}  // namespace nanoddp

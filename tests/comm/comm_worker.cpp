// A rank of the multi-process tests (tests/comm/test_multiprocess.cpp), started N times with the
// launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) or by mpirun. It joins the job
// through init_distributed, like `nanoddp train` does, and runs one scenario:
//   collectives BACKEND  every collective against exact values      -> exit 0, "rank R: ok"
//   stall BACKEND        the last rank stops after collective #1   -> others exit 3 with the error
//   crash BACKEND        the last rank exits after collective #1   -> others exit 3 with the error
//   freeze BACKEND       the last rank stops itself (SIGSTOP) inside collective #2, after its
//                        heartbeat has published it                 -> others exit 3 with the error
//   consistency BACKEND  rank 1 has another --depth                -> every rank exits 4
//   die BACKEND          the last rank exits (code 7) while collective #2, a large allreduce, is
//                        in flight on every rank                   -> the others stop, naming it
// NANODDP_TEST_TIMEOUT sets the collective timeout in seconds (default 30). In `die`, SIGTERM and
// SIGINT are recorded and otherwise ignored, as the trainer does (it stops at the next step
// boundary), and passed on to the process groups' watches (note_stop_signal).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "collective_checks.h"
#include "core/error.h"
#include "comm/collective_watch.h"
#include "comm/consistency.h"
#include "comm/init.h"

using namespace nanoddp;
using namespace nanoddp::dist;

namespace {

extern "C" void on_stop_signal(int sig) { note_stop_signal(sig); }

int run(const std::string& scenario, DistContext& ctx, const DistOptions& options) {
  ProcessGroup& pg = *ctx.group;
  const int last = pg.size() - 1;
  if (scenario == "collectives") {
    check_consistent(pg, build_fingerprint(), "install the same nanoddp build on every node");
    testing::CheckOptions checks;
    checks.large = (1 << 18) + 3;
    checks.salt = 7;
    auto failures = testing::check_all_collectives(pg, checks);
    for (auto& f : failures) std::fprintf(stderr, "%s\n", f.c_str());
    std::printf("rank %d: %s (%s, %s)\n", pg.rank(), failures.empty() ? "ok" : "FAILED", ctx.backend.c_str(),
                ctx.env.describe().c_str());
    return failures.empty() ? 0 : 1;
  }
  if (scenario == "stall" || scenario == "crash") {
    Tensor t = Tensor::zeros({1 << 18}, DType::F32);
    pg.allreduce(t, ReduceOp::Sum)->wait();  // #1, everyone
    if (pg.rank() == last) {
      std::printf("rank %d: %s\n", pg.rank(), scenario == "stall" ? "stalling" : "exiting");
      std::fflush(stdout);
      if (scenario == "crash") std::_Exit(7);
      std::this_thread::sleep_for(std::chrono::seconds(120));  // the test kills it long before
      return 0;
    }
    pg.allreduce(t, ReduceOp::Sum)->wait();  // #2: the last rank never comes
    std::printf("rank %d: collective #2 completed without the last rank\n", pg.rank());
    return 1;
  }
  if (scenario == "freeze") {
    // The last rank issues #2 at once and freezes in it after three heartbeat intervals (its
    // progress says #2 by then); the others join #2 only later, so it cannot complete first.
    Tensor t = Tensor::zeros({1 << 18}, DType::F32);
    pg.allreduce(t, ReduceOp::Sum)->wait();  // #1, everyone
    const auto interval = heartbeat_interval_for(std::chrono::milliseconds(int64_t(options.collective_timeout * 1000)));
    if (pg.rank() == last) {
      auto work = pg.allreduce(t, ReduceOp::Sum);  // #2, in flight on the group's worker
      std::this_thread::sleep_for(interval * 3);
      std::printf("rank %d: freezing inside collective #2\n", pg.rank());
      std::fflush(stdout);
      std::raise(SIGSTOP);  // the test kills it
      return 0;
    }
    std::this_thread::sleep_for(interval * 5);
    pg.allreduce(t, ReduceOp::Sum)->wait();  // #2: the last rank is frozen in it
    std::printf("rank %d: collective #2 completed without the last rank\n", pg.rank());
    return 1;
  }
  if (scenario == "die") {
    Tensor t = Tensor::zeros({1 << 18}, DType::F32), big = Tensor::zeros({1 << 24}, DType::F32);
    pg.allreduce(t, ReduceOp::Sum)->wait();  // #1, everyone
    auto work = pg.allreduce(big, ReduceOp::Sum);  // #2, 64 MiB: still moving when the last rank dies
    if (pg.rank() == last) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::printf("rank %d: dying inside collective #2\n", pg.rank());
      std::fflush(stdout);
      std::_Exit(7);
    }
    work->wait();
    std::printf("rank %d: collective #2 completed without the last rank\n", pg.rank());
    return 1;
  }
  if (scenario == "consistency") {
    Fields fields{{"--depth", pg.rank() == 1 ? "6" : "4"}, {"--lr", "0.02"}};
    try {
      check_consistent(pg, fields);
    } catch (const Error& e) {
      std::fprintf(stderr, "nanoddp: error: [rank %d] %s\n", pg.rank(), e.what());
      return 4;
    }
    return 0;
  }
  std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s collectives|stall|crash|freeze|consistency|die BACKEND\n", argv[0]);
    return 2;
  }
  if (std::string(argv[1]) == "die") {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
  }
  const char* timeout = std::getenv("NANODDP_TEST_TIMEOUT");
  DistOptions options;
  options.backend = parse_option<BackendKind>(argv[2], "backend");
  options.collective_timeout = timeout ? std::atof(timeout) : 30;
  options.rendezvous_timeout = 30;
  try {
    auto ctx = init_distributed(options, Device::cpu());
    return run(argv[1], *ctx, options);
  } catch (const Error& e) {
    std::fprintf(stderr, "nanoddp: error: %s\n", e.what());
    return 3;
  }
}

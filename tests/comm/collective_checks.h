// Exact checks of every collective, shared by the in-process tests (ranks as threads) and the
// multi-process worker (ranks as processes, any backend). Inputs are small integers stored in
// each dtype, so sums are exact whatever order a backend adds in, and the expected value of every
// element is computed here independently from all ranks' inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "rendezvous/store.h"

namespace nanoddp::dist::testing {

struct CheckOptions {
  std::vector<int64_t> counts{0, 1, 13, 1009};  // elements per rank (per block for reduce_scatter)
  int64_t large = (1 << 20) + 7;                // one large allreduce size; reduce_scatter/all_gather
                                                 // use large / world per rank; 0 = skip
  std::vector<DType> dtypes{DType::F32, DType::F64, DType::I32, DType::I64};
  std::vector<DType> large_dtypes{DType::F32, DType::I64};  // the subset `large` runs for
  uint64_t salt = 0;                            // varies the inputs between runs
};

// Runs the checks on this rank of `pg` (every rank must call it with the same options). Returns
// one line per wrong result; empty when everything matched.
std::vector<std::string> check_all_collectives(ProcessGroup& pg, const CheckOptions& options);

// One rank of an in-process world: builds its group on `store` (shared by all ranks, in memory) and
// returns its failures.
using ThreadRank = std::function<std::vector<std::string>(const std::shared_ptr<Store>& store, int rank)>;

// Runs `rank` for ranks 0..world-1, one thread each; returns every rank's failures, an exception
// thrown counted as one ("rank R threw: ...").
std::vector<std::string> run_thread_ranks(int world, const ThreadRank& rank);

// The failures, one a line, for a test's message.
std::string join_lines(const std::vector<std::string>& lines);

}  // namespace nanoddp::dist::testing

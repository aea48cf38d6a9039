// Checks that every rank runs with the same settings before they compute together, like PyTorch
// DDP verifying parameter shapes across ranks at start: a rank started with other arguments, or
// another build, would otherwise produce wrong results or hang inside a collective much later.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/process_group.h"

namespace nanoddp::dist {

// Named values in a fixed order, e.g. {"--depth", "6"}.
using Fields = std::vector<std::pair<std::string, std::string>>;

// Compares `fields` across the ranks of `pg` (a collective: every rank must call it). Rank 0's
// fields are broadcast; each rank compares them with its own; an all_gather of one flag per rank
// tells every rank which ranks differ. When any does, every rank throws nanoddp::Error:
//  - a rank that differs names the first differing field and both values, e.g. "--depth is 6 on
//    rank 1 but 4 on rank 0: start every rank with the same arguments" (`remedy` after the colon);
//  - the others name the ranks that differ and point to their messages.
void check_consistent(ProcessGroup& pg, const Fields& fields,
                      std::string_view remedy = "start every rank with the same arguments");

// Sums (or averages, or maxes) a few host doubles over the ranks of `pg`, through a tensor on the
// group's device (NCCL reduces device memory only); returns when the result is on the host.
void allreduce_scalars(ProcessGroup& pg, std::vector<double>& values, ReduceOp op);

// Every rank's `mine`, in rank order, on every rank (a collective). For text of any length:
// lengths first, then the bytes padded to the longest.
std::vector<std::string> all_gather_strings(ProcessGroup& pg, const std::string& mine);

// What this binary was built with and runs on: nanoddp version, compiler, build type, and where
// present Gloo, MPI, CUDA runtime and driver and NCCL versions. Compare it across ranks with
// check_consistent(pg, build_fingerprint(), "install the same nanoddp build on every node").
Fields build_fingerprint();

}  // namespace nanoddp::dist

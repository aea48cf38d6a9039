// The checks every collective's arguments pass once, whatever the backend (comm/process_group.h).
#include "comm/process_group.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "comm/collective.h"
#include "core/error.h"

namespace nanoddp::dist {

namespace {

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const char* pa = static_cast<const char*>(a.raw());
  const char* pb = static_cast<const char*>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// Whether `part` is exactly block `index` of `whole` (blocks of part's size).
bool is_block(const Tensor& part, const Tensor& whole, int index) {
  return part.raw() == static_cast<const char*>(whole.raw()) + size_t(index) * part.nbytes();
}

// NANODDP_DEBUG_COLLECTIVES=1: every collective a rank issues is written to its stderr, numbered
// in issue order, as the rank issues it (not as it completes), so that the last lines of each rank
// show where the ranks' sequences part: the flight recorder a hang is diagnosed with (PyTorch's
// TORCH_DISTRIBUTED_DEBUG serves the same need). Read at every call: a getenv costs far less than
// the smallest collective, and a program (or a test) may switch it on after its first collective.
bool debug_collectives() {
  const char* v = std::getenv("NANODDP_DEBUG_COLLECTIVES");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

std::atomic<uint64_t> g_issued{0};  // over every group of the process

// "[rank 1] collective 7: allreduce sum f32 x 1024 (4096 bytes) on cpu, gloo"; `t` null for a barrier.
void log_collective(const ProcessGroup& g, const std::string& what, const Tensor* t) {
  if (!debug_collectives()) return;
  const uint64_t n = ++g_issued;
  const std::string tensor = t == nullptr ? std::string()
                                          : fmt::format(" {} x {} ({} bytes) on {}", dtype_name(t->dtype()), t->numel(),
                                                        t->nbytes(), t->device().str());
  const std::string line =
      fmt::format("nanoddp debug: [rank {}] collective {}: {}{}, {}\n", g.rank(), n, what, tensor, g.backend_name());
  std::fputs(line.c_str(), stderr);  // one write per line: the ranks' lines do not interleave within a line
}

}  // namespace

const char* Reduction::name() const { return reduce_op_name(requested); }

void Reduction::finish(void* result, size_t n, DType dtype) const {
  if (divide_by != 1) divide_in_place(result, n, dtype, divide_by);
}

void ProcessGroup::check_place(const Tensor& t) const {
  const Device here = t.device();
  switch (support().place) {
    case TensorPlace::Host:
      NANODDP_CHECK(here.is_cpu(), "the {} backend takes CPU tensors, not {}", backend_name(), here.str());
      return;
    case TensorPlace::GroupDevice:
      NANODDP_CHECK(here == device(), "the {} group on {} was given a tensor on {}: move it to {}", backend_name(),
                    device().str(), here.str(), device().str());
      return;
    case TensorPlace::HostOrGroupDevice:
      NANODDP_CHECK(here.is_cpu() || here == device(),
                    "the {} group on {} was given a tensor on {}: move it to {} or to the CPU", backend_name(),
                    device().str(), here.str(), device().str());
      return;
  }
}

Reduction ProcessGroup::check_reduction(const char* collective, DType dtype, ReduceOp op) const {
  const CollectiveSupport& s = support();
  const std::string backend = backend_name();
  auto refuse = [&](auto* backend_words, const char* what) {
    if (backend_words != nullptr) NANODDP_FAIL("{}", backend_words(collective, backend.c_str(), dtype));
    NANODDP_FAIL("{}{} of {} tensors is not supported by the {} backend", collective, what, dtype_name(dtype), backend);
  };
  if (!s.reduces.contains(dtype)) refuse(s.refuse_dtype, "");
  if (op != ReduceOp::Avg) return Reduction{op, 1, op};
  if (!s.averages.contains(dtype)) refuse(s.refuse_avg, " with avg");
  // Over one rank the average is the sum: nothing to divide.
  if (s.averages_by_division) return Reduction{ReduceOp::Sum, size(), op};
  return Reduction{ReduceOp::Avg, 1, op};
}

WorkPtr ProcessGroup::allreduce(const Tensor& t, ReduceOp op) {
  Reduction r = check_reduction("allreduce", t.dtype(), op);
  check_place(t);
  log_collective(*this, fmt::format("allreduce {}", r.name()), &t);
  return run_allreduce(t, r);
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  Reduction r = check_reduction("reduce_scatter", in.dtype(), op);
  NANODDP_CHECK(out.dtype() == in.dtype(), "reduce_scatter: output is {} but input is {}: use the same dtype",
                dtype_name(out.dtype()), dtype_name(in.dtype()));
  NANODDP_CHECK(in.numel() == out.numel() * size(),
                "reduce_scatter: input has {} elements but must have world size ({}) x output ({}) = {}", in.numel(),
                size(), out.numel(), out.numel() * size());
  check_place(out);
  check_place(in);
  const bool in_place = out.nbytes() > 0 && is_block(out, in, rank());
  NANODDP_CHECK(in_place || !overlaps(out, in),
                "reduce_scatter: the output overlaps the input other than at this rank's block ({}): give it its "
                "own buffer, or that block", rank());
  log_collective(*this, fmt::format("reduce_scatter {}", r.name()), &in);
  return run_reduce_scatter(out, in, r, in_place);
}

WorkPtr ProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  NANODDP_CHECK(out.dtype() == in.dtype(), "all_gather: output is {} but input is {}: use the same dtype",
                dtype_name(out.dtype()), dtype_name(in.dtype()));
  NANODDP_CHECK(out.numel() == in.numel() * size(),
                "all_gather: output has {} elements but must have world size ({}) x input ({}) = {}", out.numel(),
                size(), in.numel(), in.numel() * size());
  check_place(out);
  check_place(in);
  const bool in_place = in.nbytes() > 0 && is_block(in, out, rank());
  NANODDP_CHECK(in_place || !overlaps(out, in),
                "all_gather: the input overlaps the output other than at this rank's block ({}): give it its own "
                "buffer, or that block", rank());
  log_collective(*this, "all_gather", &out);
  return run_all_gather(out, in, in_place);
}

WorkPtr ProcessGroup::broadcast(const Tensor& t, int root) {
  NANODDP_CHECK(root >= 0 && root < size(), "broadcast: root rank {} is not in [0, {})", root, size());
  check_place(t);
  log_collective(*this, fmt::format("broadcast from {}", root), &t);
  return run_broadcast(t, root);
}

WorkPtr ProcessGroup::barrier() {
  log_collective(*this, "barrier", nullptr);
  return run_barrier();
}

}  // namespace nanoddp::dist

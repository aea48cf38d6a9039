// bench_allreduce: like nccl-tests' all_reduce_perf. For each message size it times our
// ProcessGroup::allreduce (queue, worker thread, Work::wait, progress report) and, beside it, the
// library call underneath on the same connections: gloo::allreduce on the group's Gloo context, or
// MPI_Allreduce on the group's communicator. The last column is our overhead over that call.
// With --device cuda the buffers live on this rank's GPU and the group is NCCL's; there is no
// baseline column then (NCCL is private to the comm layer), and every timed round ends with the
// host waiting for the device, since NCCL's Work::wait only orders the compute stream.
// Run it under any launcher (init_distributed picks the rank up), e.g. two processes by hand:
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 build/bench/bench_allreduce &
//   RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 build/bench/bench_allreduce
// or: nanoddp run --standalone --nproc_per_node 2 build/bench/bench_allreduce
// or: mpirun -np 2 build/bench/bench_allreduce
// It lives here, not in the nanoddp binary, because the baselines reach under the process group
// (the Gloo context, the MPI communicator): the production libraries link Gloo and MPI privately.
#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "cli/option_flags.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "comm/collective.h"
#include "comm/consistency.h"
#include "comm/init.h"
#include "nanoddp/build_config.h"
#include "ops/backend.h"

#if NANODDP_HAVE_GLOO
#include <gloo/allreduce.h>
#include <gloo/math.h>

#include "comm/gloo_group.h"
#endif
#if NANODDP_HAVE_MPI
#include "comm/mpi_group.h"
#endif

namespace nanoddp {

namespace {

using cli::add_option_flags;

struct AllreduceBenchOptions {
  int64_t min_bytes = 1024;
  int64_t max_bytes = 64 << 20;
  int factor = 4;
  int iters = 20;
  int warmup = 5;
  int rounds = 3;
  std::string dtype = "f32";
  std::string device = "cpu";

  template <typename V>
  void visit(V&& v) {
    v(min_bytes, "min_bytes", "smallest message in bytes");
    v(max_bytes, "max_bytes", "largest message in bytes");
    v(factor, "factor", "each message size is this many times the previous");
    v(iters, "iters", "timed allreduces per round");
    v(warmup, "warmup", "untimed allreduces before the first round of each size");
    v(rounds, "rounds", "rounds alternating ours and the library call; the best round of each counts");
    v(dtype, "dtype", "element type: f32, f64, i32 or i64");
    v(device, "device", "cpu, or cuda (this rank's GPU by LOCAL_RANK; NCCL) or cuda:N");
  }
};

DType parse_dtype(const std::string& s) {
  for (DType d : {DType::F32, DType::F64, DType::I32, DType::I64})
    if (dtype_name(d) == s) return d;
  NANODDP_FAIL("--dtype {} is not one of f32, f64, i32, i64", s);
}

// The library call our allreduce wraps, on the same connections; null when there is none.
using RawAllreduce = std::function<void(const Tensor&)>;

RawAllreduce raw_allreduce_for(dist::ProcessGroup& pg) {
#if NANODDP_HAVE_GLOO
  if (auto* g = dynamic_cast<dist::GlooGroup*>(&pg)) {
    // The options GlooGroup::allreduce uses, with tags of their own.
    auto tag = std::make_shared<uint32_t>(1u << 31);
    return [g, tag](const Tensor& t) {
      dist::dispatch_reducible(t.dtype(), [&]<typename T>() {
        gloo::AllreduceOptions opts(g->context());
        opts.setOutput(static_cast<T*>(t.raw()), size_t(t.numel()));
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setTag((*tag)++);
        opts.setTimeout(g->options().timeout);
        gloo::allreduce(opts);
      });
    };
  }
#endif
#if NANODDP_HAVE_MPI
  if (auto* m = dynamic_cast<dist::MpiGroup*>(&pg)) {
    return [m](const Tensor& t) {
      MPI_Datatype type = t.dtype() == DType::F32   ? MPI_FLOAT
                          : t.dtype() == DType::F64 ? MPI_DOUBLE
                          : t.dtype() == DType::I32 ? MPI_INT32_T
                                                    : MPI_INT64_T;
      MPI_Allreduce(MPI_IN_PLACE, t.raw(), int(t.numel()), type, MPI_SUM, m->comm());
    };
  }
#endif
  return nullptr;
}

// CPU seconds this process has used (every thread: caller, worker, Gloo's I/O thread).
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Timing {
  double wall = 1e30;  // seconds per call, as the slowest rank saw it
  double cpu = 1e30;   // CPU seconds per call, averaged over ranks
};

// `iters` calls of `fn` between barriers, then `drain` (the host waits for the device); keeps the
// better of `best` and this round, per measure.
void time_round(dist::ProcessGroup& pg, int iters, const std::function<void()>& fn, const std::function<void()>& drain,
                Timing& best) {
  drain();
  pg.barrier()->wait();
  double cpu0 = process_cpu_seconds();
  Stopwatch sw;
  for (int i = 0; i < iters; i++) fn();
  drain();
  // allreduce_scalars stages host values through the group's device (NCCL takes device memory only).
  std::vector<double> wall{sw.seconds() / iters}, cpu{(process_cpu_seconds() - cpu0) / iters};
  dist::allreduce_scalars(pg, wall, dist::ReduceOp::Max);
  dist::allreduce_scalars(pg, cpu, dist::ReduceOp::Avg);
  best.wall = std::min(best.wall, wall[0]);
  best.cpu = std::min(best.cpu, cpu[0]);
}

// After timing: each rank contributes rank+1 everywhere; every element must be the sum. `host` is
// t itself on the CPU, else a host tensor of t's size that carries the values both ways.
void check_result(dist::ProcessGroup& pg, const Tensor& t, const Tensor& host, const std::function<void()>& drain) {
  dist::dispatch_reducible(t.dtype(), [&]<typename T>() {
    const bool staged = !host.shares_storage(t);
    T* p = static_cast<T*>(host.raw());
    std::fill(p, p + t.numel(), T(pg.rank() + 1));
    if (staged) copy(t, host);
    pg.allreduce(t, dist::ReduceOp::Sum)->wait();
    drain();
    if (staged) copy(host, t);
    T want = T(pg.size() * (pg.size() + 1) / 2);
    for (int64_t i = 0; i < t.numel(); i++)
      NANODDP_CHECK(p[i] == want, "allreduce of {} elements gave {} at element {} instead of {}: the backend is broken",
                    t.numel(), double(p[i]), i, double(want));
  });
}

void run_allreduce_bench(const AllreduceBenchOptions& o, const dist::DistOptions& dist_options) {
  NANODDP_CHECK(o.min_bytes > 0 && o.max_bytes >= o.min_bytes && o.factor >= 2 && o.iters > 0 && o.rounds > 0,
                "need 0 < --min_bytes <= --max_bytes, --factor >= 2, --iters > 0 and --rounds > 0");
  DType dtype = parse_dtype(o.dtype);
  const Device device = dist::local_device(o.device, dist::discover_environment());
  auto ctx = dist::init_distributed(dist_options, device);
  dist::ProcessGroup& pg = *ctx->group;
  RawAllreduce raw = raw_allreduce_for(pg);
  ops::Backend& backend = ops::backend(device);
  auto drain = [&] { backend.synchronize(); };
  const int n = pg.size();
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;

  // One buffer of the largest size, allocated once; each size uses its prefix.
  const int64_t max_count = o.max_bytes / int64_t(dtype_size(dtype));
  Tensor buffer = Tensor::zeros({max_count}, dtype, device);
  const Tensor host_buffer = device.is_cpu() ? buffer : Tensor::empty({max_count}, dtype);  // for the checks

  log::print0("# bench_allreduce: backend {} on {}, {} rank(s), {} sum, {} iterations x best of {} rounds",
              ctx->backend, device.str(), n, o.dtype, o.iters, o.rounds);
  log::print0("# baseline: {}", raw ? (ctx->backend == "gloo" ? "gloo::allreduce (ring) on the group's context"
                                                              : "MPI_Allreduce on the group's communicator")
                                    : "none for this backend");
  log::print0("# {:>11} {:>10} {:>10} {:>8} {:>8} {:>8} | {:>10} {:>8} {:>8} | {:>8}", "size(B)", "count",
              "time(us)", "algbw", "busbw", "cpu(us)", "raw(us)", "busbw", "cpu(us)", "overhead");
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
    const int64_t count = std::max<int64_t>(1, bytes / int64_t(dtype_size(dtype)));
    Tensor t = buffer.region(0, {count});
    auto ours = [&] { pg.allreduce(t, dist::ReduceOp::Sum)->wait(); };
    auto library = [&] { raw(t); };
    for (int i = 0; i < o.warmup; i++) {
      ours();
      if (raw) library();
    }
    // Alternate rounds so that both see the same machine conditions; keep each one's best.
    Timing best, best_raw;
    for (int r = 0; r < o.rounds; r++) {
      time_round(pg, o.iters, ours, drain, best);
      if (raw) time_round(pg, o.iters, library, drain, best_raw);
    }
    check_result(pg, t, host_buffer.region(0, {count}), drain);
    const double size = double(t.nbytes());
    const double algbw = size / best.wall / 1e9, busbw = algbw * bus_factor;
    if (raw) {
      log::print0("  {:>11} {:>10} {:>10.1f} {:>8.3f} {:>8.3f} {:>8.1f} | {:>10.1f} {:>8.3f} {:>8.1f} | {:>7.1f}%",
                  t.nbytes(), count, best.wall * 1e6, algbw, busbw, best.cpu * 1e6, best_raw.wall * 1e6,
                  size / best_raw.wall / 1e9 * bus_factor, best_raw.cpu * 1e6, (best.wall / best_raw.wall - 1) * 100);
    } else {
      log::print0("  {:>11} {:>10} {:>10.1f} {:>8.3f} {:>8.3f} {:>8.1f} | {:>10} {:>8} {:>8} | {:>8}", t.nbytes(),
                  count, best.wall * 1e6, algbw, busbw, best.cpu * 1e6, "-", "-", "-", "-");
    }
    if (bytes > o.max_bytes / o.factor) break;  // the next size would overflow past max_bytes
  }
  log::print0("# time: wall-clock per call, slowest rank; cpu: CPU time per call of the whole process (all threads),");
  log::print0("# rank average; algbw = size / time; busbw = algbw x 2(n-1)/n (GB/s, 1e9 bytes);");
  log::print0("# overhead = our time / raw time - 1");
}

}  // namespace
}  // namespace nanoddp

int main(int argc, char** argv) {
  using namespace nanoddp;
  CLI::App app{"Allreduce bandwidth of the process group against the raw library call", "bench_allreduce"};
  AllreduceBenchOptions options;
  dist::DistOptions dist_options;
  add_option_flags(app, options);
  add_option_flags(app, dist_options);
  CLI11_PARSE(app, argc, argv);
  try {
    run_allreduce_bench(options, dist_options);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_allreduce: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

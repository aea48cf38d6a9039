// nanoddp env (alias: info): what this build has, what the machine offers, and whether each
// engine works here -- the check the guides tell users to do by hand on every host. Under a
// launcher (nanoddp run, torchrun-style variables, mpirun, srun) every rank joins the job, a
// collective is checked across all of them, and rank 0 prints one table with a column per host and
// DIFFERS on the rows where hosts disagree.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/env_table.h"
#include "cli/number_flags.h"
#include "cli/option_flags.h"
#include "cli/rank_setup.h"
#include "comm/consistency.h"
#include "core/device.h"
#include "core/error.h"
#include "core/machine.h"
#include "core/rng.h"
#include "core/timer.h"
#include "nanoddp/build_config.h"
#include "ops/engines.h"
#include "ops/ops.h"
#include "rendezvous/hash_store.h"

#if NANODDP_HAVE_GLOO
#include "comm/gloo_group.h"
#endif
#if NANODDP_HAVE_NCCL
#include "comm/nccl_group.h"
#endif

namespace nanoddp::cli {

namespace {

Fields describe_machine() {
  const HostInfo host = host_info();
  Fields f;
  f.emplace_back("host", host.hostname);
  f.emplace_back("os", host.os);
  f.emplace_back("cpu", host.cpu_model.empty() ? "unknown" : host.cpu_model);
  f.emplace_back("logical cpus", std::to_string(host.logical_cpus));
  f.emplace_back("memory", fmt::format("{:.1f} GiB", host.memory_bytes / double(1 << 30)));
  std::string have, lack;
  for (const auto& flag : kMatmulFlags) {
    std::string& list = host.has_flag(flag) ? have : lack;
    list += (list.empty() ? "" : " ") + flag;
  }
  f.emplace_back("cpu features", have.empty() ? "none of the listed" : have);
  f.emplace_back("cpu lacks", lack.empty() ? "-" : lack);
  f.emplace_back("bf16 hardware", bf16_matmul_hardware(host));
  f.emplace_back("bf16 matmul", ops::cpu_bf16_matmul());
  f.emplace_back("f16 matmul", ops::cpu_f16_matmul());
  for (auto& kv : dist::build_fingerprint()) f.push_back(std::move(kv));
  if (NANODDP_HAVE_CUDA) f.emplace_back("nvcc", NANODDP_CUDA_COMPILER);
  for (auto& kv : ops::engine_versions()) f.push_back(std::move(kv));
  const int gpus = cuda_device_count();
  std::string names;
  for (int i = 0; i < gpus; i++) names += (i ? ", " : "") + cuda_device_name(i);
  f.emplace_back("gpus", gpus == 0 ? (NANODDP_HAVE_CUDA ? "none visible" : "none (CPU-only build)")
                                   : fmt::format("{}: {}", gpus, names));
  return f;
}

// A small GEMM on `device` against a double-precision loop on the host. Tolerance: 64 products of
// values in [-1, 1] summed in f32 stay within ~1e-5 of the exact sum; 1e-2 leaves room for TF32
// tensor cores (10-bit mantissa inputs) on a GPU, and any broken kernel is off by O(1).
Check check_gemm(const std::string& name, Device device) {
  Stopwatch clock;
  constexpr int64_t m = 48, n = 40, k = 64;
  Rng rng(7);
  Tensor a = Tensor::empty({m, k}, DType::F32), b = Tensor::empty({k, n}, DType::F32);
  for (int64_t i = 0; i < a.numel(); i++) a.data<float>()[i] = static_cast<float>(2 * rng.uniform() - 1);
  for (int64_t i = 0; i < b.numel(); i++) b.data<float>()[i] = static_cast<float>(2 * rng.uniform() - 1);
  Tensor c = Tensor::empty({m, n}, DType::F32, device);
  ops::matmul(c, a.copy_to(device), false, b.copy_to(device), false, 1.f, 0.f);
  const Tensor host = c.copy_to(Device::cpu());
  double worst = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double want = 0;
      for (int64_t p = 0; p < k; p++) want += double(a.data<float>()[i * k + p]) * b.data<float>()[p * n + j];
      worst = std::max(worst, std::abs(want - host.data<float>()[i * n + j]));
    }
  const bool ok = worst < 1e-2;
  return {name, ok ? "ok" : "FAILED",
          fmt::format("{}x{}x{} matmul on {}: max error {:.1e} against a double loop{} ({:.1f} ms)", m, n, k,
                      device.str(), worst, ok ? "" : ", above 1e-2", clock.seconds() * 1e3)};
}

// all_reduce(SUM) of rank + 1 over `group`: every rank must see 1 + 2 + ... + N.
Check check_collective(const std::string& name, dist::ProcessGroup& group) {
  Stopwatch clock;
  Tensor t = Tensor::empty({4}, DType::F32);
  for (int i = 0; i < 4; i++) t.data<float>()[i] = static_cast<float>(group.rank() + 1) * (i + 1);
  Tensor on = group.device().is_cpu() ? t : t.copy_to(group.device());
  group.allreduce(on, dist::ReduceOp::Sum)->wait();
  const Tensor back = on.copy_to(Device::cpu());
  const double n = group.size(), want = n * (n + 1) / 2;
  bool ok = true;
  for (int i = 0; i < 4; i++) ok &= back.data<float>()[i] == static_cast<float>(want * (i + 1));  // exact: small integers
  return {name, ok ? "ok" : "FAILED",
          fmt::format("all_reduce over {} rank{} on {}: {} ({:.1f} ms)", group.size(), group.size() == 1 ? "" : "s",
                      group.device().str(), ok ? "the expected sums" : "WRONG sums", clock.seconds() * 1e3)};
}

// Runs `f`, turning an error into a FAILED check that says what went wrong.
template <typename F>
Check guarded(const std::string& name, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return {name, "FAILED", e.what()};
  }
}

// The checks one process can make on its own. `job` is the job's group when there is more than one
// rank (then Gloo/MPI/NCCL are checked across the job instead of in a one-rank group).
std::vector<Check> run_checks(dist::ProcessGroup* job, const std::string& job_backend, Device device) {
  std::vector<Check> checks;
  checks.push_back(guarded("cpu", [] { return check_gemm("cpu", Device::cpu()); }));
  const int gpus = cuda_device_count();
  if (!NANODDP_HAVE_CUDA)
    checks.push_back({"cuda", "skipped", "this build has no CUDA (nvcc, cuBLASLt and NCCL were not found at build)"});
  else if (gpus == 0)
    checks.push_back({"cuda", "skipped", "no GPU visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"});
  else
    checks.push_back(guarded("cuda", [&] { return check_gemm("cuda", device.is_cuda() ? device : Device::cuda(0)); }));
  if (job) {
    checks.push_back(guarded(job_backend, [&] { return check_collective(job_backend, *job); }));
    return checks;
  }
#if NANODDP_HAVE_GLOO
  checks.push_back(guarded("gloo", [] {
    dist::GlooGroupOptions o;
    o.timeout = std::chrono::seconds(20);
    dist::GlooGroup g(std::make_shared<dist::HashStore>(), 0, 1, o);
    return check_collective("gloo", g);
  }));
#else
  checks.push_back({"gloo", "skipped", "this build has no Gloo (install libgloo-dev: scripts/setup.sh)"});
#endif
  checks.push_back({"mpi", "skipped", NANODDP_HAVE_MPI ? "checked only under mpirun: `mpirun -n 2 nanoddp env`"
                                                       : "this build has no MPI (install libopenmpi-dev)"});
#if NANODDP_HAVE_NCCL
  if (gpus > 0) {
    checks.push_back(guarded("nccl", [&] {
      dist::NcclGroup g(std::make_shared<dist::HashStore>(), 0, 1, device.is_cuda() ? device : Device::cuda(0), {});
      return check_collective("nccl", g);
    }));
  } else {
    checks.push_back({"nccl", "skipped", "no GPU visible"});
  }
#else
  checks.push_back({"nccl", "skipped", "this build has no NCCL"});
#endif
  return checks;
}

}  // namespace

void add_env_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("env", "Versions, CPU features and devices, and a check that each engine works "
                                         "(under a launcher: one table for all hosts)");
  cmd->alias("info");
  auto device = std::make_shared<std::string>("cpu");
  auto backend = std::make_shared<dist::BackendKind>(dist::BackendKind::Auto);
  auto timeout = std::make_shared<double>(60);
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--device", *device, "under a launcher: cpu checks the job's CPU collectives (gloo or mpi), cuda "
                                       "its NCCL")->capture_default_str();
  cmd->add_option_function<std::string>(
         "--backend", [backend](const std::string& text) { *backend = *OptionText<dist::BackendKind>::parse(text); },
         "under a launcher: auto, gloo, mpi or nccl")
      ->default_str(option_text(*backend))
      ->check(word_validator<dist::BackendKind>());
  add_number_option(*cmd, "--timeout", *timeout, "seconds to wait for the other ranks")->capture_default_str();
  cmd->add_flag("--json", *json, "print JSON instead of the table");
  cmd->callback([=] {
    NANODDP_CHECK(*timeout > 0, "--timeout {} must be positive (seconds)", *timeout);
    // As train's --timeout: longer waits overflow the clocks' integer nanoseconds.
    NANODDP_CHECK(*timeout <= 1e9, "--timeout {} is too large: at most 1e9 seconds", *timeout);
    const dist::DistEnv env = dist::discover_environment();
    const Fields fields = describe_machine();
    int failures = 0;
    if (env.world_size == 1) {
      const auto checks = run_checks(nullptr, "", parse_device(*device));
      for (const auto& c : checks) failures += c.status == "FAILED";
      fmt::print("{}", *json ? to_json({fields, checks}).dump(2) + "\n" : render_env({{fields, checks}}));
    } else {
      RankSetup setup = join_process_group(*device, *backend, *timeout);
      dist::ProcessGroup& group = *setup.context->group;
      const auto checks = run_checks(&group, setup.context->backend, setup.device);
      std::vector<EnvReport> ranks;
      nlohmann::json all = nlohmann::json::array();
      for (const auto& s : dist::all_gather_strings(group, to_json({fields, checks}).dump())) {
        all.push_back(nlohmann::json::parse(s));
        ranks.push_back(from_json(all.back()));
      }
      for (const auto& r : ranks)
        for (const auto& c : r.checks) failures += c.status == "FAILED";
      if (group.rank() == 0) fmt::print("{}", *json ? all.dump(2) + "\n" : render_env(ranks));
    }
    NANODDP_CHECK(failures == 0, "{} engine check{} failed (see the checks above)", failures, failures == 1 ? "" : "s");
  });
}

}  // namespace nanoddp::cli

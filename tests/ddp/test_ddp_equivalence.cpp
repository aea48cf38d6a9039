// Data parallelism is gradient accumulation spread over ranks: W ranks with one micro-batch each
// must train like one rank accumulating the same W micro-batches. Ranks here are threads of this
// process, each with its own Gloo group over a shared in-memory store (as in gloo's own tests).
// For every --zero mode and both optimizers: after every step all ranks hold the same parameters
// bit for bit, and they match the single-rank run to fp32 reduction-order tolerance. Muon's
// Newton-Schulz is split among the ranks in every mode, each matrix orthogonalised once.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <memory>
#include <thread>

#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "ops/ops.h"
#include "model/gpt.h"
#include "ddp_test_util.h"
#include "test_util.h"

namespace nanoddp {
namespace {

using ddp::Bucket;

constexpr int kSteps = 6;

model::GPTConfig config() {
  model::GPTConfig c;
  c.vocab_size = 90;
  c.n_layer = 2;
  c.n_embd = 32;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.max_seq_len = 16;
  return c;
}

// Micro-batch `i` of step `s`: the same data whichever rank or accumulation step takes it.
std::pair<Tensor, Tensor> micro_batch(int s, int i) {
  return {testing::randint({2, 16}, 1000 + 97 * s + i, 0, 90), testing::randint({2, 16}, 5000 + 97 * s + i, 0, 90)};
}

ddp::OptimizerConfig optimizer(const std::string& name) {
  ddp::OptimizerConfig oc;
  oc.optimizer = parse_option<ddp::OptimizerKind>(name, "optimizer");
  // f32 Newton-Schulz: in bf16 a 1e-7 change of the gradient (reduction order) moves Muon's update
  // by percents (see tests/model/test_torch_golden.cpp), which would hide real mistakes.
  oc.ns_bf16 = false;
  return oc;
}

using Snapshot = std::vector<std::vector<float>>;  // every parameter after each step

Snapshot params_of(model::GPT& gpt) {
  Snapshot s;
  for (auto& p : gpt.parameters()) s.push_back(testing::to_vector(p.data));
  return s;
}

// What a run produced: parameters after each step, each step's mean loss, and the synchronised
// gradients of the first step (NaN where this rank does not own the element under --zero 2).
struct RunRecord {
  std::vector<Snapshot> params;
  std::vector<double> loss;
  Snapshot grads;
  size_t state_bytes = 0;
  size_t orthogonalised = 0;  // Muon matrices this rank orthogonalised in the last step
};

// The averaged gradient as this rank holds it after the reduction: everything, or (--zero 2)
// only its shard of each bucket.
Snapshot owned_grads(model::GPT& gpt, const ddp::Reducer& reducer, int rank, int world) {
  Snapshot out;
  const auto& layout = reducer.layout();
  for (size_t i = 0; i < gpt.parameters().size(); i++) {
    auto g = testing::to_vector(gpt.parameters()[i].grad);
    if (reducer.zero() == 2) {
      const Bucket& b = layout.buckets[layout.bucket_of[i]];
      const int64_t off = layout.offset_of[i];
      for (int64_t j = 0; j < static_cast<int64_t>(g.size()); j++)
        if (off + j < b.shard_begin(rank, world) || off + j >= b.shard_end(rank, world)) g[j] = NAN;
    }
    out.push_back(std::move(g));
  }
  return out;
}

// One rank: `world` micro-batches accumulated per step.
RunRecord reference(int world, const std::string& opt, int zero) {
  omp_set_num_threads(1);
  model::GPT gpt(config(), Device::cpu());
  gpt.init_weights(3);
  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::Reducer reducer(gpt, *group, {.zero = zero, .whole_matrices = opt == "muon", .first_bucket_mb = 0.004, .bucket_cap_mb = 0.01});
  ddp::Optimizer o(gpt, reducer, optimizer(opt));
  RunRecord out;
  for (int s = 0; s < kSteps; s++) {
    double loss = 0;
    for (int i = 0; i < world; i++) {
      auto [x, y] = micro_batch(s, i);
      loss += gpt.forward_backward(x, y, 1.f, i > 0, i == world - 1 ? reducer.sync_hook(world) : nullptr);
    }
    reducer.finish();
    if (s == 0) out.grads = owned_grads(gpt, reducer, 0, 1);
    o.step(1.0, 0.9);
    out.params.push_back(params_of(gpt));
    out.loss.push_back(loss / world);
  }
  out.orthogonalised = o.muon_orthogonalised();
  return out;
}

// Per element of every parameter, the sum of |g_i| over the step-0 micro-batch gradients g_i: the
// scale of the summation error when those gradients are added in different orders.
Snapshot abs_sum_of_micro_grads(int world) {
  omp_set_num_threads(1);
  model::GPT gpt(config(), Device::cpu());
  gpt.init_weights(3);
  Snapshot sum;
  for (int i = 0; i < world; i++) {
    auto [x, y] = micro_batch(0, i);
    gpt.forward_backward(x, y, 1.f, false);
    for (size_t p = 0; p < gpt.parameters().size(); p++) {
      auto g = testing::to_vector(gpt.parameters()[p].grad);
      if (i == 0) sum.emplace_back(g.size(), 0.f);
      for (size_t j = 0; j < g.size(); j++) sum[p][j] += std::abs(g[j]);
    }
  }
  return sum;
}

// `world` ranks as threads, one micro-batch each per step. Small buckets (4 KiB, 10 KiB) so the
// layout has many buckets and the overlap path is exercised.
std::vector<RunRecord> distributed(int world, const std::string& opt, int zero, bool split_newton_schulz = true) {
  std::vector<RunRecord> out(world);
  testing::run_ranks(world, [&](int r, dist::ProcessGroup& group) {
    model::GPT gpt(config(), Device::cpu());
    gpt.init_weights(r == 0 ? 3 : 100 + r);  // only rank 0's weights count: they are broadcast
    ddp::Reducer reducer(gpt, group, {.zero = zero, .whole_matrices = opt == "muon", .first_bucket_mb = 0.004, .bucket_cap_mb = 0.01});
    reducer.broadcast_parameters();
    ddp::OptimizerConfig oc = optimizer(opt);
    oc.split_newton_schulz = split_newton_schulz;
    ddp::Optimizer o(gpt, reducer, oc);
    out[r].state_bytes = o.state_bytes();
    for (int s = 0; s < kSteps; s++) {
      auto [x, y] = micro_batch(s, r);
      out[r].loss.push_back(gpt.forward_backward(x, y, 1.f, false, reducer.sync_hook()));
      reducer.finish();
      if (s == 0) out[r].grads = owned_grads(gpt, reducer, r, world);
      o.step(1.0, 0.9);
      out[r].params.push_back(params_of(gpt));
    }
    out[r].orthogonalised = o.muon_orthogonalised();
  });
  return out;
}

struct Case {
  int world, zero;
  std::string optimizer;
};

class DdpEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(DdpEquivalence, RanksAgreeBitwiseAndMatchOneRankWithAccumulation) {
  const auto [world, zero, opt] = GetParam();
  const RunRecord want = reference(world, opt, zero);
  const auto got = distributed(world, opt, zero);
  // Note [accumulation order] (model/gpt.cpp): every rank's micro-batch gradient is bitwise the one
  // the single rank computes for that micro-batch, and both average by summing and dividing.
  //  - 2 ranks: g1 + g2 is one commutative addition and /2 is exact, so the runs are identical bit
  //    for bit: gradients, losses and parameters at every step, whatever the CPU.
  //  - 3 ranks: the collective adds the three in its own order, the single rank as (g1 + g2) + g3.
  //    Any order of n terms is within gamma_{n-1} * sum|g_i| of the exact sum (gamma_k = k u /
  //    (1 - k u), u = 2^-24), so the two sums differ by at most 2 gamma_2 sum|g_i|; the collective
  //    divides by 3 and the reducer multiplies by fl(1/3), which adds at most 3u |mean|. Both
  //    together stay below 2.5 u sum|g_i| per element (the 1e-38 covers underflow to subnormals).
  //    Later steps are compared by the reason in 4. below.
  const Snapshot abs_sum = abs_sum_of_micro_grads(world);
  constexpr double u = 0x1p-24;
  for (size_t p = 0; p < want.grads.size(); p++) {
    for (int r = 0; r < world; r++) {
      const auto& g = got[r].grads[p];
      size_t bad = 0, owned = 0;
      for (size_t j = 0; j < g.size(); j++) {
        if (std::isnan(g[j])) continue;  // not this rank's shard (--zero 2)
        owned++;
        const double diff = std::abs(double(g[j]) - double(want.grads[p][j]));
        if (world == 2 ? diff != 0 : diff > 2.5 * u * abs_sum[p][j] + 1e-38) bad++;
      }
      EXPECT_EQ(bad, 0u) << "gradient of parameter " << p << " on rank " << r << ": " << bad << " of " << owned
                         << " elements outside the bound";
    }
    // Together the ranks hold every element.
    for (size_t j = 0; j < want.grads[p].size(); j++) {
      bool held = false;
      for (int r = 0; r < world; r++) held |= !std::isnan(got[r].grads[p][j]);
      ASSERT_TRUE(held) << "element " << j << " of parameter " << p << " is on no rank";
    }
  }
  for (int s = 0; s < kSteps; s++) {
    // 2. Ranks hold the same parameters, bit for bit, after every step.
    for (int r = 1; r < world; r++) ASSERT_EQ(got[r].params[s], got[0].params[s]) << "rank " << r << " step " << s;
    double loss = 0;
    for (int r = 0; r < world; r++) loss += got[r].loss[s] / world;
    if (world == 2) {
      // 3. Two ranks: the same run, bit for bit.
      EXPECT_EQ(got[0].params[s], want.params[s]) << "step " << s;
      EXPECT_EQ(loss, want.loss[s]) << "step " << s;
      continue;
    }
    // 4. Three ranks: the step-0 difference above (a few u of sum|g_i|) compounds. AdamW divides
    //    each element's step by that element's own gradient scale, so an element whose gradient is
    //    a near-cancellation carries the summation error into its update at full size (up to 2 lr
    //    where the sign flips); with this tiny model's embedding lr of ~1 that is ~1e-4 of the
    //    weights after 6 steps, and the loss moves by ~1e-6 of itself. A wrong reduction (a missing
    //    average, a lost bucket) is off by O(1).
    EXPECT_NEAR(loss, want.loss[s], 1e-5 * want.loss[s]) << "step " << s;
    for (size_t p = 0; p < want.params[s].size(); p++) {
      const auto& a = got[0].params[s][p];
      const auto& b = want.params[s][p];
      EXPECT_LT(testing::max_rel_error(std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end())),
                5e-4)
          << "step " << s << " parameter " << p;
    }
  }
  // Every Muon matrix is orthogonalised by exactly one rank (Note [split Newton-Schulz] in
  // ddp/optimizer.cpp; --zero >= 1: by the rank whose shard holds it), none by all of them.
  if (opt == "muon") {
    size_t total = 0;
    for (int r = 0; r < world; r++) {
      EXPECT_LT(got[r].orthogonalised, want.orthogonalised) << "rank " << r << " orthogonalised every matrix";
      total += got[r].orthogonalised;
    }
    EXPECT_EQ(total, want.orthogonalised);
  }
  const size_t state_bytes = got[0].state_bytes;
  // Sharded optimizer state: about 1/W of the replicated state on each rank.
  size_t replicated = 0;
  model::GPT probe(config(), Device::cpu());
  for (auto& p : probe.parameters())
    replicated += (opt == "muon" && p.kind == model::ParamKind::Matrix ? 1 : 2) * p.data.nbytes();
  if (zero == 0) {
    EXPECT_EQ(state_bytes, replicated);
  } else {
    EXPECT_LT(state_bytes, replicated / world + replicated / 4) << "rank 0 keeps more than its share";
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int world : {2, 3})
    for (int zero : {0, 1, 2})
      for (const char* opt : {"muon", "adamw"}) out.push_back({world, zero, opt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Modes, DdpEquivalence, ::testing::ValuesIn(cases()), [](const auto& info) {
  return "world" + std::to_string(info.param.world) + "_zero" + std::to_string(info.param.zero) + "_" +
         info.param.optimizer;
});

// Note [split Newton-Schulz] (ddp/optimizer.cpp): with --zero 0, each rank orthogonalising its own
// Muon matrices and broadcasting them gives the bits of every rank orthogonalising all of them, at
// every step, for 3 ranks (whose sums differ from one rank's in order, so the comparison with
// one rank above has a tolerance) as for 2, while each rank does a share of the work.
TEST(SplitNewtonSchulz, GivesTheBitsOfTheReplicatedComputation) {
  for (int world : {2, 3}) {
    const auto split = distributed(world, "muon", 0, true), replicated = distributed(world, "muon", 0, false);
    for (int r = 0; r < world; r++) {
      for (int s = 0; s < kSteps; s++) EXPECT_EQ(split[r].params[s], replicated[r].params[s]) << "step " << s;
      EXPECT_LT(split[r].orthogonalised, replicated[r].orthogonalised) << "rank " << r;
    }
  }
}

// Dynamic loss scaling (Note [dynamic loss scaling] in train/loss_scaler.h): with --zero 2 each rank
// checks only the gradient pieces it owns, so an overflow in one rank's piece must still make every
// rank skip. Each rank unscales the pieces it owns (8 -> 2); rank 1 then plants an inf in one of
// its own, and both ranks must report it.
TEST(LossScaling, AnInfInOneRanksShardMakesEveryRankSkip) {
  const int world = 2;
  std::vector<int> finite(world, -1), finite_clean(world, -1), found_owned(world, 0);
  testing::run_ranks(world, [&](int r, dist::ProcessGroup& group) {
    model::GPT gpt(config(), Device::cpu());
    gpt.init_weights(3);
    ddp::Reducer reducer(gpt, group, {.zero = 2, .whole_matrices = false});
    ddp::Optimizer o(gpt, reducer, optimizer("adamw"));
    // Every gradient 8; the pieces a rank owns become 2 when it unscales by 0.25.
    for (auto& p : gpt.parameters()) ops::fill(p.grad, 8.f);
    finite_clean[r] = o.unscale_and_check(0.25f);
    // Rank 1 plants an inf in the first element it owns (shards are disjoint: rank 0 does not own it).
    float* owned = nullptr;
    for (auto& p : gpt.parameters()) {
      float* g = p.grad.data<float>();
      for (int64_t i = 0; i < p.grad.numel() && owned == nullptr; i++)
        if (g[i] == 2.f) owned = g + i;
      if (owned != nullptr) break;
    }
    found_owned[r] = owned != nullptr;
    if (r == 1 && owned != nullptr) *owned = INFINITY;
    finite[r] = o.unscale_and_check(0.25f);
  });
  for (int r = 0; r < world; r++) {
    EXPECT_EQ(finite_clean[r], 1) << "rank " << r;
    EXPECT_EQ(finite[r], 0) << "rank " << r << " did not see rank 1's inf";
    EXPECT_TRUE(found_owned[r]) << "rank " << r << " unscaled none of its gradients";
  }
}

}  // namespace
}  // namespace nanoddp

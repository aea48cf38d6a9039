// The GPT: sizing from depth, nanochat's init, forward against a double-precision reference, the
// whole hand-written backward against finite differences of that reference, gradient
// accumulation, the order of gradient-ready calls, and KV-cache inference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kernel_test_util.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "ops/ops.h"
#include "reference_gpt.h"

namespace nanoddp {
namespace {

using model::GPT;
using model::GPTConfig;
using testing::max_rel_error;

GPTConfig tiny_config(int64_t n_kv_head = 2) {
  GPTConfig c;
  c.vocab_size = 50;  // padded to 64: the padding must never enter the loss
  c.n_layer = 2;
  c.n_embd = 16;
  c.n_head = 2;
  c.n_kv_head = n_kv_head;
  c.max_seq_len = 16;
  return c;
}

TEST(Config, DepthSizesTheModelLikeNanochat) {
  auto d4 = GPTConfig::from_depth(4, 4096, 128);
  EXPECT_EQ(d4.n_embd, 256);
  EXPECT_EQ(d4.n_head, 2);
  EXPECT_EQ(d4.head_dim(), 128);
  EXPECT_EQ(d4.num_params(), 5242880);  // the CPU benchmark model: 5.24M
  // nanochat's published sizes: d12 185.6M, d20 561.0M, d26 1.08B, d32 1.88B at vocab 65,536.
  EXPECT_NEAR(GPTConfig::from_depth(12, 65536, 2048).num_params() / 1e6, 185.6, 0.05);
  EXPECT_NEAR(GPTConfig::from_depth(20, 65536, 2048).num_params() / 1e6, 561.0, 0.05);
  EXPECT_NEAR(GPTConfig::from_depth(26, 65536, 2048).num_params() / 1e9, 1.08, 0.005);
  EXPECT_NEAR(GPTConfig::from_depth(32, 65536, 2048).num_params() / 1e9, 1.88, 0.005);
  EXPECT_EQ(GPTConfig::from_depth(4, 265, 64).padded_vocab(), 320);
  EXPECT_THROW(GPTConfig::from_depth(4, 4096, 128, 64, 128, 3), Error);  // 3 kv heads do not divide 2
  auto round_trip = GPTConfig::from_json(d4.to_json());
  EXPECT_EQ(round_trip, d4);
  // A model_config from a file is checked like the flags (was: an abort in training, NaN logits in chat).
  for (const char* bad : {R"({"softcap": 0})", R"({"softcap": -1})", R"({"rope_base": -1})"}) {
    auto j = d4.to_json();
    j.update(nlohmann::json::parse(bad));
    EXPECT_THROW(GPTConfig::from_json(j), Error) << bad;
  }
}

TEST(Init, FollowsNanochat) {
  // Grouped-query (4 heads over 1): c_k and c_v are [32, 128], so min(1, sqrt(fan_out / fan_in))
  // is 1/2 for them and 1 elsewhere; both branches are checked.
  auto c = GPTConfig::from_depth(2, 300, 32, 64, 32, 1);
  ASSERT_EQ(c.kv_dim(), 32);
  ASSERT_EQ(c.n_embd, 128);
  GPT gpt(c, Device::cpu());
  gpt.init_weights(7);
  auto stddev = [](const Tensor& t) {
    double s = 0;
    for (int64_t i = 0; i < t.numel(); i++) s += double(t.data<float>()[i]) * t.data<float>()[i];
    return std::sqrt(s / t.numel());
  };
  for (auto& p : gpt.parameters()) {
    double sd = stddev(p.data);
    if (p.name == "lm_head.weight" || p.name.ends_with("c_proj.weight")) {
      EXPECT_EQ(sd, 0.0) << p.name;
    } else if (p.name == "transformer.wte.weight") {
      EXPECT_NEAR(sd, 1.0, 0.02);
    } else {
      // The sample std of N >= 4096 draws is off by about 1 / sqrt(2 N) <= 1.1% relative: 4% is 3.6 sigma,
      // while a missing factor 1/2 is 100%.
      double fan_out = p.data.dim(0), fan_in = p.data.dim(1);
      const double want = 1 / std::sqrt(fan_in) * std::min(1.0, std::sqrt(fan_out / fan_in));
      EXPECT_NEAR(sd, want, 0.04 * want) << p.name;
    }
  }
  GPT again(c, Device::cpu());
  again.init_weights(7);
  EXPECT_EQ(testing::to_vector(again.parameters()[1].data), testing::to_vector(gpt.parameters()[1].data));
}

TEST(Forward, InitialLossIsLogOfTheTrueVocabulary) {
  // lm_head starts at zero: uniform over the 50 real ids, whatever the 14 padding rows hold.
  GPT gpt(tiny_config(), Device::cpu());
  gpt.init_weights(1);
  auto b = testing::make_batch(2, 8, 50, 3);
  double loss = gpt.forward_backward(b.inputs, b.targets, 1.f, false);
  EXPECT_NEAR(loss, std::log(50.0), 1e-5);
}

class ModelGrad : public ::testing::TestWithParam<int64_t> {};

TEST_P(ModelGrad, ForwardAndEveryParameterGradientMatchTheDoubleReference) {
  const auto c = tiny_config(GetParam());
  GPT gpt(c, Device::cpu());
  testing::randomise(gpt, 100);
  const int64_t batch = 2, seq = 5;
  auto b = testing::make_batch(batch, seq, c.vocab_size, 11);
  const double loss = gpt.forward_backward(b.inputs, b.targets, 1.f, false);
  auto w = testing::weights_of(gpt);
  EXPECT_NEAR(loss, testing::reference_loss(c, w, b.ids, b.tgt, batch, seq), 1e-5 * loss);

  testing::expect_gradients_match_reference(gpt, b, 24);
}

INSTANTIATE_TEST_SUITE_P(Heads, ModelGrad, ::testing::Values(2, 1),  // multi-head, grouped-query
                         [](const auto& info) { return "kv" + std::to_string(info.param); });

// Note [accumulation order] (model/gpt.cpp): each micro-step's gradient is computed whole and
// added once, so the accumulated gradient is exactly the float sum of the separate ones, whatever
// blocking the CPU's GEMM picks. Scaled losses scale exactly by a power of two.
// A zero scale (an RL sample of zero advantage) gives zero gradients, written over what .grad held,
// and reports every parameter. Was: the head skipped its backward while the blocks ran theirs on
// stale numbers, and lm_head's gradient was left as it was.
TEST(Backward, ALossScaleOfZeroGivesZeroGradients) {
  GPT gpt(tiny_config(), Device::cpu());
  testing::randomise(gpt, 4);
  auto b = testing::make_batch(2, 8, 50, 3);
  for (auto& p : gpt.parameters()) ops::fill(p.grad, 7.f);
  int reported = 0;
  const double loss = gpt.forward_backward(b.inputs, b.targets, 0.f, false, [&](int) { reported++; });
  EXPECT_GT(loss, 0);
  EXPECT_EQ(reported, static_cast<int>(gpt.parameters().size()));
  for (auto& p : gpt.parameters())
    EXPECT_EQ(testing::to_vector(p.grad), std::vector<float>(p.grad.numel(), 0.f)) << p.name;
  NANODDP_EXPECT_ERROR(gpt.forward_backward(b.inputs, b.targets, NAN, false), "loss scale");
}

TEST(Backward, AccumulationAddsEachMicroBatchGradientOnce) {
  const auto c = tiny_config();
  GPT gpt(c, Device::cpu());
  testing::randomise(gpt, 200);
  auto b1 = testing::make_batch(2, 6, c.vocab_size, 21), b2 = testing::make_batch(2, 6, c.vocab_size, 31);
  std::vector<std::vector<float>> g1, g2;
  gpt.forward_backward(b1.inputs, b1.targets, 1.f, false);
  for (auto& p : gpt.parameters()) g1.push_back(testing::to_vector(p.grad));
  gpt.forward_backward(b2.inputs, b2.targets, 1.f, false);  // accumulate=false overwrites
  for (auto& p : gpt.parameters()) g2.push_back(testing::to_vector(p.grad));
  for (float s : {1.f, 0.5f}) {
    gpt.forward_backward(b1.inputs, b1.targets, s, false);
    gpt.forward_backward(b2.inputs, b2.targets, s, true);
    for (size_t i = 0; i < g1.size(); i++) {
      std::vector<float> want(g1[i].size());
      for (size_t j = 0; j < want.size(); j++) want[j] = s * g1[i][j] + s * g2[i][j];
      EXPECT_EQ(testing::to_vector(gpt.parameters()[i].grad), want) << gpt.parameters()[i].name << " scale " << s;
    }
  }
}

// The trainer's micro-steps leave their per-token losses on the device and read them once per step
// (Note [reading the loss] in train/token_stage.cpp). The deferred micro-step must train exactly as
// forward_backward does and leave exactly the losses whose mean forward_backward returns: the same
// gradients and the same mean, to the bit, with an ignored target in the batch.
TEST(Backward, ADeferredMicroStepLeavesTheLossesWhoseMeanForwardBackwardReturns) {
  const auto c = tiny_config();
  GPT read(c, Device::cpu()), deferred(c, Device::cpu());
  testing::randomise(read, 400);
  testing::randomise(deferred, 400);
  auto b1 = testing::make_batch(2, 6, c.vocab_size, 51), b2 = testing::make_batch(2, 6, c.vocab_size, 61);
  b2.targets.data<int32_t>()[3] = -1;
  const double want = read.forward_backward(b1.inputs, b1.targets, 0.5f, false) +
                      read.forward_backward(b2.inputs, b2.targets, 0.5f, true);
  // [2 micro-batches, 2 * 6 tokens], filled with a value a skipped write would leave showing.
  Tensor losses = Tensor::empty({24}, DType::F32);
  ops::fill(losses, 99.f);
  const int64_t n1 = deferred.forward_backward_deferred(losses.rows(0, 12), b1.inputs, b1.targets, 0.5f, false);
  const int64_t n2 = deferred.forward_backward_deferred(losses.rows(12, 24), b2.inputs, b2.targets, 0.5f, true);
  EXPECT_EQ(n1, 11);  // make_batch ignores one target
  EXPECT_EQ(n2, 10);
  const std::vector<float> l = testing::to_vector(losses);
  double s1 = 0, s2 = 0;
  for (int i = 0; i < 12; i++) s1 += l[i];
  for (int i = 12; i < 24; i++) s2 += l[i];
  EXPECT_EQ(l[1], 0.f);   // the ignored targets
  EXPECT_EQ(l[15], 0.f);
  EXPECT_EQ(s1 / static_cast<double>(n1) + s2 / static_cast<double>(n2), want);
  for (size_t i = 0; i < read.parameters().size(); i++)
    EXPECT_EQ(testing::to_vector(deferred.parameters()[i].grad), testing::to_vector(read.parameters()[i].grad))
        << read.parameters()[i].name;
}

TEST(Backward, GradReadyCallsComeOnceInReverseOrderWithFinalGradients) {
  const auto c = tiny_config();
  GPT gpt(c, Device::cpu());
  testing::randomise(gpt, 300);
  auto b = testing::make_batch(2, 6, c.vocab_size, 41);
  std::vector<int> order;
  std::vector<std::vector<float>> at_call(gpt.parameters().size());
  gpt.forward_backward(b.inputs, b.targets, 1.f, false, [&](int i) {
    order.push_back(i);
    at_call[i] = testing::to_vector(gpt.parameters()[i].grad);
  });
  const int n = static_cast<int>(gpt.parameters().size());
  ASSERT_EQ(static_cast<int>(order.size()), n);
  for (int i = 0; i < n; i++) EXPECT_EQ(order[i], n - 1 - i);  // lm_head first ... wte last
  for (int i = 0; i < n; i++) EXPECT_EQ(at_call[i], testing::to_vector(gpt.parameters()[i].grad));
}

TEST(Inference, KvCacheMatchesFullRecompute) {
  const auto c = tiny_config(1);
  GPT gpt(c, Device::cpu());
  testing::randomise(gpt, 400);
  std::vector<int32_t> seq = {3, 17, 42, 8, 0, 49, 21, 5};
  model::KVCache cache(gpt, 1);
  Tensor prompt = Tensor::empty({1, 3}, DType::I32);
  std::copy_n(seq.begin(), 3, prompt.data<int32_t>());
  Tensor inc = gpt.forward_next(prompt, cache);
  for (size_t t = 3; t <= seq.size(); t++) {
    model::KVCache fresh(gpt, 1);
    Tensor full = Tensor::empty({1, static_cast<int64_t>(t)}, DType::I32);
    std::copy_n(seq.begin(), t, full.data<int32_t>());
    Tensor want = gpt.forward_next(full, fresh);
    EXPECT_LT(max_rel_error(inc, want), 1e-5) << "position " << t;
    if (t == seq.size()) break;
    Tensor one = Tensor::empty({1, 1}, DType::I32);
    one.data<int32_t>()[0] = seq[t];
    inc = gpt.forward_next(one, cache);
  }
}

TEST(Inference, LogitsMatchTheTrainingForwardLoss) {
  const auto c = tiny_config();
  GPT gpt(c, Device::cpu());
  testing::randomise(gpt, 500);
  auto b = testing::make_batch(1, 7, c.vocab_size, 51, false);
  Tensor losses = gpt.forward_losses(b.inputs, b.targets);
  model::KVCache cache(gpt, 1);
  Tensor logits = gpt.forward_next(b.inputs, cache);  // last position's logits
  const float* z = logits.data<float>();
  double mx = *std::max_element(z, z + c.vocab_size), sum = 0;
  for (int64_t j = 0; j < c.vocab_size; j++) sum += std::exp(z[j] - mx);
  double want = mx + std::log(sum) - z[b.tgt.back()];
  EXPECT_NEAR(losses.data<float>()[6], want, 1e-5);
}

TEST(Sampling, GreedyAndTopKAreDeterministic) {
  float logits[5] = {0.1f, 2.0f, -1.f, 1.9f, 0.5f};
  Rng rng(1);
  EXPECT_EQ(model::sample_token(logits, 5, 0.f, 0, rng), 1);
  for (int i = 0; i < 200; i++) {
    int32_t t = model::sample_token(logits, 5, 1.f, 2, rng);
    EXPECT_TRUE(t == 1 || t == 3);
  }
}

// RL's batched sampling (model/generate.h): the prompt's KV cache replicated to N rows, then one
// forward of N rows per token. Each row must draw what generate() draws with its seed.
// Tolerance: none on tokens. The batched and single-row forwards compute each row with the same
// kernels on the same numbers; a last-bit difference between GEMM shapes could only flip a draw
// whose uniform lands within ~1e-7 of a boundary, which these few draws do not.
TEST(Sampling, BatchedSamplesEqualOneByOneWithTheSameSeeds) {
  const auto c = tiny_config(1);
  GPT gpt(c, Device::cpu());
  testing::randomise(gpt, 600);
  const std::vector<int32_t> prompt = {3, 17, 42, 8};
  model::SampleOptions so{.max_tokens = 9, .temperature = 1.f, .top_k = 0, .seed = 0, .stop_token = 5};
  const std::vector<uint64_t> seeds = {11, 12, 13, 14, 15};
  const auto batched = model::generate_batch(gpt, prompt, seeds, so);
  ASSERT_EQ(batched.size(), seeds.size());
  size_t distinct = 0;
  for (size_t i = 0; i < seeds.size(); i++) {
    so.seed = seeds[i];
    EXPECT_EQ(batched[i], model::generate(gpt, prompt, so)) << "sample " << i;
    distinct += i > 0 && batched[i] != batched[0] ? 1 : 0;
  }
  EXPECT_GT(distinct, 0u) << "the seeds should give different samples";
  for (const auto& row : batched) EXPECT_LE(row.size(), 9u);
  // also_stop ends a row as stop_token does (nanochat stops a reply at <|assistant_end|> or
  // <|bos|>): with the first sampled id of each row as also_stop, every row is that one id.
  for (size_t i = 0; i < seeds.size(); i++) {
    so.seed = seeds[i];
    model::SampleOptions first = so;
    first.stop_token = -1;
    first.also_stop = batched[i].front();
    EXPECT_EQ(model::generate(gpt, prompt, first), std::vector<int32_t>{batched[i].front()}) << "sample " << i;
  }
  model::SampleOptions row0 = so;
  row0.also_stop = batched[0].front();
  const auto stopped = model::generate_batch(gpt, prompt, seeds, row0);
  EXPECT_EQ(stopped[0], std::vector<int32_t>{batched[0].front()});
  // As generate(): a prompt that fills the context (16) gets one token, a longer one none.
  EXPECT_EQ(model::generate_batch(gpt, std::vector<int32_t>(16, 1), seeds, so)[2].size(), 1u);
  EXPECT_TRUE(model::generate_batch(gpt, std::vector<int32_t>(17, 1), seeds, so)[0].empty());
}

// --dtype bf16 on the CPU (Note [bf16 activations on the CPU] in ops/cpu/kernels.h): the whole model
// -- logits, loss, every parameter's gradient, KV-cache decoding -- against the same weights in
// f32, on the configuration the GPU's bf16 test uses (head_dim 128, grouped-query). Tolerances are
// that test's: each activation and weight copy carries a relative error up to 2^-9, and the errors
// of two blocks, the attention's bf16 P and dS and the head add up to about 1%; a kernel that
// misreads bf16 (or a gradient computed from the wrong copy) is off by O(1).
TEST(Bf16, TheModelFollowsF32WithinBf16Tolerance) {
  GPTConfig c;
  c.vocab_size = 300;
  c.n_layer = 2;
  c.n_embd = 256;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.max_seq_len = 128;
  GPT f(c, Device::cpu(), DType::F32), b(c, Device::cpu(), DType::BF16);
  testing::randomise(f, 500);
  testing::randomise(b, 500);
  const testing::Batch batch = testing::make_batch(2, 128, 300, 501);
  const auto logits_f = testing::vec(f.forward_logits(batch.inputs)), logits_b = testing::vec(b.forward_logits(batch.inputs));
  const double loss_f = f.forward_backward(batch.inputs, batch.targets, 1.f, false),
               loss_b = b.forward_backward(batch.inputs, batch.targets, 1.f, false);
  const double logits_err = testing::rel_l2(logits_b, logits_f), loss_err = std::abs(loss_b - loss_f) / loss_f;
  double grad_err = 0;
  for (size_t i = 0; i < f.parameters().size(); i++) {
    ASSERT_EQ(b.parameters()[i].grad.dtype(), DType::F32);  // gradients stay f32
    const double e = testing::rel_l2(b.parameters()[i].grad, f.parameters()[i].grad);
    EXPECT_LT(e, 6e-2) << f.parameters()[i].name;
    grad_err = std::max(grad_err, e);
  }
  std::printf("bf16 vs f32 on the CPU: logits rel L2 %.2e, loss %.2e, worst gradient rel L2 %.2e\n", logits_err,
              loss_err, grad_err);
  EXPECT_LT(logits_err, 3e-2);
  // The loss is a mean over 256 tokens whose errors are nearly independent: about 1% / sqrt(256), 6e-4.
  EXPECT_LT(loss_err, 2e-3);
  EXPECT_GT(logits_err, 0) << "bf16 gave f32's logits bit for bit: it did not round";
  // Decoding with a bf16 KV cache.
  model::KVCache cf(f, 2), cb(b, 2);
  Tensor ids = testing::randint({2, 5}, 502, 0, 300);
  for (int step = 0; step < 3; step++) {
    EXPECT_LT(testing::rel_l2(b.forward_next(ids, cb), f.forward_next(ids, cf)), 3e-2) << "decode step " << step;
    ids = testing::randint({2, 1}, 503 + step, 0, 300);
  }
}

}  // namespace
}  // namespace nanoddp

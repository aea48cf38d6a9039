// The 2026 optimizer against the PyTorch twin's (tools/torch_recipe2026.py, an independent
// implementation on Debian's python3-torch): nanoddp writes a small recipe-2026 GPT's weights and
// a batch, the twin computes the gradients and its optimizer's step; here the same gradients go
// through ddp::Optimizer: one step from fresh state at chosen lr multiplier, momentum and weight
// decay (step.<name>). Steps past the first are checked against the slow reference of
// test_optimizer_2026.cpp: the twin's `trained.<name>` after several steps takes nanoddp's own
// gradients, and rows of barely active ReLU^2 units, blown up to the mean row norm by the row
// equilibration, turn their last-bit differences into percents.
#include <gtest/gtest.h>
#include <omp.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/process_group.h"
#include "core/safetensors.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "model/gpt.h"
#include "reference_gpt.h"
#include "test_util.h"

namespace nanoddp {
namespace {

// Three layers "SSSL" (value embeddings and their gates on layers 0 and 2), tall, wide and square
// matrices, every parameter kind.
model::GPTConfig config() {
  model::GPTConfig c;
  c.recipe = model::Recipe::R2026;
  c.window_pattern = "SSSL";
  c.rope_base = 100000.f;
  c.vocab_size = 100;
  c.n_layer = 3;
  c.n_embd = 32;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.max_seq_len = 256;
  return c;
}

constexpr double kLrm = 0.8, kMomentum = 0.9, kMuonWd = 0.2;

TEST(Optimizer2026Golden, OneStepAndThreeTrainingStepsMatchTheTwin) {
  const std::string no_torch = testing::torch_unavailable();
  NANODDP_SKIP_UNLESS_REFERENCE(no_torch.empty(), no_torch);
  omp_set_num_threads(1);
  const model::GPTConfig c = config();
  model::GPT gpt(c, Device::cpu());
  gpt.init_weights(5);
  // The init leaves c_proj at zero and the lambdas at constants: random weights give every
  // parameter a gradient and both signs, so that the cautious mask has work.
  uint64_t seed = 40;
  for (auto& p : gpt.parameters()) copy(p.data, testing::randn(p.data.shape(), seed++, 0.3f));
  const Tensor inputs = testing::randint({2, 24}, 7, 0, c.vocab_size), targets = testing::randint({2, 24}, 8, 0, c.vocab_size);

  testing::ScratchDir dir("optim2026_golden");
  nlohmann::json cfg = c.to_json();
  cfg["optimizer"] = {{"lr_multiplier", kLrm}, {"momentum", kMomentum}, {"muon_weight_decay", kMuonWd}};
  auto run = testing::run_torch_reference("torch_recipe2026.py", dir.str(), gpt, inputs, targets, cfg);
  ASSERT_EQ(run.status, 0) << run.output;
  SafetensorsFile golden(dir.str("golden.safetensors"));

  auto group = dist::make_single_rank_group(Device::cpu());
  ddp::Reducer reducer(gpt, *group, ddp::ReducerOptions{});
  ddp::OptimizerConfig oc;
  oc.recipe_2026 = true;
  oc.embedding_lr = 0.3;  // base_train's defaults, the twin's too
  oc.unembedding_lr = 0.008;
  oc.ns_bf16 = false;  // the twin computes in f32
  std::vector<Tensor> start;
  for (auto& p : gpt.parameters()) {
    start.push_back(Tensor::empty(p.data.shape(), DType::F32));
    copy(start.back(), p.data);
  }

  // One step from the twin's gradients.
  {
    ddp::Optimizer opt(gpt, reducer, oc);
    for (auto& p : gpt.parameters()) golden.read_into("grad." + p.name, p.grad);
    reducer.finish();
    opt.set_muon_weight_decay(kMuonWd);
    opt.step(kLrm, kMomentum);
    for (size_t i = 0; i < gpt.parameters().size(); i++) {
      const auto& p = gpt.parameters()[i];
      // Relative to the twin's update, step - start: f32 both, in other orders; Polar Express's
      // coefficients (up to 22) grow last-bit differences to ~1e-5 of the update (measured 1.5e-5).
      const Tensor want = golden.read("step." + p.name);
      std::vector<double> got_update, want_update;
      const auto s = testing::to_double(start[i]), g = testing::to_double(p.data), wv = testing::to_double(want);
      for (size_t j = 0; j < s.size(); j++) {
        got_update.push_back(g[j] - s[j]);
        want_update.push_back(wv[j] - s[j]);
      }
      EXPECT_LT(testing::max_rel_error(got_update, want_update), 1e-4) << p.name;
    }
  }
}

}  // namespace
}  // namespace nanoddp

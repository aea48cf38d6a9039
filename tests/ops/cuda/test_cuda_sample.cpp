// The CUDA sampling kernel (ops/cuda/sample.cu) against its CPU twin (ops/cpu/sample.cpp): the
// same logits and uniforms must give the same ids, exactly (Note [sampling on the device] in
// ops/sample_math.h: both do the same IEEE operations in the same order). Then the model's
// generation on the GPU against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "cuda_test_util.h"
#include "model/generate.h"
#include "model/gpt.h"

namespace nanoddp {
namespace {

struct Case {
  int64_t rows, vocab, vpad;
  float cap, temperature;
  int64_t top_k;
  int levels;  // > 0: logits on a grid of this many values (ties); 0: normal
};

// ids [rows] from the backend of `device`, for host f32 logits [rows, vpad] held in dtype dt.
std::vector<int32_t> ids_on(Device device, DType dt, const Tensor& logits, const Tensor& u, const Case& c) {
  Tensor l = device.is_cpu() ? Tensor::empty(logits.shape(), dt) : testing::to_gpu(logits, dt);
  if (device.is_cpu()) ops::cast(l, logits);
  Tensor ids = Tensor::empty({c.rows}, DType::I32, device);
  ops::sample_tokens(ids, l, device.is_cpu() ? u : u.copy_to(device), c.vocab, c.cap, c.temperature, c.top_k);
  Tensor host = device.is_cpu() ? ids : ids.copy_to(Device::cpu());
  return {host.data<int32_t>(), host.data<int32_t>() + c.rows};
}

TEST(CudaSample, KernelPicksTheCpuTwinsIdsExactly) {
  NANODDP_REQUIRE_GPU();
  const Case cases[] = {
      {7, 5, 8, 15.f, 1.f, 0, 0},            // fewer ids than chunks
      {16, 300, 320, 15.f, 0.f, 0, 0},       // greedy
      {16, 300, 320, 15.f, 0.f, 0, 4},       // greedy among ties: the lowest id
      {33, 300, 320, 15.f, 1.f, 0, 0},       // all ids
      {33, 300, 320, 15.f, 0.7f, 50, 0},     // top-k
      {33, 700, 704, 0.f, 1.f, 30, 6},       // ties at the k-th value, no cap
      {33, 700, 704, 15.f, 1.3f, 699, 6},    // top_k = vocab - 1
      {8, 65536, 65536, 15.f, 1.f, 0, 0},    // nanochat's vocabulary
      {8, 65536, 65536, 15.f, 0.8f, 50, 0},  // and its chat's top_k
      {8, 50257, 50304, 15.f, 1.f, 200, 12},
  };
  Rng rng(21);
  for (const Case& c : cases) {
    Tensor logits = Tensor::empty({c.rows, c.vpad}, DType::F32), u = Tensor::empty({c.rows}, DType::F32);
    for (int64_t i = 0; i < logits.numel(); i++) {
      const float x = c.levels > 0 ? std::floor(rng.uniform() * c.levels) - 2.f : 6.f * rng.normal();
      logits.data<float>()[i] = round_to_bf16(x);  // the same values in f32 and bf16
    }
    for (int64_t r = 0; r < c.rows; r++) u.data<float>()[r] = rng.uniform();
    for (DType dt : {DType::F32, DType::BF16}) {
      const auto cpu = ids_on(Device::cpu(), dt, logits, u, c), gpu = ids_on(testing::gpu(), dt, logits, u, c);
      EXPECT_EQ(gpu, cpu) << "rows " << c.rows << " vocab " << c.vocab << " T " << c.temperature << " top_k "
                          << c.top_k << " levels " << c.levels << " " << testing::dtype_label(dt);
    }
  }
}

// Generation on the GPU (logits sampled on the device) against the CPU with the same f32 weights
// and seeds. Tolerance: none on tokens, as in tests/model/test_gpt.cpp's batched test: the two
// backends' logits differ by f32 rounding (about 1e-6 relative), which changes a draw only when
// its uniform lands within about that of a boundary, and these 3 x 24 draws do not.
TEST(CudaSample, GenerationOnTheGpuGivesTheCpusTokens) {
  NANODDP_REQUIRE_GPU();
  model::GPTConfig c;
  c.vocab_size = 300;
  c.n_layer = 2;
  c.n_embd = 128;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.max_seq_len = 64;
  model::GPT g(c, testing::gpu(), DType::F32), h(c, Device::cpu(), DType::F32);
  // N(0, 1) for wte and N(0, 1/fan_in) for the matrices, as test_cuda_model.cpp: logits of a few
  // units, not saturated by the cap (where ties would make greedy hang on the last bit).
  for (model::GPT* m : {&g, &h}) {
    uint64_t seed = 3;
    for (auto& p : m->parameters()) {
      const float std = p.kind == model::ParamKind::Embedding ? 1.f : 1.f / std::sqrt(float(p.data.dim(1)));
      copy(p.data, testing::randn(p.data.shape(), seed++, std));
    }
    m->refresh_compute_weights();
  }
  const std::vector<int32_t> prompt = {3, 17, 42, 8};
  model::SampleOptions so{.max_tokens = 24, .temperature = 1.f, .top_k = 0, .seed = 5};
  EXPECT_EQ(model::generate(g, prompt, so), model::generate(h, prompt, so));
  so.temperature = 0.f;
  EXPECT_EQ(model::generate(g, prompt, so), model::generate(h, prompt, so));
  so.temperature = 0.9f;
  so.top_k = 20;
  const std::vector<uint64_t> seeds = {1, 2, 3};
  EXPECT_EQ(model::generate_batch(g, prompt, seeds, so), model::generate_batch(h, prompt, seeds, so));
}

}  // namespace
}  // namespace nanoddp

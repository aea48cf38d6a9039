// Recipe 2026's gate ops on CUDA against the CPU backend (itself checked against double twins in
// tests/ops/test_gate_kernels.cpp): the same inputs, as each dtype holds them; forward outputs,
// every gradient, and the reductions bit for bit from one run to the next.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernel_test_util.h"

namespace nanoddp {
namespace {

using testing::max_rel_error;
using testing::randn;
using testing::rounded;
using testing::to_double;
using testing::to_gpu;
using testing::to_host;
using testing::tol;

double err(const Tensor& got, const Tensor& want) { return max_rel_error(to_double(got), to_double(want)); }

class CudaGates : public ::testing::TestWithParam<DType> {};

// Both backends compute in f32 and round once per stored element; sums differ in order only:
// 1e-5 in f32, one rounding of the output (kBf16Eps) in bf16.
TEST_P(CudaGates, ValueGateMatchesCpu) {
  NANODDP_REQUIRE_GPU();
  const DType dt = GetParam();
  const int64_t n = 70, c = 64, groups = 2, k = 12, d = 32;
  Tensor x = rounded(randn({n, c}, 1), dt), w = rounded(randn({groups, k}, 2, 0.3f), dt);
  Tensor ve = rounded(randn({n, groups * d}, 3), dt), v = rounded(randn(ve.shape(), 4), dt);
  Tensor gv = to_gpu(v, dt), ggate = testing::poisoned({n, groups}, DType::F32),
         gate = Tensor::empty({n, groups}, DType::F32);
  Tensor cv = Tensor::empty(v.shape(), DType::F32);
  copy(cv, v);
  ops::value_gate_forward(gv, ggate, to_gpu(x, dt), to_gpu(w, dt), to_gpu(ve, dt));
  ops::value_gate_forward(cv, gate, x, w, ve);
  EXPECT_LT(err(gv, cv), tol(dt, 1e-5, testing::kBf16Eps));
  EXPECT_LT(err(ggate, gate), 1e-5);
  Tensor dv = rounded(randn(ve.shape(), 5), dt), dx = rounded(randn({n, c}, 6), dt);
  Tensor gdx = to_gpu(dx, dt), gdw = Tensor::empty({groups, k}, DType::F32, testing::gpu());
  Tensor gdve = testing::poisoned(ve.shape(), dt), dw = Tensor::empty({groups, k}, DType::F32);
  Tensor dve = Tensor::empty(ve.shape(), DType::F32);
  ops::value_gate_backward(gdx, gdw, gdve, to_gpu(dv, dt), to_gpu(x, dt), to_gpu(w, dt), to_gpu(ve, dt), ggate);
  ops::value_gate_backward(dx, dw, dve, dv, x, w, ve, gate);
  EXPECT_LT(err(gdx, dx), tol(dt, 1e-5, 2 * testing::kBf16Eps));
  EXPECT_LT(err(gdve, dve), tol(dt, 1e-5, testing::kBf16Eps));
  EXPECT_LT(err(gdw, dw), 1e-4);  // f32 sums of 70 terms in two orders
}

TEST_P(CudaGates, SmearMatchesCpuAndRepeats) {
  NANODDP_REQUIRE_GPU();
  const DType dt = GetParam();
  const int64_t batch = 3, seq = 40, c = 96, k = 24, n = batch * seq;
  Tensor x = rounded(randn({n, c}, 11), dt), w = rounded(randn({1, k}, 12, 0.3f), dt);
  Tensor prev = rounded(randn({batch, c}, 13), dt), lambda = Tensor::empty({1}, DType::F32);
  lambda.data<float>()[0] = 0.6f;
  Tensor glambda = lambda.copy_to(testing::gpu()), gx = to_gpu(x, dt), gw = to_gpu(w, dt);
  for (bool with_prev : {false, true}) {
    Tensor gy = testing::poisoned({n, c}, dt), gg = testing::poisoned({n}, DType::F32);
    Tensor y = Tensor::empty({n, c}, DType::F32), g = Tensor::empty({n}, DType::F32);
    ops::smear_forward(gy, gg, gx, with_prev ? to_gpu(prev, dt) : Tensor(), gw, glambda, seq);
    ops::smear_forward(y, g, x, with_prev ? prev : Tensor(), w, lambda, seq);
    EXPECT_LT(err(gy, y), tol(dt, 1e-5, testing::kBf16Eps)) << with_prev;
    EXPECT_LT(err(gg, g), 1e-5) << with_prev;
  }
  Tensor gg = Tensor::empty({n}, DType::F32, testing::gpu()), g = Tensor::empty({n}, DType::F32);
  Tensor gy = Tensor::empty({n, c}, dt, testing::gpu()), y = Tensor::empty({n, c}, DType::F32);
  ops::smear_forward(gy, gg, gx, Tensor(), gw, glambda, seq);
  ops::smear_forward(y, g, x, Tensor(), w, lambda, seq);
  Tensor dy = rounded(randn({n, c}, 14), dt), gdy = to_gpu(dy, dt);
  auto run_gpu = [&] {
    Tensor dx = testing::poisoned({n, c}, dt), dw = testing::poisoned({1, k}, DType::F32);
    Tensor dl = testing::poisoned({1}, DType::F32), scratch = Tensor::empty({n}, DType::F32, testing::gpu());
    ops::smear_backward(dx, dw, dl, scratch, gdy, gx, gw, glambda, gg, seq);
    return std::vector<Tensor>{to_host(dx), to_host(dw), to_host(dl)};
  };
  const auto got = run_gpu(), again = run_gpu();
  Tensor dx = Tensor::empty({n, c}, DType::F32), dw = Tensor::empty({1, k}, DType::F32);
  Tensor dl = Tensor::empty({1}, DType::F32), scratch = Tensor::empty({n}, DType::F32);
  ops::smear_backward(dx, dw, dl, scratch, dy, x, w, lambda, g, seq);
  EXPECT_LT(err(got[0], dx), tol(dt, 1e-5, 2 * testing::kBf16Eps));
  EXPECT_LT(err(got[1], dw), 1e-4);  // f32 sums over 120 tokens in two orders
  EXPECT_LT(err(got[2], dl), 1e-4);
  for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(testing::bytes_of(got[i]), testing::bytes_of(again[i])) << i;
}

TEST_P(CudaGates, ScalarMixMatchesCpu) {
  NANODDP_REQUIRE_GPU();
  const DType dt = GetParam();
  const int64_t n = 5000;
  Tensor y = rounded(randn({n}, 21), dt), x = rounded(randn({n}, 22), dt), dy = rounded(randn({n}, 23), dt);
  Tensor a = Tensor::empty({1}, DType::F32), b = Tensor::empty({1}, DType::F32);
  a.data<float>()[0] = 1.1f;
  b.data<float>()[0] = 0.2f;
  Tensor ga = a.copy_to(testing::gpu()), gb = b.copy_to(testing::gpu());
  Tensor gy = to_gpu(y, dt), cy = Tensor::empty({n}, DType::F32);
  copy(cy, y);
  ops::scalar_mix_forward(gy, to_gpu(x, dt), ga, gb, -1.f);
  ops::scalar_mix_forward(cy, x, a, b, -1.f);
  EXPECT_LT(err(gy, cy), tol(dt, 1e-6, testing::kBf16Eps));
  Tensor gdy = to_gpu(dy, dt), gdx = to_gpu(x, dt), gda = Tensor::empty({1}, DType::F32, testing::gpu());
  Tensor gdb = Tensor::empty({1}, DType::F32, testing::gpu()), cdx = Tensor::empty({n}, DType::F32);
  Tensor da = Tensor::empty({1}, DType::F32), db = Tensor::empty({1}, DType::F32);
  copy(cdx, x);
  ops::scalar_mix_backward(gdy, gdx, gda, gdb, to_gpu(y, dt), to_gpu(x, dt), ga, gb, -1.f);
  ops::scalar_mix_backward(dy, cdx, da, db, y, x, a, b, -1.f);
  EXPECT_LT(err(gdy, dy), tol(dt, 1e-6, testing::kBf16Eps));
  EXPECT_LT(err(gdx, cdx), tol(dt, 1e-6, testing::kBf16Eps));
  EXPECT_LT(err(gda, da), 1e-4);  // an f32 sum of 5,000 terms against the CPU's double
  EXPECT_LT(err(gdb, db), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(ActDTypes, CudaGates, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return testing::dtype_label(info.param); });

}  // namespace
}  // namespace nanoddp

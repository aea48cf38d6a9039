// Conversions between tensors and the double vectors the references work on.
#pragma once

#include <numeric>
#include <vector>

#include "core/tensor.h"
#include "reference.h"
#include "test_util.h"

namespace nanoddp::testing {

inline reference::Vec vec(const Tensor& t) { return to_double(t); }

inline Tensor tensor(const reference::Vec& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); i++) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

inline std::vector<int32_t> ints(const Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

// `count` indices spread over [0, n) (all of them when n <= count).
inline std::vector<int64_t> sample_indices(int64_t n, int64_t count, uint64_t seed) {
  std::vector<int64_t> idx;
  if (n <= count) {
    idx.resize(n);
    std::iota(idx.begin(), idx.end(), 0);
    return idx;
  }
  Rng rng(seed);
  for (int64_t i = 0; i < count; i++) idx.push_back(static_cast<int64_t>(rng.next_u64() % uint64_t(n)));
  return idx;
}

// The analytic gradient at the sampled indices.
inline reference::Vec gather(const Tensor& grad, const std::vector<int64_t>& idx) {
  reference::Vec g;
  for (int64_t i : idx) g.push_back(grad.data<float>()[i]);
  return g;
}

}  // namespace nanoddp::testing

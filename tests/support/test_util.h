// Helpers shared by the tests: random tensors, error norms, scratch directories.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace nanoddp::testing {

// f32 CPU tensor with N(0, std) entries from a fixed seed.
Tensor randn(const Shape& shape, uint64_t seed, float std = 1.f);
// i32 CPU tensor with entries uniform in [lo, hi).
Tensor randint(const Shape& shape, uint64_t seed, int32_t lo, int32_t hi);

std::vector<float> to_vector(const Tensor& t);   // any float dtype, any device -> f32 on the host
std::vector<double> to_double(const Tensor& t);

// max |a - b| / max(max |b|, floor): the error relative to the reference's scale.
double max_rel_error(const std::vector<double>& got, const std::vector<double>& want, double floor = 1e-12);
double max_rel_error(const Tensor& got, const Tensor& want, double floor = 1e-12);

// A fresh, empty directory under the build tree, removed when the object goes away.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& child = "") const { return (child.empty() ? path_ : path_ / child).string(); }

 private:
  std::filesystem::path path_;
};

// The nanoddp executable of this build tree.
std::string nanoddp_binary();

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed), for a store or
// launcher the test starts next.
int free_port();

// Runs a shell command; returns its exit status (-1 if it could not run) and its stdout+stderr.
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_command(const std::string& command);

}  // namespace nanoddp::testing

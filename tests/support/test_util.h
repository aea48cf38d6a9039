// Helpers shared by the tests: random tensors, error norms, scratch directories, files, commands,
// skips and error-message checks.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/device.h"
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
// ||got - want|| / ||want|| over all elements, the relative Frobenius norm of a matrix: for results
// whose single elements may round differently but whose whole must not (NaN anywhere gives infinity).
double rel_l2(const std::vector<double>& got, const std::vector<double>& want);
double rel_l2(const Tensor& got, const Tensor& want);

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

// The argv of the nanoddp binary running `command` ("train", "--data", ...).
std::vector<std::string> nanoddp_argv(const std::vector<std::string>& command);

// The argv of `nanoddp run --standalone --nproc_per_node NPROC`, then launcher_flags, then `command`.
std::vector<std::string> nanoddp_run_argv(int nproc, const std::vector<std::string>& launcher_flags,
                                          const std::vector<std::string>& command);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed), for a store or
// launcher the test starts next.
int free_port();

// Runs a shell command; returns its exit status (-1 if it could not run) and its stdout+stderr.
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_command(const std::string& command);

// "" when /usr/bin/python3 can import torch (the PyTorch references), else why it cannot.
std::string torch_unavailable();

// The whole file ("" when it cannot be opened).
std::string read_file(const std::string& path);

// Skips the current test, printing `reason`, unless `cond` holds: for what a machine may lack (a
// GPU, root, a tool). Like GTEST_SKIP it returns from the function it is written in.
#define NANODDP_SKIP_UNLESS(cond, reason)  \
  do {                                     \
    if (!(cond)) GTEST_SKIP() << (reason); \
  } while (0)

// Every test that runs on a GPU starts with this: the suite runs (and reports skips) on machines
// without one.
#define NANODDP_REQUIRE_GPU() NANODDP_SKIP_UNLESS(::nanoddp::cuda_device_count() > 0, "skipped: no GPU")

// True under NANODDP_REQUIRE_REFERENCES=1 (CI), where a comparison must not pass by being skipped.
bool references_required();

// NANODDP_SKIP_UNLESS for a reference implementation (node and the npm packages, PyTorch): a
// missing one fails the test instead when references are required.
#define NANODDP_SKIP_UNLESS_REFERENCE(cond, reason)                                                \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      if (::nanoddp::testing::references_required()) FAIL() << "reference missing: " << (reason); \
      GTEST_SKIP() << "reference missing: " << (reason);                                          \
    }                                                                                             \
  } while (0)

// Fails the test unless `statement` throws nanoddp::Error whose message contains each substring
// after it: NANODDP_EXPECT_ERROR(ShardReader r(path), path, "truncated"). The statement runs once.
// Commas in it must be inside parentheses (braces do not protect them from the preprocessor).
#define NANODDP_EXPECT_ERROR(statement, ...) \
  ::nanoddp::testing::expect_error_at([&] { statement; }, {__VA_ARGS__}, #statement, __FILE__, __LINE__)
void expect_error_at(const std::function<void()>& statement, std::initializer_list<std::string> substrings,
                     const char* text, const char* file, int line);

}  // namespace nanoddp::testing

#include "test_util.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace nanoddp::testing {

Tensor randn(const Shape& shape, uint64_t seed, float std) {
  Tensor t = Tensor::empty(shape, DType::F32);
  Rng rng(seed);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); i++) p[i] = std * rng.normal();
  return t;
}

Tensor randint(const Shape& shape, uint64_t seed, int32_t lo, int32_t hi) {
  Tensor t = Tensor::empty(shape, DType::I32);
  Rng rng(seed);
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); i++) p[i] = lo + static_cast<int32_t>(rng.next_u64() % uint64_t(hi - lo));
  return t;
}

std::vector<float> to_vector(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.copy_to(Device::cpu());
  std::vector<float> out(h.numel());
  if (h.dtype() == DType::F32) {
    std::copy_n(h.data<float>(), h.numel(), out.begin());
  } else if (h.dtype() == DType::F16) {
    for (int64_t i = 0; i < h.numel(); i++) out[i] = f16_to_f32(h.data<f16>()[i]);
  } else {
    EXPECT_EQ(h.dtype(), DType::BF16);
    for (int64_t i = 0; i < h.numel(); i++) out[i] = bf16_to_f32(h.data<bf16>()[i]);
  }
  return out;
}

std::vector<double> to_double(const Tensor& t) {
  auto f = to_vector(t);
  return {f.begin(), f.end()};
}

double max_rel_error(const std::vector<double>& got, const std::vector<double>& want, double floor) {
  EXPECT_EQ(got.size(), want.size());
  double scale = floor, err = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++) {
    double d = std::abs(got[i] - want[i]);
    if (std::isnan(d)) return INFINITY;
    err = std::max(err, d);
  }
  return err / scale;
}

double max_rel_error(const Tensor& got, const Tensor& want, double floor) {
  return max_rel_error(to_double(got), to_double(want), floor);
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  if (std::isnan(num)) return INFINITY;
  return std::sqrt(num / std::max(den, 1e-300));
}

double rel_l2(const Tensor& got, const Tensor& want) { return rel_l2(to_double(got), to_double(want)); }

ScratchDir::ScratchDir(const std::string& name)
    : path_(std::filesystem::path(NANODDP_BINARY_DIR) / "test-scratch" / name) {
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(path_);
}

std::string nanoddp_binary() { return std::string(NANODDP_BINARY_DIR) + "/nanoddp"; }

std::vector<std::string> nanoddp_argv(const std::vector<std::string>& command) {
  std::vector<std::string> argv = {nanoddp_binary()};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::vector<std::string> nanoddp_run_argv(int nproc, const std::vector<std::string>& launcher_flags,
                                          const std::vector<std::string>& command) {
  std::vector<std::string> argv = {nanoddp_binary(), "run", "--standalone", "--nproc_per_node", std::to_string(nproc)};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return r;
}

std::string torch_unavailable() {
  const CommandResult r = run_command("/usr/bin/python3 -c 'import torch' 2>&1");
  return r.status == 0 ? "" : "python3-torch is not installed (scripts/setup.sh installs it): " + r.output;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool references_required() {
  const char* v = std::getenv("NANODDP_REQUIRE_REFERENCES");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void expect_error_at(const std::function<void()>& statement, std::initializer_list<std::string> substrings,
                     const char* text, const char* file, int line) {
  try {
    statement();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& s : substrings)
      if (message.find(s) == std::string::npos)
        ADD_FAILURE_AT(file, line) << text << " threw an error without '" << s << "': " << message;
    return;
  }
  std::string wanted;
  for (const auto& s : substrings) wanted += " '" + s + "'";
  ADD_FAILURE_AT(file, line) << text << " threw no error; expected one mentioning" << wanted;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0) << "socket() failed";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "bind to 127.0.0.1:0 failed";
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace nanoddp::testing

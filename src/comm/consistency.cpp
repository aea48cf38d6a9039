#include "comm/consistency.h"

#include <nlohmann/json.hpp>

#include <map>

#include "core/error.h"
#include "nanoddp/build_config.h"

#if NANODDP_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_util.h"
#endif
#if NANODDP_HAVE_NCCL
#include <nccl.h>
#endif
#if NANODDP_HAVE_GLOO
#include <gloo/config.h>
#endif
#if NANODDP_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace nanoddp::dist {

namespace {

// Waits for a GPU group's collective on the host (its wait() only orders the compute stream).
void wait_on_host(ProcessGroup& pg, const WorkPtr& work) {
  work->wait();
#if NANODDP_HAVE_CUDA
  if (pg.device().is_cuda()) NANODDP_CUDA_CHECK(cudaStreamSynchronize(cuda::compute_stream(pg.device().index)));
#endif
  pg.check();  // an aborted collective completes too, its buffer unreduced
}

// Runs `collective` (one call of pg on the tensor it is given) on a small host tensor, through a
// device copy when the group's collectives want another device (NCCL reduces device memory only),
// and returns once the result is back in `host`.
template <typename Collective>
void on_host_tensor(ProcessGroup& pg, const Tensor& host, Collective&& collective) {
  const Device device = pg.device();
  Tensor t = device.is_cpu() ? host : host.copy_to(device);
  wait_on_host(pg, collective(t));
  if (!device.is_cpu()) copy(host, t);
}

void broadcast_via(ProcessGroup& pg, const Tensor& host, int root) {
  on_host_tensor(pg, host, [&](const Tensor& t) { return pg.broadcast(t, root); });
}

Tensor all_gather_via(ProcessGroup& pg, const Tensor& host_in) {
  Device device = pg.device();
  Tensor out = Tensor::zeros({host_in.numel() * pg.size()}, host_in.dtype(), device);
  Tensor in = device.is_cpu() ? host_in : host_in.copy_to(device);
  wait_on_host(pg, pg.all_gather(out, in));
  return device.is_cpu() ? out : out.copy_to(Device::cpu());
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); i++) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// One line for the first difference, naming how many more there are.
std::string describe_differences(const std::vector<std::string>& diffs, std::string_view remedy) {
  std::string line = diffs[0];
  if (diffs.size() > 1) line += fmt::format(" (and {} more difference{})", diffs.size() - 1, diffs.size() > 2 ? "s" : "");
  return fmt::format("{}: {}", line, remedy);
}

}  // namespace

void allreduce_scalars(ProcessGroup& pg, std::vector<double>& values, ReduceOp op) {
  if (pg.size() == 1) return;
  Tensor host = Tensor::wrap(values.data(), {static_cast<int64_t>(values.size())}, DType::F64);
  on_host_tensor(pg, host, [&](const Tensor& t) { return pg.allreduce(t, op); });
}

std::vector<std::string> all_gather_strings(ProcessGroup& pg, const std::string& mine) {
  if (pg.size() == 1) return {mine};
  Tensor length = Tensor::empty({1}, DType::I64);
  length.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  const Tensor lengths = all_gather_via(pg, length);
  int64_t longest = 1;  // a collective of zero bytes is a no-op in some backends: keep one
  for (int r = 0; r < pg.size(); r++) longest = std::max(longest, lengths.data<int64_t>()[r]);
  Tensor bytes = Tensor::zeros({longest}, DType::U8);
  std::copy(mine.begin(), mine.end(), bytes.data<uint8_t>());
  const Tensor all = all_gather_via(pg, bytes);
  std::vector<std::string> out;
  for (int r = 0; r < pg.size(); r++) {
    const auto* p = all.data<uint8_t>() + r * longest;
    out.emplace_back(reinterpret_cast<const char*>(p), static_cast<size_t>(lengths.data<int64_t>()[r]));
  }
  return out;
}

void check_consistent(ProcessGroup& pg, const Fields& fields, std::string_view remedy) {
  if (pg.size() == 1) return;
  const int rank = pg.rank();

  // Rank 0's fields as JSON bytes: first their length, then the bytes.
  std::string mine = nlohmann::json(fields).dump();
  Tensor length = Tensor::empty({1}, DType::I64);
  length.data<int64_t>()[0] = int64_t(mine.size());
  broadcast_via(pg, length, 0);
  Tensor bytes = Tensor::zeros({length.data<int64_t>()[0]}, DType::U8);
  if (rank == 0) std::copy(mine.begin(), mine.end(), bytes.data<uint8_t>());
  broadcast_via(pg, bytes, 0);
  Fields reference;
  try {
    nlohmann::json::parse(bytes.data<uint8_t>(), bytes.data<uint8_t>() + bytes.numel()).get_to(reference);
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("rank {} could not read rank 0's settings ({}): are all ranks running the same nanoddp build?", rank,
                 e.what());
  }

  // What differs here from rank 0.
  std::vector<std::string> diffs;
  std::map<std::string, std::string> theirs(reference.begin(), reference.end());
  for (const auto& [name, value] : fields) {
    auto it = theirs.find(name);
    if (it == theirs.end())
      diffs.push_back(fmt::format("{} is {} on rank {} but not set on rank 0", name, value, rank));
    else if (it->second != value)
      diffs.push_back(fmt::format("{} is {} on rank {} but {} on rank 0", name, value, rank, it->second));
    if (it != theirs.end()) theirs.erase(it);
  }
  for (const auto& [name, value] : theirs)
    diffs.push_back(fmt::format("{} is {} on rank 0 but not set on rank {}", name, value, rank));

  // Every rank learns which ranks differ.
  Tensor flag = Tensor::empty({1}, DType::I32);
  flag.data<int32_t>()[0] = diffs.empty() ? 0 : 1;
  Tensor flags = all_gather_via(pg, flag);
  std::vector<int> differing;
  for (int r = 0; r < pg.size(); r++)
    if (flags.data<int32_t>()[r] != 0) differing.push_back(r);
  if (differing.empty()) return;
  if (!diffs.empty()) throw Error(describe_differences(diffs, remedy));
  bool one = differing.size() == 1;
  NANODDP_FAIL("{} {} {} settings that differ from rank 0's (see {} error): {}", one ? "rank" : "ranks",
               rank_list(differing), one ? "has" : "have", one ? "its" : "their", remedy);
}

Fields build_fingerprint() {
  Fields f;
  f.emplace_back("nanoddp version", NANODDP_VERSION);
  f.emplace_back("compiler", NANODDP_CXX_COMPILER);
  f.emplace_back("build type", NANODDP_BUILD_TYPE);
  f.emplace_back("engines", fmt::format("cuda={} nccl={} mpi={} gloo={}", NANODDP_HAVE_CUDA, NANODDP_HAVE_NCCL,
                                        NANODDP_HAVE_MPI, NANODDP_HAVE_GLOO));
#if NANODDP_HAVE_GLOO
  f.emplace_back("gloo", fmt::format("{}.{}.{}", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH));
#endif
#if NANODDP_HAVE_MPI
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(mpi, &len);  // callable before MPI_Init
  std::string mpi_text(mpi, size_t(len));
  f.emplace_back("mpi", mpi_text.substr(0, mpi_text.find_first_of(",\n")));
#endif
#if NANODDP_HAVE_CUDA
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    f.emplace_back("cuda runtime", fmt::format("{}.{}", runtime / 1000, runtime % 1000 / 10));
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    f.emplace_back("cuda driver", fmt::format("{}.{}", driver / 1000, driver % 1000 / 10));
  cudaGetLastError();
#endif
#if NANODDP_HAVE_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)
    f.emplace_back("nccl", fmt::format("{}.{}.{}", nccl / 10000, nccl % 10000 / 100, nccl % 100));
#endif
  return f;
}

}  // namespace nanoddp::dist

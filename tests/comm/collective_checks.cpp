#include "collective_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "comm/collective.h"
#include "rendezvous/hash_store.h"

namespace nanoddp::dist::testing {

namespace {

// The input of `rank` at global element i: an integer in [-1000, 1000] from a hash, so that no two
// ranks or positions look alike and a misplaced block is caught.
int64_t input_value(int rank, int64_t i, uint64_t salt) {
  uint64_t h = (uint64_t(rank) + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(i) + salt * 7919 + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return int64_t(h % 2001) - 1000;
}

// Writes the inputs into t, through a host copy when t lives on a GPU (the NCCL group's tensors).
template <typename T>
void fill_input(const Tensor& t, int rank, int64_t first_index, uint64_t salt) {
  Tensor host = t.device().is_cpu() ? t : Tensor::empty(t.shape(), t.dtype());
  T* p = static_cast<T*>(host.raw());
  for (int64_t i = 0; i < t.numel(); i++) p[i] = static_cast<T>(input_value(rank, first_index + i, salt));
  if (!t.device().is_cpu()) copy(t, host);
}

// The reduction over all ranks of element i, computed the way the interface defines it.
template <typename T>
T expected_reduction(int world, int64_t i, ReduceOp op, uint64_t salt) {
  int64_t sum = 0, max = INT64_MIN;
  for (int r = 0; r < world; r++) {
    int64_t v = input_value(r, i, salt);
    sum += v;
    max = std::max(max, v);
  }
  if (op == ReduceOp::Max) return static_cast<T>(max);
  if (op == ReduceOp::Sum) return static_cast<T>(sum);
  return static_cast<T>(static_cast<T>(sum) / static_cast<T>(world));  // Avg = sum, then divide
}

template <typename T>
std::string show(T v) {
  return fmt::format("{}", v);
}

class Checker {
 public:
  Checker(ProcessGroup& pg, const CheckOptions& o, std::vector<std::string>& failures)
      : pg_(pg), o_(o), failures_(failures), rank_(pg.rank()), world_(pg.size()), device_(pg.device()) {}

  // A tensor on the group's device (host memory for Gloo and MPI, the rank's GPU for NCCL).
  Tensor make(int64_t n, DType dt) const { return Tensor::empty({n}, dt, device_); }

  // Compares `got` with want(i) for every element; records the first mismatch. A GPU tensor is
  // copied to the host first (the copy is ordered after the collective the caller waited for).
  template <typename T, typename Want>
  void compare(const std::string& what, const Tensor& got_in, Want want) {
    Tensor got = got_in;
    if (!got.device().is_cpu()) {
      got = Tensor::empty(got_in.shape(), got_in.dtype());
      copy(got, got_in);
    }
    const T* p = static_cast<const T*>(got.raw());
    for (int64_t i = 0; i < got.numel(); i++) {
      T w = want(i);
      if (!(p[i] == w)) {
        failures_.push_back(fmt::format("rank {}: {}: element {} is {} but expected {}", rank_, what, i, show(p[i]),
                                        show(w)));
        return;
      }
    }
  }

  template <typename T>
  void allreduce(int64_t n, ReduceOp op) {
    DType dt = dtype_of<T>();
    Tensor t = make(n, dt);
    fill_input<T>(t, rank_, 0, o_.salt);
    pg_.allreduce(t, op)->wait();
    compare<T>(fmt::format("allreduce {} {} n={}", dtype_name(dt), reduce_op_name(op), n), t,
               [&](int64_t i) { return expected_reduction<T>(world_, i, op, o_.salt); });
  }

  template <typename T>
  void reduce_scatter(int64_t block, ReduceOp op, bool in_place) {
    DType dt = dtype_of<T>();
    Tensor in = make(block * world_, dt);
    fill_input<T>(in, rank_, 0, o_.salt);
    Tensor out = in_place ? in.region(rank_ * block, {block}) : make(block, dt);
    pg_.reduce_scatter(out, in, op)->wait();
    std::string what = fmt::format("reduce_scatter{} {} {} block={}", in_place ? " (in place)" : "", dtype_name(dt),
                                   reduce_op_name(op), block);
    compare<T>(what, out, [&](int64_t i) { return expected_reduction<T>(world_, rank_ * block + i, op, o_.salt); });
    if (!in_place)  // the interface keeps the input as it was
      compare<T>(what + " left its input", in, [&](int64_t i) { return T(input_value(rank_, i, o_.salt)); });
  }

  template <typename T>
  void all_gather(int64_t n, bool in_place) {
    DType dt = dtype_of<T>();
    Tensor out = make(n * world_, dt);
    zero(out);
    Tensor in = in_place ? out.region(rank_ * n, {n}) : make(n, dt);
    fill_input<T>(in, rank_, 0, o_.salt);
    pg_.all_gather(out, in)->wait();
    compare<T>(fmt::format("all_gather{} {} n={}", in_place ? " (in place)" : "", dtype_name(dt), n), out,
               [&](int64_t i) { return T(input_value(int(i / std::max<int64_t>(n, 1)), i % std::max<int64_t>(n, 1), o_.salt)); });
  }

  template <typename T>
  void broadcast(int64_t n, int root) {
    DType dt = dtype_of<T>();
    Tensor t = make(n, dt);
    fill_input<T>(t, rank_, 0, o_.salt);
    pg_.broadcast(t, root)->wait();
    compare<T>(fmt::format("broadcast {} n={} root={}", dtype_name(dt), n, root), t,
               [&](int64_t i) { return T(input_value(root, i, o_.salt)); });
  }

  // Several collectives in flight at once, waited for in reverse order: they must still run in
  // issue order and each produce its own result.
  void overlapping() {
    const int64_t n = 4099;
    std::vector<Tensor> ts;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 3; k++) {
      ts.push_back(make(n, DType::F32));
      fill_input<float>(ts.back(), rank_, k * n, o_.salt);
      works.push_back(pg_.allreduce(ts.back(), ReduceOp::Sum));
    }
    Tensor b = make(n, DType::I64);
    fill_input<int64_t>(b, rank_, 0, o_.salt);
    works.push_back(pg_.broadcast(b, world_ - 1));
    works.push_back(pg_.barrier());
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
    for (int k = 0; k < 3; k++)
      compare<float>(fmt::format("overlapping allreduce {}", k), ts[k],
                     [&](int64_t i) { return expected_reduction<float>(world_, k * n + i, ReduceOp::Sum, o_.salt); });
    compare<int64_t>("overlapping broadcast", b, [&](int64_t i) { return input_value(world_ - 1, i, o_.salt); });
  }

  template <typename T>
  void all_for_dtype() {
    std::vector<int64_t> counts = o_.counts;
    for (int64_t n : counts) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        allreduce<T>(n, op);
        reduce_scatter<T>(n, op, false);
      }
      all_gather<T>(n, false);
      broadcast<T>(n, int(n % world_));
    }
    int64_t mid = counts.empty() ? 5 : counts.back();
    reduce_scatter<T>(mid, ReduceOp::Sum, true);
    all_gather<T>(mid, true);
    bool large = o_.large > 0 && std::find(o_.large_dtypes.begin(), o_.large_dtypes.end(), dtype_of<T>()) !=
                                       o_.large_dtypes.end();
    if (large) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        allreduce<T>(o_.large, op);
        reduce_scatter<T>(o_.large / world_, op, false);
      }
      all_gather<T>(o_.large / world_, false);
      broadcast<T>(o_.large, world_ - 1);
    }
  }

 private:
  ProcessGroup& pg_;
  const CheckOptions& o_;
  std::vector<std::string>& failures_;
  int rank_, world_;
  Device device_;
};

}  // namespace

std::vector<std::string> check_all_collectives(ProcessGroup& pg, const CheckOptions& options) {
  std::vector<std::string> failures;
  Checker c(pg, options, failures);
  for (DType dt : options.dtypes) {
    dispatch_reducible(dt, [&]<typename T>() { c.all_for_dtype<T>(); });
  }
  c.overlapping();
  pg.barrier()->wait();
  return failures;
}

std::vector<std::string> run_thread_ranks(int world, const ThreadRank& rank) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::vector<std::string>> per_rank(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; r++) {
    threads.emplace_back([&, r] {
      try {
        per_rank[r] = rank(store, r);
      } catch (const std::exception& e) {
        per_rank[r].push_back(fmt::format("rank {} threw: {}", r, e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> all;
  for (auto& f : per_rank) all.insert(all.end(), f.begin(), f.end());
  return all;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace nanoddp::dist::testing

#include "comm/nccl_group.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cuda_util.h"
#include "core/error.h"
#include "comm/collective.h"
#include "comm/collective_watch.h"
#include "rendezvous/prefix_store.h"

namespace nanoddp::dist {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// The dtypes NCCL reduces, and averages.
constexpr DTypeSet kNcclReducible{DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8, DType::U32};
constexpr DTypeSet kNcclAverages{DType::F32, DType::F64, DType::BF16};

std::string refuse_dtype(const char* collective, const char* backend, DType dtype) {
  return fmt::format("{} of {} tensors is not supported by the {} backend: convert to f32 or i32", collective,
                     dtype_name(dtype), backend);
}

std::string refuse_avg(const char* collective, const char* backend, DType dtype) {
  return fmt::format("{} with avg of {} tensors is not supported by the {} backend: use sum and divide", collective,
                     dtype_name(dtype), backend);
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    case DType::U32: return ncclUint32;
    default: break;
  }
  NANODDP_ASSERT(false, "nccl_type({}): the process group's checks let it through", dtype_name(dtype));
  return ncclUint8;
}

// Note [avg over one rank]: NCCL before 2.29.7 leaves the last (count mod blocks) elements of a
// one-rank avg unwritten (NVIDIA/nccl issue 1950: its one-rank kernel splits the range by floor
// division); seen here on an H200 with PyTorch 2.11's NCCL, an out-of-place reduce_scatter of
// 2^20 + 7 floats whose last 7 outputs stayed 0. The average over one rank is that rank's values,
// so a group of one asks for the sum, which takes NCCL's plain copy.
ncclRedOp_t nccl_op(ReduceOp op, int world) {
  if (op == ReduceOp::Sum) return ncclSum;
  if (op == ReduceOp::Max) return ncclMax;
  return world == 1 ? ncclSum : ncclAvg;
}

// One collective in flight: the event recorded after it on the communication stream, and the
// tensors it reads and writes. Holding them keeps their memory from going back to the caching
// allocator, which is not stream-aware, while NCCL still uses it: a caller may drop a temporary
// right after issuing the collective. They are released when the watchdog sees `done` (and when
// the caller drops its Work, which shares this).
struct Pending {
  CollectiveInfo info;
  std::vector<Tensor> in_use;
  cudaEvent_t done = nullptr;
  Clock::time_point issued = Clock::now();
  explicit Pending(CollectiveInfo i) : info(i) {
    NANODDP_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  ~Pending() { cudaEventDestroy(done); }
};

}  // namespace

struct NcclGroup::State {
  int device = 0;
  int rank = 0;
  milliseconds timeout{0};
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // recorded on the compute stream before each collective
  Tensor barrier_buf;           // [1] i32 on the device, reduced by barrier()
  std::unique_ptr<CollectiveWatch> watch;
  uint64_t seq = 0;

  std::mutex nccl_mu;  // serialises NCCL calls between the caller and the watchdog's abort
  std::mutex mu;       // guards what follows
  std::condition_variable cv;
  std::vector<std::shared_ptr<Pending>> pending;
  std::string failure;
  std::atomic<bool> failed{false};
  bool stopping = false;
  std::thread watchdog;

  void throw_if_failed() {
    if (!failed) return;
    std::lock_guard lock(mu);
    throw Error(failure);
  }

  // A non-blocking communicator may answer ncclInProgress; poll until the call has gone through.
  void finish_call(ncclResult_t r, const std::string& what) {
    auto deadline = Clock::now() + timeout;
    while (r == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      ncclCommGetAsyncError(comm, &r);
    }
    NANODDP_CHECK(r == ncclSuccess, "{} failed on rank {}: NCCL {} ({}); rerun with NCCL_DEBUG=INFO for details",
                  what, rank, r == ncclInProgress ? "did not accept it in time" : ncclGetErrorString(r),
                  ncclGetLastError(comm));
  }

  void fail(const std::string& message) {
    {
      std::lock_guard lock(mu);
      if (!failure.empty()) return;
      failure = message;
    }
    {
      // Marked failed before the abort, under the lock every NCCL call takes: a caller woken by the
      // aborted kernels then finds the failure (launch() checks again under this lock) instead of
      // calling NCCL on the communicator the abort frees.
      std::lock_guard lock(nccl_mu);
      failed = true;
      ncclCommAbort(comm);  // also stops the kernels waiting for the missing ranks
      comm = nullptr;
    }
    cv.notify_all();
  }

  void watchdog_loop();

  // A collective that cannot complete (Note [known departures]): fails the group like a timeout.
  void abandon(uint64_t seq, const std::string& why) {
    std::string what = fmt::format("collective #{}", seq);
    {
      std::lock_guard lock(mu);
      for (const auto& p : pending)
        if (p->info.seq == seq) what = p->info.describe();
    }
    fail(fmt::format("{} cannot complete on rank {}: {}", what, rank, why));
  }
};

void NcclGroup::State::watchdog_loop() {
  cuda::set_device(device);
  const milliseconds tick = std::clamp(timeout / 20, milliseconds(5), milliseconds(200));
  std::unique_lock lock(mu);
  while (!stopping && !failed) {
    cv.wait_for(lock, tick);
    // Drop finished collectives; find the oldest one that is late.
    std::shared_ptr<Pending> late;
    std::erase_if(pending, [&](const std::shared_ptr<Pending>& p) {
      cudaError_t q = cudaEventQuery(p->done);
      if (q == cudaErrorNotReady) {
        if (!late && Clock::now() - p->issued > timeout) late = p;
        return false;
      }
      watch->finished(p->info.seq);
      return true;  // done (or the context is broken, which the async error below reports)
    });
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (!late && (async == ncclSuccess || async == ncclInProgress)) continue;
    std::shared_ptr<Pending> culprit = late ? late : (pending.empty() ? nullptr : pending.front());
    lock.unlock();
    CollectiveInfo info = culprit ? culprit->info : CollectiveInfo{"collective", seq, 0, DType::F32, nullptr, false};
    std::string what = late ? fmt::format("timed out after {:g} s", timeout.count() / 1000.0)
                            : fmt::format("failed (NCCL: {}: {})", ncclGetErrorString(async), ncclGetLastError(comm));
    fail(fmt::format("{} {} on rank {}: {}", info.describe(), what, rank, watch->diagnose(info.seq)));
    lock.lock();
  }
}

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclGroup::State> st, std::shared_ptr<Pending> p, bool host_blocking)
      : st_(std::move(st)), p_(std::move(p)), host_blocking_(host_blocking) {}

  void wait() override {
    st_->throw_if_failed();
    if (!host_blocking_) {
      // Order the compute stream after the collective; the host goes on.
      NANODDP_CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(st_->device), p_->done, 0));
      return;
    }
    // barrier(): the host waits too; the watchdog ends the wait with an error at the timeout.
    while (cudaEventQuery(p_->done) == cudaErrorNotReady && !st_->failed)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    st_->throw_if_failed();
  }

  bool completed() override { return st_->failed || cudaEventQuery(p_->done) != cudaErrorNotReady; }

 private:
  std::shared_ptr<NcclGroup::State> st_;
  std::shared_ptr<Pending> p_;
  bool host_blocking_;
};

}  // namespace

NcclGroup::NcclGroup(std::shared_ptr<Store> store, int rank, int size, Device device, NcclGroupOptions options)
    : ProcessGroup(rank, size), device_(device), options_(options), state_(std::make_shared<State>()) {
  NANODDP_CHECK(device.is_cuda(), "the nccl backend needs a CUDA device, not {}", device.str());
  State& st = *state_;
  st.device = device.index;
  st.rank = rank;
  st.timeout = options_.timeout;
  cuda::set_device(device.index);

  // Rank 0 makes the unique id; the others read it from the store.
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    NANODDP_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: {}", ncclGetErrorString(r));
    store->set("nccl/unique_id", Bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id));
  } else {
    Bytes b = store->get("nccl/unique_id");
    NANODDP_CHECK(b.size() == sizeof id, "the NCCL id in the store has {} bytes, not {}: are all ranks running the "
                  "same nanoddp build?", b.size(), sizeof id);
    std::memcpy(&id, b.data(), sizeof id);
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&st.comm, size, id, rank, &config);
  auto deadline = Clock::now() + options_.timeout;
  while (r == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
    ncclCommGetAsyncError(st.comm, &r);
  }
  if (r != ncclSuccess) {
    if (st.comm != nullptr) ncclCommAbort(st.comm);
    NANODDP_FAIL("rank {} could not set up NCCL with the other ranks {}: check that every rank started and that the "
                 "nodes can reach each other (NCCL_SOCKET_IFNAME; NCCL_DEBUG=INFO shows why)",
                 rank, r == ncclInProgress ? fmt::format("within {:g} s", options_.timeout.count() / 1000.0)
                                           : fmt::format("({})", ncclGetErrorString(r)));
  }
  NANODDP_CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  NANODDP_CUDA_CHECK(cudaEventCreateWithFlags(&st.ready, cudaEventDisableTiming));
  st.barrier_buf = Tensor::zeros({1}, DType::I32, device);
  st.watch = std::make_unique<CollectiveWatch>(std::make_shared<PrefixStore>("nccl/watch", store), rank, size,
                                               options_.timeout, options_.departures,
                                               [s = state_.get()](uint64_t seq, const std::string& why) {
                                                 s->abandon(seq, why);
                                               });
  st.watchdog = std::thread([s = state_.get()] { s->watchdog_loop(); });
}

NcclGroup::~NcclGroup() {
  State& st = *state_;
  // Let the collectives in flight finish (the watchdog aborts them at their timeout).
  for (;;) {
    std::unique_lock lock(st.mu);
    if (st.failed || st.pending.empty()) break;
    lock.unlock();
    std::this_thread::sleep_for(milliseconds(1));
  }
  {
    std::lock_guard lock(st.mu);
    st.stopping = true;
  }
  st.cv.notify_all();
  st.watchdog.join();
  st.watch.reset();  // no abandon() can abort the communicator while it is finalised below
  if (!st.failed) {
    cuda::set_device(st.device);
    cudaStreamSynchronize(st.stream);
    ncclCommFinalize(st.comm);
    ncclResult_t r = ncclInProgress;
    auto deadline = Clock::now() + st.timeout;
    while (r == ncclInProgress && Clock::now() < deadline) ncclCommGetAsyncError(st.comm, &r);
    if (r == ncclSuccess) ncclCommDestroy(st.comm);
    else ncclCommAbort(st.comm);
  }
  cudaEventDestroy(st.ready);
  cudaStreamDestroy(st.stream);
}

void NcclGroup::check() {
  State& st = *state_;
  st.throw_if_failed();
  // An NCCL error (not a timeout) lets the kernels finish; the watchdog notices it only at its next
  // tick, so look now.
  ncclResult_t async = ncclSuccess;
  {
    std::lock_guard lock(st.nccl_mu);
    st.throw_if_failed();
    ncclCommGetAsyncError(st.comm, &async);
  }
  if (async != ncclSuccess && async != ncclInProgress) {
    st.cv.notify_all();  // the watchdog turns it into the group's failure, with its diagnosis
    for (auto until = Clock::now() + 2 * st.timeout; !st.failed && Clock::now() < until;)
      std::this_thread::sleep_for(milliseconds(1));
    st.throw_if_failed();
    NANODDP_FAIL("a collective failed on rank {}: NCCL {}", st.rank, ncclGetErrorString(async));
  }
}

ncclComm_t NcclGroup::comm() const { return state_->comm; }
cudaStream_t NcclGroup::stream() const { return state_->stream; }

template <typename Launch>
WorkPtr NcclGroup::launch(const char* name, const Tensor& t, const Tensor& other, const char* op, Launch&& body) {
  State& st = *state_;
  st.throw_if_failed();
  cuda::set_device(st.device);
  CollectiveInfo info{name, ++st.seq, t.defined() ? t.nbytes() : 0, t.dtype(), op, t.defined()};
  st.watch->issued(info.seq);
  auto pending = std::make_shared<Pending>(info);
  for (const Tensor* x : {&t, &other})
    if (x->defined()) pending->in_use.push_back(*x);
  // The communication stream starts after everything queued on the compute stream so far.
  NANODDP_CUDA_CHECK(cudaEventRecord(st.ready, cuda::compute_stream(st.device)));
  NANODDP_CUDA_CHECK(cudaStreamWaitEvent(st.stream, st.ready, 0));
  {
    std::lock_guard lock(st.nccl_mu);
    st.throw_if_failed();  // the watchdog may have aborted the communicator since the check above
    st.finish_call(body(st.comm, st.stream), info.describe());
  }
  NANODDP_CUDA_CHECK(cudaEventRecord(pending->done, st.stream));
  {
    std::lock_guard lock(st.mu);
    st.pending.push_back(pending);
  }
  return std::make_shared<NcclWork>(state_, pending, std::string_view(name) == "barrier");
}

const CollectiveSupport& NcclGroup::support() const {
  static const CollectiveSupport nccl{TensorPlace::GroupDevice, kNcclReducible, kNcclAverages, false, refuse_dtype,
                                      refuse_avg};
  return nccl;
}

WorkPtr NcclGroup::run_allreduce(const Tensor& t, Reduction r) {
  ncclDataType_t type = nccl_type(t.dtype());
  ncclRedOp_t red = nccl_op(r.op, size());
  return launch("allreduce", t, Tensor(), r.name(), [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), type, red, comm, s);
  });
}

WorkPtr NcclGroup::run_reduce_scatter(const Tensor& out, const Tensor& in, Reduction r, bool) {
  ncclDataType_t type = nccl_type(in.dtype());
  ncclRedOp_t red = nccl_op(r.op, size());
  // NCCL reduces in place when out is in's block for this rank, as our interface allows.
  return launch("reduce_scatter", in, out, r.name(), [&](ncclComm_t comm, cudaStream_t s) {
    return ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), type, red, comm, s);
  });
}

WorkPtr NcclGroup::run_all_gather(const Tensor& out, const Tensor& in, bool) {
  // Moved as bytes: any dtype. In place when in is this rank's block of out.
  return launch("all_gather", out, in, nullptr, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllGather(in.raw(), out.raw(), in.nbytes(), ncclUint8, comm, s);
  });
}

WorkPtr NcclGroup::run_broadcast(const Tensor& t, int root) {
  return launch("broadcast", t, Tensor(), nullptr, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(t.raw(), t.raw(), t.nbytes(), ncclUint8, root, comm, s);
  });
}

// NCCL has no barrier: an allreduce of one integer, whose wait() blocks the host.
WorkPtr NcclGroup::run_barrier() {
  Tensor b = state_->barrier_buf;
  return launch("barrier", Tensor(), b, nullptr, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(b.raw(), b.raw(), 1, ncclInt32, ncclSum, comm, s);
  });
}

}  // namespace nanoddp::dist

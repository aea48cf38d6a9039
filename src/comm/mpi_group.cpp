#include "comm/mpi_group.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/trace.h"
#include "comm/collective.h"
#include "comm/collective_watch.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"
#include "comm/work.h"

namespace nanoddp::dist {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::atomic<int> g_live_groups{0};
bool g_we_initialized = false;  // MPI_Init_thread was ours, so MPI_Finalize is too

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, size_t(len));
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: NANODDP_ASSERT(false, "mpi_type({})", dtype_name(dtype));
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

// MPI counts are ints; larger tensors would need derived types.
int mpi_count(size_t count, const char* collective) {
  NANODDP_CHECK(count <= size_t(INT_MAX), "{} of {} elements exceeds MPI's int count limit: split the tensor",
                collective, count);
  return int(count);
}

// Rank 0 serves a store on a free port; every rank learns "host:port" through MPI_Bcast.
std::shared_ptr<Store> store_through_mpi(MPI_Comm comm, int rank, milliseconds timeout,
                                         std::unique_ptr<TcpStoreServer>& server) {
  // All ranks on one host (the common single-node case) use loopback; otherwise rank 0's hostname.
  MPI_Comm local;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_size = 0, world_size = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_size(comm, &world_size);
  MPI_Comm_free(&local);
  char endpoint[512] = {};
  if (rank == 0) {
    server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{"", 0, store_token_from_env()});
    char host[256] = "127.0.0.1";
    if (local_size != world_size) gethostname(host, sizeof host - 1);
    std::snprintf(endpoint, sizeof endpoint, "%s %d", host, server->port());
  }
  MPI_Bcast(endpoint, sizeof endpoint, MPI_CHAR, 0, comm);
  char host[256] = {};
  int port = 0;
  NANODDP_ASSERT(std::sscanf(endpoint, "%255s %d", host, &port) == 2, "bad store endpoint '{}'", endpoint);
  TcpStoreOptions o;
  o.host = host;
  o.port = port;
  o.timeout = timeout;
  return std::make_shared<TcpStore>(o);
}

}  // namespace

struct MpiGroup::State {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<TcpStoreServer> server;  // rank 0, when no store was given
  std::shared_ptr<Store> store;
  std::unique_ptr<CollectiveWatch> watch;
  std::atomic<uint64_t> seq{0};
  // `failure` is written once, under mu, and `failed` is set right after it (also under mu), so a
  // thread that has seen `failed` may read `failure` without the lock. The watchdog and a job whose
  // MPI call returned an error both publish through publish_failure; the first wins.
  std::atomic<bool> failed{false};
  std::string failure;

  // What the worker is inside, for the watchdog (under mu).
  std::mutex mu;
  std::condition_variable cv;
  bool busy = false;
  bool on_worker = false;  // the call runs on the queue's worker (else on a waiting caller)
  // The watchdog found the current call past the timeout and is diagnosing it. The job clears it
  // when the call returns: a call that returns before the watchdog publishes its failure succeeds,
  // and the watchdog then drops its claim instead of failing later, unrelated work.
  bool timeout_claimed = false;
  CollectiveInfo current;
  Clock::time_point started;
  bool stopping = false;
  std::thread watchdog;

  WorkQueue queue{true};  // Note [caller runs] in comm/work.h; declared last: destroyed first

  void watchdog_loop(milliseconds timeout, int rank);
  // Sets `failure` to `message` unless a failure was published already (lock held); returns the
  // failure in force.
  const std::string& publish_failure(const std::string& message) {
    if (!failed) {
      failure = message;
      failed = true;
    }
    return failure;
  }
};

// Fails the collective the worker has been inside for longer than the timeout. MPI cannot cancel
// it, so the queue is closed: that work, and every later one, fails with the diagnosis at once. A
// call that returns while the diagnosis runs is not failed (see timeout_claimed).
void MpiGroup::State::watchdog_loop(milliseconds timeout, int rank) {
  const milliseconds tick = std::clamp(timeout / 20, milliseconds(5), milliseconds(200));
  std::unique_lock lock(mu);
  while (!stopping) {
    cv.wait_for(lock, tick);
    if (!busy || timeout_claimed || Clock::now() - started <= timeout) continue;
    // Claim the call before the diagnosis (seconds, without the lock); it counts only if the call is
    // still inside MPI afterwards (the job clears the claim when it returns).
    timeout_claimed = true;
    CollectiveInfo info = current;
    bool stuck_caller = !on_worker;
    lock.unlock();
    std::string message = fmt::format("{} timed out after {:g} s on rank {}", info.describe(), timeout.count() / 1000.0,
                                      rank);
    message += ": " + watch->diagnose(info.seq);
    lock.lock();
    if (!timeout_claimed) continue;  // the call returned meanwhile: its work stands
    message = publish_failure(message);
    lock.unlock();
    if (stuck_caller) {
      // The call runs on the thread that would receive the error, inside MPI for good: report
      // here and end the job, as the destructor would (Note [caller runs] in comm/work.h).
      std::fprintf(stderr, "nanoddp: error: [rank %d] %s\n", rank, message.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    queue.close_with_error(std::make_exception_ptr(Error(message)));
    return;
  }
}

MpiGroup::WorldInfo MpiGroup::init_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  NANODDP_CHECK(!finalized, "MPI was already finalized in this process: create the MPI group once");
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    NANODDP_CHECK(provided >= MPI_THREAD_SERIALIZED,
                  "this MPI library gives thread level {} but nanoddp needs MPI_THREAD_SERIALIZED: use a "
                  "thread-enabled MPI build",
                  provided);
    g_we_initialized = true;
  } else {
    int provided = 0;
    MPI_Query_thread(&provided);
    NANODDP_CHECK(provided >= MPI_THREAD_SERIALIZED,
                  "MPI was initialised with thread level {}; initialise it with MPI_THREAD_SERIALIZED or higher",
                  provided);
  }
  WorldInfo w{};
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  return w;
}

MpiGroup::MpiGroup(MpiGroupOptions options) : MpiGroup(init_mpi(), std::move(options)) {}

MpiGroup::MpiGroup(WorldInfo world, MpiGroupOptions options)
    : ProcessGroup(world.rank, world.size), options_(std::move(options)), state_(std::make_unique<State>()) {
  g_live_groups++;
  MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm);
  MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN);
  state_->store = options_.store ? options_.store
                                 : store_through_mpi(state_->comm, rank(), options_.timeout, state_->server);
  state_->watch = std::make_unique<CollectiveWatch>(std::make_shared<PrefixStore>("mpi/watch", state_->store), rank(),
                                                    size(), options_.timeout);
  state_->watchdog = std::thread([st = state_.get(), t = options_.timeout, r = rank()] { st->watchdog_loop(t, r); });
}

MpiGroup::~MpiGroup() {
  State& st = *state_;
  // Finish what is queued, then leave together, so that rank 0 keeps serving the store until every
  // rank is done with it. Both end within the timeout (the watchdog fails them at worst).
  try {
    st.queue.enqueue([] {})->wait();
    if (!st.failed) barrier()->wait();
  } catch (const Error&) {
  }
  if (st.failed) {
    // The worker is stuck in a collective that can never finish; MPI_Finalize would hang too.
    std::fprintf(stderr, "nanoddp: error: [rank %d] %s\n", rank(), st.failure.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  {
    std::lock_guard lock(st.mu);
    st.stopping = true;
  }
  st.cv.notify_all();
  st.watchdog.join();
  st.watch.reset();
  MPI_Comm_free(&st.comm);
  if (--g_live_groups == 0 && g_we_initialized) MPI_Finalize();
}

MPI_Comm MpiGroup::comm() const { return state_->comm; }
const std::shared_ptr<Store>& MpiGroup::store() const { return state_->store; }

WorkPtr MpiGroup::submit(const char* name, const Tensor& t, const char* op, std::function<int()> call,
                         std::function<void()> after) {
  CollectiveInfo info{name, ++state_->seq, t.defined() ? t.nbytes() : 0, t.dtype(), op, t.defined()};
  state_->watch->issued(info.seq);
  State* st = state_.get();
  int rank = this->rank();
  return st->queue.enqueue([st, info, rank, call = std::move(call), after = std::move(after)] {
    NANODDP_CHECK(!st->failed, "{} was not run because this process group failed earlier ({}); restart the job",
                  info.describe(), st->failure);
    {
      std::lock_guard lock(st->mu);
      st->busy = true;
      st->on_worker = st->queue.on_worker_thread();
      st->current = info;
      st->started = Clock::now();
    }
    int rc = 0;
    {
      trace::Scope traced(info.name, trace::kComm, static_cast<int64_t>(info.bytes));
      rc = call();
    }
    {
      std::lock_guard lock(st->mu);
      st->busy = false;
      st->timeout_claimed = false;  // a diagnosis under way no longer counts
      // The watchdog has failed this work already: never report it done (its error may not have
      // reached the work yet).
      if (st->failed) throw Error(st->failure);
    }
    if (rc != MPI_SUCCESS) {
      std::string message = fmt::format("{} failed on rank {} ({})", info.describe(), rank, mpi_error_text(rc));
      message += ": " + st->watch->diagnose(info.seq);
      std::lock_guard lock(st->mu);
      throw Error(st->publish_failure(message));
    }
    if (after) after();
  });
}

const CollectiveSupport& MpiGroup::support() const {
  static const CollectiveSupport host = host_support(TensorPlace::Host);
  return host;
}

WorkPtr MpiGroup::run_allreduce(const Tensor& t, Reduction r) {
  int count = mpi_count(size_t(t.numel()), "allreduce");
  return submit(
      "allreduce", t, r.name(),
      [this, t, r, count] {
        if (count == 0) return MPI_SUCCESS;
        return MPI_Allreduce(MPI_IN_PLACE, t.raw(), count, mpi_type(t.dtype()), mpi_op(r.op), state_->comm);
      },
      [t, r, count] { r.finish(t.raw(), size_t(count), t.dtype()); });
}

WorkPtr MpiGroup::run_reduce_scatter(const Tensor& out, const Tensor& in, Reduction r, bool in_place) {
  int count = mpi_count(size_t(in.numel()), "reduce_scatter") / size();
  // MPI forbids the output overlapping the input: reduce into scratch, then copy.
  Tensor target = in_place ? Tensor::empty(out.shape(), out.dtype()) : out;
  return submit(
      "reduce_scatter", in, r.name(),
      [this, in, target, r, count] {
        if (count == 0) return MPI_SUCCESS;
        return MPI_Reduce_scatter_block(in.raw(), target.raw(), count, mpi_type(in.dtype()), mpi_op(r.op),
                                        state_->comm);
      },
      [out, target, r, count, in_place] {
        if (in_place) copy(out, target);
        r.finish(out.raw(), size_t(count), out.dtype());
      });
}

WorkPtr MpiGroup::run_all_gather(const Tensor& out, const Tensor& in, bool in_place) {
  int bytes = mpi_count(in.nbytes(), "all_gather");
  return submit("all_gather", out, nullptr, [this, out, in, bytes, in_place] {
    if (bytes == 0) return MPI_SUCCESS;
    return MPI_Allgather(in_place ? MPI_IN_PLACE : in.raw(), bytes, MPI_BYTE, out.raw(), bytes, MPI_BYTE,
                         state_->comm);
  });
}

WorkPtr MpiGroup::run_broadcast(const Tensor& t, int root) {
  int bytes = mpi_count(t.nbytes(), "broadcast");
  return submit("broadcast", t, nullptr, [this, t, root, bytes] {
    if (bytes == 0) return MPI_SUCCESS;
    return MPI_Bcast(t.raw(), bytes, MPI_BYTE, root, state_->comm);
  });
}

WorkPtr MpiGroup::run_barrier() {
  return submit("barrier", Tensor(), nullptr, [this] { return MPI_Barrier(state_->comm); });
}

}  // namespace nanoddp::dist

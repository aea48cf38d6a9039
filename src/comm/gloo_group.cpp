#include "comm/gloo_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <deque>
#include <mutex>

#include "core/error.h"
#include "core/trace.h"
#include "comm/collective.h"
#include "comm/collective_watch.h"
#include "comm/host_staging.h"
#include "rendezvous/net.h"
#include "rendezvous/prefix_store.h"
#include "comm/work.h"

namespace nanoddp::dist {

using std::chrono::milliseconds;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

namespace {

// Lets Gloo's rendezvous (Context::connectFullMesh) publish and read pair addresses in our store.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(dist::Store& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    Bytes b = store_.get(key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override { store_.wait(keys, timeout); }

 private:
  dist::Store& store_;
};

// Gloo prefixes its messages with "[file:line] "; the user needs only the text.
std::string gloo_message_text(const std::string& what) {
  if (!what.empty() && what[0] == '[') {
    size_t end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  // gloo::sum / gloo::max have a (c, a, b, n) overload: c[i] = a[i] op b[i], safe when c aliases a or b.
  return op == ReduceOp::Max ? static_cast<ReduceFn>(&gloo::max<T>) : static_cast<ReduceFn>(&gloo::sum<T>);
}

// Slot prefix of our ring reduce_scatter, above the prefixes Gloo's own collectives use (0x01-0x08).
constexpr uint8_t kRingReduceScatterSlotPrefix = 0x20;
// Segment size of the ring: small enough that the reduction of one segment overlaps the transfer
// of the next, large enough that per-message costs vanish.
constexpr size_t kRingSegmentBytes = 512 << 10;

// Note [ring reduce_scatter]: Gloo (2022) has no reduce_scatter in its current API, only the older
// ReduceScatterHalvingDoubling algorithm object. That one works on "bound" buffers, and the first
// bound-buffer send on a connection sets SO_SNDBUF to the message size, which switches off the
// kernel's send-buffer autotuning for that socket for good. Measured here (ranks as threads,
// loopback): after one halving-doubling reduce_scatter of 20 bytes, every later 4 MiB allreduce on
// the same context took 3.5 s instead of 0.03 s. It also reduces in place, destroying the input
// (our interface keeps it), and allocates ~2x the input per instance. So reduce_scatter is this ring,
// on Gloo's unbound buffers like Gloo's own allreduce:
//
// The input is p blocks of n elements; block j ends on rank j. In step s = 0 .. p-2, rank r sends
// to rank r+1 the partial sum of block (r-s-1) mod p (at step 0 simply its own input block) and
// receives from rank r-1 the partial sum of block (r-s-2) mod p, to which it adds its own input
// block. After p-1 steps the block received last is (r - p) mod p = r, summed over all ranks.
// Partial sums alternate between two scratch buffers, so the one being sent is never the one
// being received into; the last step writes straight into `out` (which may alias in's block r:
// c[i] = a[i] + b[i] with c == b is safe). Blocks travel as segments, and each segment is reduced
// as soon as it arrives while the next ones are still on the wire. Per rank this moves
// (p-1)/p of the input, the minimum for reduce_scatter, and never writes to `in`.
template <typename T>
void ring_reduce_scatter(gloo::Context& ctx, const T* in, T* out, size_t n, ReduceFn reduce, T* scratch,
                         uint32_t tag, milliseconds timeout) {
  const int p = ctx.size, r = ctx.rank;
  const size_t block_bytes = n * sizeof(T);
  const size_t seg_bytes = std::min(block_bytes, kRingSegmentBytes / sizeof(T) * sizeof(T));
  const size_t segments = (block_bytes + seg_bytes - 1) / seg_bytes;
  auto seg_len = [&](size_t k) { return std::min(seg_bytes, block_bytes - k * seg_bytes); };
  // scratch: [2, n] partial sums of alternating steps.
  T* partial[2] = {scratch, scratch + n};
  auto in_buf = ctx.createUnboundBuffer(const_cast<T*>(in), size_t(p) * block_bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> partial_buf[2] = {
      ctx.createUnboundBuffer(partial[0], block_bytes), ctx.createUnboundBuffer(partial[1], block_bytes)};
  const int send_to = (r + 1) % p, recv_from = (r + p - 1) % p;
  const uint64_t slot = gloo::Slot::build(kRingReduceScatterSlotPrefix, tag);

  for (int s = 0; s + 1 < p; s++) {
    gloo::transport::UnboundBuffer& rx = *partial_buf[s % 2];
    for (size_t k = 0; k < segments; k++) rx.recv(recv_from, slot, k * seg_bytes, seg_len(k));
    // Step 0 sends our own input block (r-1); later steps the partial sum received last step.
    gloo::transport::UnboundBuffer& tx = s == 0 ? *in_buf : *partial_buf[(s + 1) % 2];
    size_t tx_base = s == 0 ? size_t((r + p - 1) % p) * block_bytes : 0;
    for (size_t k = 0; k < segments; k++) tx.send(send_to, slot, tx_base + k * seg_bytes, seg_len(k));

    const size_t block = size_t((r - s - 2 + 2 * p) % p);
    T* dst = s + 2 == p ? out : partial[s % 2];
    for (size_t k = 0; k < segments; k++) {
      rx.waitRecv(timeout);  // segments from one peer on one slot complete in order
      size_t off = k * seg_bytes / sizeof(T);
      reduce(dst + off, partial[s % 2] + off, in + block * n + off, seg_len(k) / sizeof(T));
    }
    // The buffer sent from is received into next step: its sends must be done first.
    for (size_t k = 0; k < segments; k++) tx.waitSend(timeout);
  }
}

}  // namespace

struct GlooGroup::State {
  std::shared_ptr<Store> store;
  std::string address;
  std::shared_ptr<gloo::Context> context;
  std::unique_ptr<CollectiveWatch> watch;
  std::atomic<uint64_t> seq{0};  // collectives issued so far

  // The collectives issued and not finished, oldest first (for the line of an abandoned one).
  std::mutex pending_mu;
  std::deque<CollectiveInfo> pending;

  // Used on the worker thread only.
  std::string failure;  // the first failure; later collectives refuse to run
  Tensor ring_scratch;  // [2, n] bytes of the largest ring reduce_scatter so far
  HostStaging staging;  // host copies of device tensors (Note [staging])

  WorkQueue queue{true};  // Note [caller runs] in comm/work.h; declared last: destroyed first

  void abandon(uint64_t seq, const std::string& why, int rank);
};

GlooGroup::GlooGroup(std::shared_ptr<Store> store, int rank, int size, GlooGroupOptions options)
    : ProcessGroup(rank, size),
      options_(std::move(options)),
      support_(host_support(options_.device.is_cpu() ? TensorPlace::Host : TensorPlace::HostOrGroupDevice)),
      state_(std::make_unique<State>()) {
  NANODDP_CHECK(size >= 1 && rank >= 0 && rank < size, "gloo: rank {} is not in [0, {})", rank, size);
  // Gloo writes to its sockets without MSG_NOSIGNAL: when a peer dies, the next write would kill
  // this rank with SIGPIPE (seen in the crash test) before it could report which rank died. Ignore
  // SIGPIPE, so that the write fails with EPIPE and the collective with a diagnosis. Only when the
  // program has not installed a handler of its own.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  state_->store = std::move(store);
  state_->address = !options_.bind_address.empty()
                        ? options_.bind_address
                        : net::local_address_toward(options_.master_addr, options_.master_port);
  gloo::transport::tcp::attr attr;
  attr.hostname = state_->address;
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(options_.timeout);
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    PrefixStore rendezvous("gloo", state_->store);
    GlooStoreAdapter adapter(rendezvous);
    context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {  // gloo::Exception, and gloo::EnforceNotMet for malformed peers
    NANODDP_FAIL("gloo: rank {} could not connect to the other ranks within {:g} s ({}): check that every host can "
                 "reach the others (this rank listens on {}), that no firewall blocks them, and that every rank "
                 "has the same WORLD_SIZE", rank, options_.timeout.count() / 1000.0, gloo_message_text(e.what()),
                 state_->address);
  }
  state_->context = context;
  state_->watch = std::make_unique<CollectiveWatch>(std::make_shared<PrefixStore>("watch", state_->store), rank, size,
                                                    options_.timeout, options_.departures,
                                                    [st = state_.get(), rank](uint64_t seq, const std::string& why) {
                                                      st->abandon(seq, why, rank);
                                                    });
}

// A Gloo call cannot be cancelled, and the thread inside it may be the one that would receive the
// error (Note [caller runs] in comm/work.h): say what happened and end the process.
void GlooGroup::State::abandon(uint64_t seq, const std::string& why, int rank) {
  std::string what = fmt::format("collective #{}", seq);
  {
    std::lock_guard lock(pending_mu);
    for (const CollectiveInfo& info : pending)
      if (info.seq == seq) what = info.describe();
  }
  std::fprintf(stderr, "nanoddp: error: [rank %d] %s cannot complete on rank %d: %s\n", rank, what.c_str(), rank,
               why.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(1);
}

// Runs what is still queued (each job ends within the timeout) before the members go away.
GlooGroup::~GlooGroup() { state_->queue.enqueue([] {})->wait(); }

const std::shared_ptr<gloo::Context>& GlooGroup::context() const { return state_->context; }
const std::string& GlooGroup::address() const { return state_->address; }

WorkPtr GlooGroup::submit(const char* name, const char* op, const Tensor& shown, const Tensor& data,
                          const Tensor& input, bool in_place, Body body) {
  CollectiveInfo info{name, ++state_->seq, shown.defined() ? shown.nbytes() : 0, shown.dtype(), op, shown.defined()};
  {
    std::lock_guard lock(state_->pending_mu);
    state_->pending.push_back(info);
  }
  state_->watch->issued(info.seq);
  auto on_device = [](const Tensor& t) { return t.defined() && !t.device().is_cpu(); };
  const bool staged = data.defined() && (options_.stage_host_tensors || on_device(data) || on_device(input));
  // Marked here, on the issuing thread: the staging copy waits for the kernels issued so far.
  auto ready = staged ? std::make_shared<ReadyMark>(input.defined() ? input : data) : nullptr;
  State* st = state_.get();
  milliseconds timeout = options_.timeout;
  int rank = this->rank();
  return st->queue.enqueue([st, info, timeout, rank, data, input, in_place, ready, body = std::move(body)] {
    Finished finished(*st, info.seq);
    NANODDP_CHECK(st->failure.empty(), "{} was not run because this process group failed earlier ({}); restart the job",
                  info.describe(), st->failure);
    try {
      trace::Scope traced(info.name, trace::kComm, static_cast<int64_t>(info.bytes));
      const uint32_t tag = static_cast<uint32_t>(info.seq);
      if (!ready) return body(data, input, in_place, tag);
      HostStaging::Views host = st->staging.stage_in(data, input, *ready);
      body(host.data, host.input, false, tag);  // separate host copies: never in place
      st->staging.stage_out(data, host);
    } catch (const gloo::Exception& e) {
      std::string text = gloo_message_text(e.what());
      bool timed_out = text.find("Timed out") != std::string::npos;
      std::string what = timed_out ? fmt::format("timed out after {:g} s", timeout.count() / 1000.0)
                                   : fmt::format("failed ({})", text);
      st->failure = fmt::format("{} {} on rank {}", info.describe(), what, rank);
      NANODDP_FAIL("{}: {}", st->failure, st->watch->diagnose(info.seq));
    }
  });
}

const CollectiveSupport& GlooGroup::support() const { return support_; }

GlooGroup::Finished::~Finished() {
  {
    std::lock_guard lock(st.pending_mu);
    if (!st.pending.empty() && st.pending.front().seq == seq) st.pending.pop_front();
  }
  st.watch->finished(seq);
}

WorkPtr GlooGroup::run_allreduce(const Tensor& t, Reduction r) {
  return submit("allreduce", r.name(), t, t, Tensor(), false,
                [this, r](const Tensor& t, const Tensor&, bool, uint32_t tag) {
    const size_t n = size_t(t.numel());
    if (n == 0 || size() == 1) return;  // nothing to exchange (Avg over one rank is the identity)
    dispatch_reducible(t.dtype(), [&]<typename T>() {
      gloo::AllreduceOptions opts(state_->context);
      opts.setOutput(static_cast<T*>(t.raw()), n);
      opts.setReduceFunction(reduce_fn<T>(r.op));
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allreduce(opts);
    });
    r.finish(t.raw(), n, t.dtype());
  });
}

WorkPtr GlooGroup::run_reduce_scatter(const Tensor& out, const Tensor& in, Reduction r, bool in_place) {
  return submit("reduce_scatter", r.name(), in, out, in, in_place,
                [this, r](const Tensor& out, const Tensor& in, bool in_place, uint32_t tag) {
    const size_t n = size_t(out.numel());
    if (n == 0) return;
    if (size() == 1) {
      if (!in_place) copy(out, in);
      return;
    }
    State& st = *state_;
    if (!st.ring_scratch.defined() || st.ring_scratch.nbytes() < 2 * out.nbytes())
      st.ring_scratch = Tensor::empty({int64_t(2 * out.nbytes())}, DType::U8);
    dispatch_reducible(in.dtype(), [&]<typename T>() {
      ring_reduce_scatter<T>(*st.context, static_cast<const T*>(in.raw()), static_cast<T*>(out.raw()), n,
                             reduce_fn<T>(r.op), static_cast<T*>(st.ring_scratch.raw()), tag, options_.timeout);
    });
    r.finish(out.raw(), n, out.dtype());
  });
}

WorkPtr GlooGroup::run_all_gather(const Tensor& out, const Tensor& in, bool in_place) {
  return submit("all_gather", nullptr, out, out, in, in_place,
                [this](const Tensor& out, const Tensor& in, bool in_place, uint32_t tag) {
    if (in.nbytes() == 0) return;
    if (size() == 1) {
      if (!in_place) copy(out, in);
      return;
    }
    gloo::AllgatherOptions opts(state_->context);
    if (!in_place) opts.setInput(static_cast<uint8_t*>(in.raw()), in.nbytes());
    opts.setOutput(static_cast<uint8_t*>(out.raw()), out.nbytes());
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::allgather(opts);
  });
}

WorkPtr GlooGroup::run_broadcast(const Tensor& t, int root) {
  return submit("broadcast", nullptr, t, t, Tensor(), false,
                [this, root](const Tensor& t, const Tensor&, bool, uint32_t tag) {
    if (t.nbytes() == 0 || size() == 1) return;
    gloo::BroadcastOptions opts(state_->context);
    opts.setOutput(static_cast<uint8_t*>(t.raw()), t.nbytes());
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::broadcast(opts);
  });
}

WorkPtr GlooGroup::run_barrier() {
  return submit("barrier", nullptr, Tensor(), Tensor(), Tensor(), false,
                [this](const Tensor&, const Tensor&, bool, uint32_t tag) {
    if (size() == 1) return;
    gloo::BarrierOptions opts(state_->context);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

}  // namespace nanoddp::dist

#include "launch/launcher_rendezvous.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <numeric>
#include <thread>

#include "core/error.h"

namespace nanoddp::dist {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using std::chrono::milliseconds;

namespace {

// How often a waiting launcher looks at the store again (registration and the end of the job).
constexpr milliseconds kPollEvery{50};

Bytes to_bytes(const json& j) {
  // Worker output in a failure report may be any bytes: replace what is not UTF-8 rather than throw.
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return Bytes(s.begin(), s.end());
}

// Parses a record; anything but a JSON object means a foreign program wrote the key.
json from_bytes(const Bytes& b, const std::string& key) {
  json j = json::parse(b.begin(), b.end(), nullptr, /*allow_exceptions=*/false);
  NANODDP_CHECK(j.is_object(), "malformed launcher record '{}' in the rendezvous store: is another program using "
                "--master_port?", key);
  return j;
}

json node_to_json(const NodeRecord& n) {
  return {{"nnodes", n.nnodes}, {"nproc", n.nproc}, {"host", n.host}, {"pid", n.pid}, {"worker_port", n.worker_port},
          {"max_restarts", n.max_restarts}, {"monitor_interval_ms", n.monitor_interval_ms}, {"threads", n.threads},
          {"host_cores", n.host_cores}};
}

NodeRecord node_from_json(const json& j) {
  return {j.value("nnodes", 0),           j.value("nproc", 0),        j.value("host", std::string("?")),
          j.value("pid", 0),              j.value("worker_port", 0),  j.value("max_restarts", -1),
          j.value("monitor_interval_ms", int64_t{-1}), j.value("threads", 0), j.value("host_cores", 0)};
}

// Records are JSON objects, read with defaults so that a missing field never throws.
json failure_to_json(const FailureReport& f) {
  return {{"node", f.node}, {"host", f.host}, {"rank", f.rank}, {"local_rank", f.local_rank}, {"pid", f.pid},
          {"what", f.what}, {"tail", f.tail}, {"restartable", f.restartable}, {"node_lost", f.node_lost},
          {"signal", f.signal}};
}

FailureReport failure_from_json(const json& j) {
  FailureReport f;
  f.node = j.value("node", 0);
  f.host = j.value("host", std::string("?"));
  f.rank = j.value("rank", -1);
  f.local_rank = j.value("local_rank", -1);
  f.pid = j.value("pid", 0);
  f.what = j.value("what", std::string("failed"));
  f.tail = j.value("tail", std::vector<std::string>{});
  f.restartable = j.value("restartable", true);
  f.node_lost = j.value("node_lost", false);
  f.signal = j.value("signal", 0);
  return f;
}

}  // namespace

int Membership::world_size() const {
  return std::accumulate(nodes.begin(), nodes.end(), 0, [](int s, const NodeRecord& n) { return s + n.nproc; });
}

// Global ranks are handed out node by node: node K's first rank is the sum of nproc below K.
int Membership::first_rank(int node) const {
  int r = 0;
  for (int k = 0; k < node; k++) r += nodes[size_t(k)].nproc;
  return r;
}

std::string Membership::oversubscription_warning(int node) const {
  const NodeRecord& self = nodes[size_t(node)];
  std::vector<int> here;
  int workers = 0, threads = 0, most = 0;
  for (size_t k = 0; k < nodes.size(); k++) {
    if (nodes[k].host != self.host) continue;
    if (nodes[k].threads <= 0) return "";
    here.push_back(int(k));
    workers += nodes[k].nproc;
    threads += nodes[k].nproc * nodes[k].threads;
    most = std::max(most, nodes[k].threads);
  }
  // Said only when fewer threads per worker would help: more workers than cores, one thread each,
  // is what the user asked for.
  const int fair = std::max(1, self.host_cores / std::max(1, workers));
  if (self.host_cores <= 0 || threads <= self.host_cores || fair >= most) return "";
  return fmt::format("warning: {} on {} (node(s) {}) run{} {} worker(s) with {} threads in all on {} cores, so the "
                     "threads wait for each other; set OMP_NUM_THREADS={} for {} on this host",
                     here.size() > 1 ? "the launchers" : "the launcher", self.host, fmt::join(here, ", "),
                     here.size() > 1 ? "" : "s", workers, threads, self.host_cores,
                     fair, here.size() > 1 ? "every launcher" : "the launcher");
}

std::string FailureReport::headline() const {
  if (rank < 0) return fmt::format("the launcher on node {} ({}) {}", node, host, what);
  return fmt::format("rank {} (local {} on {}, pid {}) {}", rank, local_rank, host, pid, what);
}

LauncherRendezvous::LauncherRendezvous(std::shared_ptr<Store> store, int node_rank, int nnodes, milliseconds timeout)
    : store_(std::move(store)), node_rank_(node_rank), nnodes_(nnodes), timeout_(timeout) {}

std::string LauncherRendezvous::node_key(int attempt, int node) const {
  return fmt::format("attempt{}/node{}", attempt, node);
}

Membership LauncherRendezvous::join(int attempt, const NodeRecord& self, const std::function<int()>& interrupted) {
  // Claim this node rank: compare_set only writes a missing key, so a second launcher with the same
  // --node_rank sees the first one's record instead of its own.
  std::string mine_key = node_key(attempt, node_rank_);
  Bytes mine = to_bytes(node_to_json(self));
  Bytes kept = store_->compare_set(mine_key, {}, mine);
  if (kept != mine) {
    NodeRecord other = node_from_json(from_bytes(kept, mine_key));
    NANODDP_FAIL("--node_rank {} is already taken by the launcher on {} (pid {}): give each host its own node rank "
                 "in 0..{}",
                 node_rank_, other.host, other.pid, nnodes_ - 1);
  }

  // Wait for every node. Polled rather than one long store wait so that the error can name the
  // nodes that are missing.
  std::vector<std::string> keys;
  for (int k = 0; k < nnodes_; k++) keys.push_back(node_key(attempt, k));
  auto deadline = Clock::now() + timeout_;
  const std::string failed_key = fmt::format("attempt{}/failed", attempt);
  auto missing = [&] {
    std::vector<int> out;
    for (int k = 0; k < nnodes_; k++)
      if (!store_->check({keys[size_t(k)]})) out.push_back(k);
    return out;
  };
  while (!store_->check(keys)) {
    // Workers start only once every node has joined, so the attempt can end here before it began:
    // by this node's own signal first (it exits as interrupted), then by another node's cause.
    if (interrupted)
      if (const int sig = interrupted()) return Membership{{}, std::nullopt, sig, int(missing().size())};
    if (store_->check({failed_key}))
      if (auto cause = failure(attempt)) return Membership{{}, cause, 0, int(missing().size())};
    if (Clock::now() >= deadline) {
      NANODDP_FAIL("node(s) {} did not join {} within {} s (--rdzv_timeout): start `nanoddp run --node_rank K` on "
                   "every host with the same --nnodes {}, --master_addr and --master_port",
                   fmt::join(missing(), ", "), attempt == 0 ? "the job" : fmt::format("restart {}", attempt),
                   std::chrono::duration<double>(timeout_).count(), nnodes_);
    }
    std::this_thread::sleep_for(kPollEvery);
  }

  // Everyone is in: read every record and check that the nodes describe the same job.
  Membership m;
  for (int k = 0; k < nnodes_; k++) {
    NodeRecord n = node_from_json(from_bytes(store_->get(keys[size_t(k)]), keys[size_t(k)]));
    NANODDP_CHECK(n.nnodes == nnodes_, "node {} ({}) was started with --nnodes {} but node {} with --nnodes {}: give "
                  "every node the same --nnodes", k, n.host, n.nnodes, node_rank_, nnodes_);
    NANODDP_CHECK(n.nproc >= 1, "node {} ({}) registered {} workers", k, n.host, n.nproc);
    NANODDP_CHECK(n.max_restarts < 0 || self.max_restarts < 0 || n.max_restarts == self.max_restarts,
                  "node {} ({}) was started with --max_restarts {} but node {} with --max_restarts {}: give every "
                  "node the same --max_restarts", k, n.host, n.max_restarts, node_rank_, self.max_restarts);
    NANODDP_CHECK(n.monitor_interval_ms < 0 || self.monitor_interval_ms < 0 ||
                      n.monitor_interval_ms == self.monitor_interval_ms,
                  "node {} ({}) was started with --monitor_interval {:g} but node {} with --monitor_interval {:g}: "
                  "give every node the same --monitor_interval", k, n.host, n.monitor_interval_ms / 1000.0,
                  node_rank_, self.monitor_interval_ms / 1000.0);
    m.nodes.push_back(n);
  }
  return m;
}

// compare_set from "missing" makes the first report the one every node reads back.
FailureReport LauncherRendezvous::report_failure(int attempt, const FailureReport& mine) {
  std::string key = fmt::format("attempt{}/failed", attempt);
  return failure_from_json(from_bytes(store_->compare_set(key, {}, to_bytes(failure_to_json(mine))), key));
}

std::optional<FailureReport> LauncherRendezvous::failure(int attempt) {
  std::string key = fmt::format("attempt{}/failed", attempt);
  if (!store_->check({key})) return std::nullopt;
  return failure_from_json(from_bytes(store_->get(key), key));
}

void LauncherRendezvous::report_done(int attempt) { store_->add(fmt::format("attempt{}/done", attempt), 1); }

bool LauncherRendezvous::all_done(int attempt) {
  return store_->add(fmt::format("attempt{}/done", attempt), 0) >= nnodes_;
}

void LauncherRendezvous::heartbeat(int attempt) { store_->add(fmt::format("attempt{}/beat{}", attempt, node_rank_), 1); }

std::vector<int64_t> LauncherRendezvous::heartbeats(int attempt) {
  std::vector<int64_t> beats(size_t(nnodes_), 0);
  for (int k = 1; k < nnodes_; k++) beats[size_t(k)] = store_->add(fmt::format("attempt{}/beat{}", attempt, k), 0);
  return beats;
}

// Node 0's wait is bounded: a node that died without leaving must not keep it (and its store) alive.
void LauncherRendezvous::leave(milliseconds timeout, int lost) {
  if (node_rank_ != 0) {
    store_->add("left", 1);
    return;
  }
  auto deadline = Clock::now() + timeout;
  while (store_->add("left", 0) < nnodes_ - 1 - lost && Clock::now() < deadline) std::this_thread::sleep_for(kPollEvery);
}

}  // namespace nanoddp::dist

// The launcher's main loop: host or reach the store, then run attempts until one succeeds, the
// restarts run out, or a signal ends the job.
//
// Note [launcher rounds]
// The job runs in attempts 0, 1, ..., max_restarts; NANODDP_RESTART_COUNT is the attempt's number.
// Every attempt is a round that all launchers go through together, coordinated by keys in node 0's
// store (launcher_rendezvous.h):
//  1. Join: each launcher registers (nproc, host) under attempt<A>/node<K> and waits for all nodes;
//     global ranks are prefix sums of nproc in node order. No node starts attempt A's workers before
//     every node has stopped attempt A-1's, because it registers for A only after stopping them.
//  2. Run: each launcher starts its workers and watches them. Its own workers' exits wake it at once
//     (SIGCHLD); every --monitor_interval it also reads the attempt's outcome keys. Nodes other than
//     0 count a heartbeat each interval, from a thread of their own (Note [heartbeats from a thread]);
//     node 0 declares a node lost (a cause that is not restartable: the node is gone) when its count
//     stalls for max(5 s, 20 intervals).
//  3. End: the first launcher to see a worker fail publishes the root cause (compare_set, so the
//     first report wins) under attempt<A>/failed. Every launcher that reads it prints the cause,
//     then stops its workers (SIGTERM, SIGKILL after --stop_timeout: Note [a stop that saves]). If
//     the cause is restartable and restarts remain, all go to step 1 with A+1; otherwise all exit
//     1. When all of a node's workers succeed it counts itself in attempt<A>/done; the attempt
//     succeeds when all nodes have.
//  4. Leave: node 0 hosts the store, so it waits (bounded) for the others to count themselves out
//     before it exits.
// A launcher interrupted by SIGINT / SIGTERM publishes a cause that is not restartable, so the
// other nodes stop too instead of restarting without it.
//
// Note [two ports]
// The launchers' store speaks nanoddp's protocol, not PyTorch's TCPStore. So the workers'
// MASTER_PORT is not the store's port but a free port that node 0's launcher finds for each attempt
// and registers in step 1 (NodeRecord::worker_port), as torchrun's c10d backend did before PyTorch
// 2.4: a PyTorch script's rank 0 binds it for init_process_group(init_method="env://"). nanoddp's
// own workers reach the launchers' store at MASTER_ADDR:NANODDP_AGENT_STORE_PORT instead
// (comm/init.cpp).
// "Free" is as of the probe: another program can still take the port before rank 0 binds it, and
// rank 0 then says that the port is in use.
#include "launch/launcher.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include "core/error.h"
#include "launch/launcher_output.h"
#include "launch/launcher_plan.h"
#include "launch/launcher_rendezvous.h"
#include "launch/launcher_signals.h"
#include "launch/launcher_stop.h"
#include "launch/launcher_workers.h"
#include "rendezvous/net.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"

extern char** environ;

namespace nanoddp::dist {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct AttemptResult {
  enum class End { Succeeded, Failed, Interrupted } end = End::Failed;
  std::optional<FailureReport> cause;  // Failed
  int signal = 0;                      // Interrupted
};

// Marks workers as possibly running for the signal handlers while it lives: the handlers then
// leave a termination signal to the loop instead of ending the launcher at once.
struct WorkersRunning {
  WorkersRunning() { LauncherSignals::set_workers_running(true); }
  ~WorkersRunning() { LauncherSignals::set_workers_running(false); }
};

// The cause an interrupted launcher reports: not restartable, so the other nodes stop too, and
// with the signal, so that they give their workers the time to save.
FailureReport interrupt_report(const LaunchPlan& plan, int sig, const char* when) {
  FailureReport r{plan.node_rank, plan.host, -1, -1, int(::getpid()),
                  fmt::format("was interrupted by {}{}", signal_name(sig), when), {}, false};
  r.signal = sig;
  return r;
}

// This node's workers for one attempt: identity, environment and log file of each.
std::vector<WorkerSpec> make_specs(const LaunchPlan& plan, const Membership& m, int attempt, int store_port,
                                   const SaveTimes& saves) {
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; e++) base.emplace_back(*e);
  std::string attempt_dir;
  if (!plan.log_dir.empty()) {
    attempt_dir = fmt::format("{}/attempt_{}", plan.log_dir, attempt);
    std::error_code ec;
    std::filesystem::create_directories(attempt_dir, ec);
    NANODDP_CHECK(!ec, "cannot create the log directory {}: {}: check --log_dir", attempt_dir, ec.message());
  }
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < plan.nproc; local++) {
    WorkerIdentity id{m.first_rank(plan.node_rank) + local, local, m.world_size(), plan.nproc, attempt,
                      plan.master_addr, m.nodes.front().worker_port, store_port};
    WorkerSpec s;
    s.rank = id.rank;
    s.local_rank = local;
    auto vars = worker_variables(plan, id);
    if (const std::string file = saves.path(local); !file.empty()) vars.emplace_back("NANODDP_SAVE_SECONDS_FILE", file);
    s.env = merge_environment(base, vars);
    s.routing = plan.routing[size_t(local)];
    if (s.routing.any_file()) s.log_path = fmt::format("{}/rank_{}.log", attempt_dir, id.rank);
    specs.push_back(std::move(s));
  }
  return specs;
}

// Node 0's view of the other launchers' heartbeats: a node whose count stops changing for
// `timeout` is taken as lost (its launcher was killed, or its host is cut off).
class HeartbeatWatch {
 public:
  HeartbeatWatch(int nnodes, milliseconds timeout)
      : timeout_(timeout), last_(size_t(nnodes), -1), changed_(size_t(nnodes), Clock::now()) {}
  // The first node whose count has not moved for the timeout, or -1.
  int stale(const std::vector<int64_t>& beats) {
    auto now = Clock::now();
    for (size_t k = 1; k < beats.size(); k++) {
      if (beats[k] != last_[k]) {
        last_[k] = beats[k];
        changed_[k] = now;
      } else if (now - changed_[k] > timeout_) {
        return int(k);
      }
    }
    return -1;
  }
  milliseconds timeout() const { return timeout_; }

 private:
  milliseconds timeout_;
  std::vector<int64_t> last_;
  std::vector<Clock::time_point> changed_;
};

// Note [heartbeats from a thread]
// The loop that watches the workers also relays their output to the console, and a console that
// takes none (a paused terminal, a pipe whose reader has stopped) blocks it in write(), as it would
// block the workers themselves under torchrun, where they write to the console directly. Heartbeats
// sent from that loop stopped with it, and node 0 then ended the whole job as if this node had
// died. So each attempt counts its heartbeats from a thread of its own, which lives until the
// attempt's workers are stopped. A store that fails it ends the thread quietly: the loop's own
// store requests meet the same failure and report it. The thread has a store client of its own
// (StoreConnection::heartbeat_client): with the loop's client, a heartbeat that found the pooled
// connection dropped by the loop's failed request reconnected for up to 30 s, and the launcher,
// joining the thread, hung that long after node 0 was gone.
class HeartbeatSender {
 public:
  HeartbeatSender(LauncherRendezvous& rdzv, int attempt, milliseconds interval)
      : thread_([this, &rdzv, attempt, interval](std::stop_token stop) {
          std::unique_lock lock(mu_);
          while (!stop.stop_requested()) {
            try {
              rdzv.heartbeat(attempt);
            } catch (const std::exception&) {
              return;
            }
            wake_.wait_for(lock, stop, interval, [] { return false; });  // the interval, or the stop
          }
        }) {}

 private:
  std::mutex mu_;
  std::condition_variable_any wake_;  // woken only by the stop request of ~jthread
  std::jthread thread_;               // last: it uses the members above
};

// How long a launcher may be silent (heartbeats, store requests) before the others count it gone.
// Generous next to the monitor interval: a launcher has little else to do, so a silence this long
// means it is gone or stopped, not busy.
milliseconds heartbeat_timeout(const LaunchPlan& plan) {
  return std::max(milliseconds(5000), 20 * plan.monitor_interval);
}

void print_failure(const FailureReport& cause) {
  launcher_say(cause.headline());
  if (cause.tail.empty()) return;
  std::string text = fmt::format("nanoddp run: last {} line(s) of rank {}'s output:\n", cause.tail.size(), cause.rank);
  for (const std::string& line : cause.tail) text += fmt::format("  [rank {}]: {}\n", cause.rank, line);
  write_fully(STDERR_FILENO, text);
}

// One attempt on this node (steps 2-3 of Note [launcher rounds]): starts the workers, then wakes for
// their output and exits, signals, and every monitor interval for the attempt's state in the store,
// until the attempt ends on every node. Returns with every worker stopped and reaped.
class Attempt {
 public:
  Attempt(const LaunchPlan& plan, const WorkerProgram& program, LauncherRendezvous& rdzv, const Membership& m,
          int attempt, int store_port, const SaveTimes& saves, LauncherRendezvous* beats)
      : plan_(plan),
        rdzv_(rdzv),
        beats_(beats),
        membership_(m),
        attempt_(attempt),
        saves_(saves),
        group_(program, make_specs(plan, m, attempt, store_port, saves)),
        heartbeats_(plan.nnodes, heartbeat_timeout(plan)) {}

  AttemptResult run() {
    group_.start();
    std::optional<HeartbeatSender> heartbeat;  // stops when run() returns, its workers stopped
    if (beats_ != nullptr) heartbeat.emplace(*beats_, attempt_, plan_.monitor_interval);
    auto next_check = Clock::now();
    try {
      for (;;) {
        group_.pump(std::chrono::duration_cast<milliseconds>(std::max(next_check - Clock::now(), Clock::duration(0))));
        if (int sig = LauncherSignals::termination_signal()) return interrupted(sig);
        bool check_now = report_local_changes() || Clock::now() >= next_check;
        if (!check_now) continue;
        next_check = Clock::now() + plan_.monitor_interval;
        if (auto result = check_store()) return *result;
      }
    } catch (const Error& e) {
      // A signal that came while a store request waited wins: the user asked to stop.
      if (int sig = LauncherSignals::termination_signal()) {
        launcher_say(fmt::format("the rendezvous store failed: {}", e.what()));
        stop_to_save(sig);
        return {AttemptResult::End::Interrupted, std::nullopt, sig};
      }
      // The store is gone (node 0 exited) or misbehaves: nothing can coordinate this attempt now.
      const StopGrace g = grace(false);
      group_.stop(g.grace, SIGTERM, g.why);
      NANODDP_FAIL("{} (node {} stopped its workers)", e.what(), plan_.node_rank);
    }
  }

 private:
  // Publishes a local failure or success; true when it did (the store is worth a look at once).
  bool report_local_changes() {
    if (int f = group_.first_failure(); f >= 0 && !failure_reported_) {
      const WorkerSpec& s = group_.spec(size_t(f));
      std::vector<std::string> tail = group_.tail(size_t(f));
      for (std::string& line : tail)
        if (line.size() > kMaxReportedLine) line = line.substr(0, kMaxReportedLine) + " [...]";
      rdzv_.report_failure(attempt_, FailureReport{plan_.node_rank, plan_.host, s.rank, s.local_rank,
                                                   int(group_.pid(size_t(f))), group_.status(size_t(f)).describe(),
                                                   tail, true});
      return failure_reported_ = true;
    }
    if (!done_reported_ && group_.all_succeeded()) {
      rdzv_.report_done(attempt_);
      return done_reported_ = true;
    }
    return false;
  }

  // Node 0's watch on the others' heartbeats, then the attempt's outcome as the store records it;
  // nullopt while it goes on.
  std::optional<AttemptResult> check_store() {
    if (int lost = plan_.node_rank == 0 ? heartbeats_.stale(rdzv_.heartbeats(attempt_)) : -1; lost > 0) {
      std::string what = fmt::format("sent no heartbeat for {} s: it was killed or its host is unreachable",
                                      std::chrono::duration<double>(heartbeats_.timeout()).count());
      rdzv_.report_failure(attempt_, FailureReport{lost, membership_.nodes[size_t(lost)].host, -1, -1,
                                                   membership_.nodes[size_t(lost)].pid, what, {}, false, true});
    }
    if (auto cause = rdzv_.failure(attempt_)) {
      // The root cause first: the lines of the stop (a worker that needs SIGKILL) are its effects.
      print_failure(*cause);
      if (cause->signal != 0) {
        stop_to_save(SIGTERM);  // another node was interrupted: its workers save, so must these
      } else {
        const StopGrace g = grace(false);
        group_.stop(g.grace, SIGTERM, g.why);
      }
      return AttemptResult{AttemptResult::End::Failed, cause, 0};
    }
    if (done_reported_ && rdzv_.all_done(attempt_)) {
      group_.stop(grace(false).grace);  // no worker runs: this passes on their last output, ends leftovers
      return AttemptResult{AttemptResult::End::Succeeded, std::nullopt, 0};
    }
    return std::nullopt;
  }

  AttemptResult interrupted(int sig) {
    try {
      rdzv_.report_failure(attempt_, interrupt_report(plan_, sig, ""));  // the other nodes stop, not wait
    } catch (const Error&) {
    }
    stop_to_save(sig);
    return {AttemptResult::End::Interrupted, std::nullopt, sig};
  }

  StopGrace grace(bool to_save) const {
    return stop_grace(plan_.stop_timeout, to_save, saves_.longest(plan_.nproc));
  }

  // A stop the user asked for (Note [a stop that saves]): `sig` to the workers, the grace a save
  // needs, and what came of it.
  void stop_to_save(int sig) {
    const StopGrace g = grace(true);
    const int sig_received = LauncherSignals::termination_signal();
    launcher_say(fmt::format("received {}; stopping {} worker(s) with {}: they have up to {:.1f} s to save ({}); "
                             "a second Ctrl-C or SIGTERM kills them at once",
                             sig_received ? signal_name(sig_received) : "a stop from another node", plan_.nproc,
                             signal_name(sig), std::chrono::duration<double>(g.grace).count(), g.why));
    const WorkerGroup::StopOutcome out = group_.stop(g.grace, sig, g.why);
    if (out.running > 0 && out.killed == 0)
      launcher_say(fmt::format("waited {:.1f} s for the workers to save and exit after {}", out.waited_s,
                               signal_name(sig)));
  }

  // A line of a failure report is cut to this many bytes (the report travels through the store).
  static constexpr size_t kMaxReportedLine = 2000;

  const LaunchPlan& plan_;
  LauncherRendezvous& rdzv_;
  LauncherRendezvous* beats_;  // the heartbeats' own client (Note [heartbeats from a thread]); node 0: none
  const Membership& membership_;
  int attempt_;
  const SaveTimes& saves_;
  WorkerGroup group_;
  HeartbeatWatch heartbeats_;
  bool failure_reported_ = false, done_reported_ = false;
};

void announce(const LaunchPlan& plan, const Membership& m, int store_port) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; e++) env.emplace_back(*e);
  for (const std::string& note : environment_notices(env)) launcher_say(note);
  int first = m.first_rank(plan.node_rank);
  launcher_say(fmt::format("node {} of {} on {}: ranks {}-{} of {}, rendezvous store at {}:{}", plan.node_rank,
                           plan.nnodes, plan.host, first, first + plan.nproc - 1, m.world_size(), plan.master_addr,
                           store_port));
  if (plan.omp_threads && plan.nproc > 1)
    launcher_say(fmt::format("setting OMP_NUM_THREADS={} for each worker ({} cores / {} workers) so they do not "
                             "oversubscribe the CPU; set OMP_NUM_THREADS yourself to choose",
                             *plan.omp_threads, usable_cores(), plan.nproc));
  if (!plan.log_dir.empty()) launcher_say(fmt::format("writing worker logs under {}", plan.log_dir));
  if (std::string warning = m.oversubscription_warning(plan.node_rank); !warning.empty()) launcher_say(warning);
}

// Node 0 hosts the store where LaunchPlan::store_host says (loopback for a loopback --master_addr,
// every interface for several nodes, --master_bind where given); every launcher, node 0's included,
// talks to it as a client at --master_addr:--master_port, the way the workers will (at
// NANODDP_AGENT_STORE_PORT).
struct StoreConnection {
  std::unique_ptr<TcpStoreServer> server;  // node 0 only
  std::shared_ptr<TcpStore> client;
  std::shared_ptr<TcpStore> heartbeat_client;  // nodes other than 0 (Note [heartbeats from a thread])
  int port = 0;
};

StoreConnection open_store(const LaunchPlan& plan) {
  StoreConnection c;
  c.port = plan.master_port;
  if (plan.node_rank == 0) {
    try {
      c.server =
          std::make_unique<TcpStoreServer>(TcpStoreServerOptions{plan.store_host, plan.master_port, plan.store_token});
    } catch (const Error& e) {
      if (!plan.store_host_given) throw;
      NANODDP_FAIL("--master_bind {}: {}", plan.store_host, e.what());
    }
    c.port = c.server->port();
    // Said once, by the node whose store is open: the others only connect to it.
    if (plan.store_on_every_interface() && plan.store_token.empty())
      launcher_say(fmt::format("warning: the rendezvous store on port {} listens on every interface without a token, "
                               "so any process that can reach this host can read, change or stall the job's keys: "
                               "set NANODDP_STORE_TOKEN to the same secret on every node",
                               c.port));
  }
  // A store request unanswered as long as a missed heartbeat means node 0's launcher is gone or
  // stopped; the launcher gives up on it then, rather than after the client's default 120 s, deaf
  // to Ctrl-C meanwhile.
  TcpStoreOptions options{plan.master_addr, c.port, plan.rdzv_timeout, plan.rdzv_timeout, plan.store_token};
  options.request_timeout = heartbeat_timeout(plan);
  c.client = std::make_shared<TcpStore>(options);
  if (plan.node_rank != 0) {
    // Made now that the store answers, so a short connect timeout: it bounds a reconnect.
    options.connect_timeout = heartbeat_timeout(plan);
    c.heartbeat_client = std::make_shared<TcpStore>(options);
  }
  return c;
}

// A port for the workers' MASTER_PORT (Note [two ports]): one the system hands out as free on
// every interface, where a PyTorch rank 0 will bind its TCPStore.
int free_worker_port() {
  int port = 0;
  net::Fd probe = net::listen_tcp("", 0, &port);
  return port;
}

// What this node tells the others of itself at a join.
NodeRecord node_record(const LaunchPlan& plan) {
  NodeRecord self{plan.nnodes, plan.nproc, plan.host, int(::getpid())};
  self.max_restarts = plan.max_restarts;
  self.monitor_interval_ms = plan.monitor_interval.count();
  self.threads = plan.threads_per_worker();
  self.host_cores = int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (plan.node_rank == 0) self.worker_port = free_worker_port();
  return self;
}

// One launcher's job, from its first join to its exit code: every node joins, then this node runs
// an attempt of its workers; a restartable failure starts the next attempt with a new join, up to
// --max_restarts. Each way out tells the other nodes why (the rendezvous' reports) before leaving.
class LauncherJob {
 public:
  LauncherJob(LaunchPlan plan, const WorkerProgram& program)
      : plan_(std::move(plan)),
        program_(program),
        store_(open_store(plan_)),
        rdzv_(std::make_shared<PrefixStore>("nanoddp_run", store_.client), plan_.node_rank, plan_.nnodes,
              plan_.rdzv_timeout) {
    if (store_.heartbeat_client)
      beats_.emplace(std::make_shared<PrefixStore>("nanoddp_run", store_.heartbeat_client), plan_.node_rank,
                     plan_.nnodes, plan_.rdzv_timeout);
  }

  int run() {
    for (int attempt = 0;; attempt++) {
      Membership m;
      if (auto code = join(attempt, m)) return *code;
      if (attempt == 0) announce(plan_, m, store_.port);
      AttemptResult r;
      {
        WorkersRunning running;
        r = Attempt(plan_, program_, rdzv_, m, attempt, store_.port, saves_, beats_ ? &*beats_ : nullptr).run();
      }
      if (auto code = after_attempt(attempt, r)) return *code;
    }
  }

 private:
  // Long enough for the other launchers to see the outcome and stop their workers, saving or not
  // (this node's last save stands for theirs).
  std::chrono::milliseconds leave_within() const {
    return stop_grace(plan_.stop_timeout, true, saves_.longest(plan_.nproc)).grace + 10 * plan_.monitor_interval +
           std::chrono::seconds(5);
  }

  // This launcher leaves the job on a signal: `attempt`'s cause says so, so that nodes waiting at its
  // join stop there instead of waiting for this one until --rdzv_timeout (Membership::ended).
  int leave_on_signal(int attempt, int sig, const char* when, int lost = 0) {
    try {
      rdzv_.report_failure(attempt, interrupt_report(plan_, sig, when));
      rdzv_.leave(leave_within(), lost);
    } catch (const Error&) {  // node 0 may be gone already; this launcher is leaving anyway
    }
    return 128 + sig;
  }

  // Joins attempt `attempt` into `m`; the launcher's exit code when the job ends there instead.
  std::optional<int> join(int attempt, Membership& m) {
    const NodeRecord self = node_record(plan_);
    {
      // A signal while this node waits for the others is the join's to handle (below), so that they
      // hear of it; before, the handler ended this launcher at once, and they waited for it until
      // --rdzv_timeout.
      WorkersRunning deferred;
      m = rdzv_.join(attempt, self, &LauncherSignals::termination_signal);
    }
    if (m.interrupted != 0) {
      launcher_say(fmt::format("received {} while waiting for the other nodes", signal_name(m.interrupted)));
      return leave_on_signal(attempt, m.interrupted, " while it waited for the other nodes", m.absent);
    }
    if (m.ended) {
      print_failure(*m.ended);
      launcher_say("job stopped");
      rdzv_.leave(leave_within(), m.absent);
      return 1;
    }
    const int worker_port = m.nodes.front().worker_port;
    NANODDP_CHECK(worker_port > 0 && worker_port < 65536,
                  "node 0 ({}) registered no MASTER_PORT for the workers: run the same nanoddp version on every host",
                  m.nodes.front().host);
    return std::nullopt;
  }

  // The launcher's exit code after attempt `attempt` ended as `r`, or none to restart.
  std::optional<int> after_attempt(int attempt, const AttemptResult& r) {
    if (r.end == AttemptResult::End::Succeeded) {
      rdzv_.leave(leave_within());
      return 0;
    }
    // Interrupted during the attempt: the next one's cause says so too, for nodes that restart
    // (another node's failure may have been reported first for this one).
    if (r.end == AttemptResult::End::Interrupted) return leave_on_signal(attempt + 1, r.signal, "");
    // The cause was printed when it was read (Attempt::check_store), before the workers were stopped.
    // A Ctrl-C or SIGTERM that came while the failed attempt's workers were being stopped ends the
    // job: it asked to stop, not to start a new group. The next attempt's cause says so, so that
    // the other nodes stop at its join instead of waiting there for this one (Membership::ended).
    if (int sig = LauncherSignals::termination_signal(); sig != 0) {
      launcher_say(fmt::format("received {} while stopping the workers: no restart", signal_name(sig)));
      return leave_on_signal(attempt + 1, sig, " while it stopped the failed attempt's workers");
    }
    if (r.cause->restartable && attempt < plan_.max_restarts) {
      launcher_say(fmt::format("restarting every worker (restart {} of --max_restarts {})", attempt + 1,
                               plan_.max_restarts));
      return std::nullopt;
    }
    launcher_say(r.cause->restartable
                     ? fmt::format("job failed after {} attempt(s) (--max_restarts {})", attempt + 1, plan_.max_restarts)
                     : "job stopped");
    rdzv_.leave(leave_within(), r.cause->node_lost ? 1 : 0);
    return 1;
  }

  const LaunchPlan plan_;
  const WorkerProgram& program_;
  StoreConnection store_;
  LauncherRendezvous rdzv_;
  std::optional<LauncherRendezvous> beats_;
  SaveTimes saves_;  // Note [a stop that saves]
};

}  // namespace

int run_launcher(const LaunchOptions& options, const WorkerProgram& program) {
  LaunchPlan plan = make_launch_plan(options);
  LauncherSignals::install();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // what workers leave behind comes back to us to reap
  return LauncherJob(std::move(plan), program).run();
}

}  // namespace nanoddp::dist

#include "launch/launcher_plan.h"

#include <netdb.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>

#include "core/device.h"
#include "core/error.h"
#include "rendezvous/tcp_store.h"

namespace nanoddp::dist {

namespace {

std::optional<int> parse_int(std::string_view text) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// A duration flag in seconds, to the millisecond. The bounds keep it meaningful: at least 1 ms
// unless zero is allowed (a 0.0004 s monitor interval was 0 ms, a busy loop), and at most a week
// (1e10 s overflowed the deadline's clock arithmetic into the past).
constexpr double kMaxFlagSeconds = 7 * 24 * 3600;

std::chrono::milliseconds seconds_flag(double seconds, const char* flag, bool allow_zero) {
  NANODDP_CHECK((allow_zero && seconds == 0) || (seconds >= 0.001 && seconds <= kMaxFlagSeconds), "--{} {} must be "
                "{}from 0.001 to {:.0f} seconds", flag, seconds, allow_zero ? "0 or " : "", kMaxFlagSeconds);
  return std::chrono::milliseconds(int64_t(seconds * 1000 + 0.5));
}

// "HOST", "HOST:PORT" or "[V6ADDR]:PORT" into host and port (port unchanged when absent).
void parse_endpoint(const std::string& endpoint, std::string* host, int* port) {
  std::string h = endpoint, p;
  if (h.starts_with("[")) {
    size_t close = h.find(']');
    NANODDP_CHECK(close != std::string::npos, "--rdzv_endpoint '{}': missing ']'", endpoint);
    p = h.substr(close + 1);
    h = h.substr(1, close - 1);
    NANODDP_CHECK(p.empty() || p.starts_with(":"), "--rdzv_endpoint '{}': expected [ADDR]:PORT", endpoint);
    if (!p.empty()) p = p.substr(1);
  } else if (size_t colon = h.rfind(':'); colon != std::string::npos && h.find(':') == colon) {
    p = h.substr(colon + 1);
    h = h.substr(0, colon);
  }
  NANODDP_CHECK(!h.empty(), "--rdzv_endpoint '{}' names no host", endpoint);
  *host = h;
  if (!p.empty()) {
    auto v = parse_int(p);
    NANODDP_CHECK(v && *v > 0 && *v < 65536, "--rdzv_endpoint '{}': '{}' is not a port", endpoint, p);
    *port = *v;
  }
}

// --rdzv_conf KEY=VALUE,...: torchrun's c10d settings that mean something here, and the rest
// accepted without effect (they tune torchrun's elastic agent, which nanoddp does not have).
void apply_rdzv_conf(const std::string& conf, LaunchPlan* p) {
  static const std::set<std::string> no_effect = {"read_timeout", "last_call_timeout", "close_timeout", "is_host",
                                                   "keep_alive_interval", "keep_alive_max_attempt", "use_libuv"};
  std::string_view rest = conf;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    NANODDP_CHECK(eq != std::string::npos, "--rdzv_conf: '{}' is not KEY=VALUE", item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "join_timeout" || key == "timeout") {
      char* end = nullptr;
      const double seconds = std::strtod(value.c_str(), &end);
      NANODDP_CHECK(end != value.c_str() && *end == '\0' && seconds >= 0.001 && seconds <= kMaxFlagSeconds,
                    "--rdzv_conf {}={}: expected seconds from 0.001 to {:.0f}", key, value, kMaxFlagSeconds);
      p->rdzv_timeout = std::chrono::milliseconds(int64_t(seconds * 1000 + 0.5));
    } else {
      NANODDP_CHECK(no_effect.count(key), "--rdzv_conf: unknown key '{}'; known: join_timeout, timeout (seconds), "
                    "and torchrun's read_timeout, last_call_timeout, close_timeout, is_host, keep_alive_interval, "
                    "keep_alive_max_attempt, use_libuv (accepted, no effect)", key);
    }
  }
}

std::string random_token() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// --redirects / --tee without --log_dir: like torchrun, write the files to a fresh temporary dir.
std::string temporary_log_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/nanoddp_run_XXXXXX";
  NANODDP_CHECK(::mkdtemp(templ.data()) != nullptr, "cannot create a log directory {}: give --log_dir", templ);
  return templ;
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

int resolve_nproc_per_node(const std::string& spec) {
  if (spec == "auto") return std::max(1, cuda_device_count());
  if (spec == "cpu") return usable_cores();
  if (spec == "gpu") {
    int gpus = cuda_device_count();
    NANODDP_CHECK(gpus > 0, "--nproc_per_node gpu, but this build or machine has no CUDA device: give a number, "
                  "auto or cpu");
    return gpus;
  }
  auto n = parse_int(spec);
  NANODDP_CHECK(n && *n >= 1, "--nproc_per_node '{}' is not a positive number, auto, gpu or cpu", spec);
  // Workers beyond 8 per core are a typo, not a job: 100000 of them once left the launcher forking
  // for minutes, deaf to SIGTERM. (Several workers per core is legitimate for tests and debugging.)
  const int cap = 8 * std::max(1, usable_cores());
  NANODDP_CHECK(*n <= cap, "--nproc_per_node {} is more than 8 workers per core of this machine ({} cores): one "
                "worker per GPU, or per few cores, is the usual choice", *n, usable_cores());
  return *n;
}

int parse_nnodes(const std::string& spec) {
  size_t colon = spec.find(':');
  auto lo = parse_int(std::string_view(spec).substr(0, colon));
  auto hi = colon == std::string::npos ? lo : parse_int(std::string_view(spec).substr(colon + 1));
  NANODDP_CHECK(lo && hi && *lo >= 1, "--nnodes '{}' is not a positive number (or N:N)", spec);
  NANODDP_CHECK(*lo == *hi, "--nnodes {}: elastic membership (MIN:MAX with MIN < MAX) is not supported; give one "
                "number", spec);
  return *lo;
}

std::string find_program(const std::string& name) {
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return runnable(name) ? name : "";
  // The PATH search of execvp(), done here so that a missing program is an error before any worker
  // starts (an empty PATH entry means the working directory).
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (runnable(candidate)) return candidate;
    if (colon == std::string_view::npos) return "";
    dirs.remove_prefix(colon + 1);
  }
}

std::vector<int> parse_stream_map(const std::string& spec, const char* flag, int nproc) {
  const std::string expected = fmt::format("--{} {}: expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or a map of "
                                           "local ranks, e.g. 0:3,1:0", flag, spec);
  if (auto all = parse_int(spec)) {
    NANODDP_CHECK(*all >= 0 && *all <= 3, "{}", expected);
    return std::vector<int>(size_t(nproc), *all);
  }
  std::vector<int> out(size_t(nproc), 0);
  std::string_view rest = spec;
  NANODDP_CHECK(!rest.empty(), "{}", expected);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t colon = item.find(':');
    NANODDP_CHECK(colon != std::string_view::npos, "{}", expected);
    const auto rank = parse_int(item.substr(0, colon)), bits = parse_int(item.substr(colon + 1));
    NANODDP_CHECK(rank && bits && *bits >= 0 && *bits <= 3, "{}", expected);
    NANODDP_CHECK(*rank >= 0 && *rank < nproc, "--{} {}: local rank {} does not exist on this node (0..{})", flag,
                  spec, *rank, nproc - 1);
    out[size_t(*rank)] = *bits;
  }
  return out;
}

namespace {

// Where the store is: --rdzv_endpoint overrides --master_addr/--master_port; --standalone overrides
// both with loopback and a port node 0 picks.
void plan_store_address(const LaunchOptions& o, LaunchPlan& p) {
  p.standalone = o.standalone;
  p.master_addr = o.master_addr;
  p.master_port = o.master_port;
  if (!o.rdzv_endpoint.empty()) parse_endpoint(o.rdzv_endpoint, &p.master_addr, &p.master_port);
  if (p.standalone) {
    NANODDP_CHECK(p.nnodes == 1, "--standalone runs one node, but --nnodes is {}: drop --standalone and give "
                  "--master_addr", p.nnodes);
    p.master_addr = "127.0.0.1";
    p.master_port = 0;
    return;
  }
  NANODDP_CHECK(p.master_port > 0 && p.master_port < 65536, "--master_port {} is not a port (1..65535)",
                p.master_port);
  NANODDP_CHECK(!p.master_addr.empty(), "--master_addr is empty: give node 0's address");
  // A name that does not resolve never will within the rendezvous timeout: say so now, instead
  // of waiting the whole timeout in silence. A temporary DNS failure (EAI_AGAIN) is left to the
  // store client's retries.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(p.master_addr.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  NANODDP_CHECK(rc == 0 || rc == EAI_AGAIN, "--master_addr {} does not resolve ({}): give node 0's host name or "
                "address as the other nodes reach it", p.master_addr, ::gai_strerror(rc));
}

// Where node 0's store listens. --master_bind says where, if given. A loopback --master_addr:
// only this machine's processes can reach the store by it, so loopback (its own address for
// 127.x.y.z or ::1, which a socket bound to 127.0.0.1 would not answer). Otherwise, one node:
// --master_addr as given (the user asked for the store there); several nodes: every interface, as
// MASTER_ADDR may be a name or an address (behind NAT, say) that this host cannot bind although
// others reach it by it.
void plan_store_host(const LaunchOptions& o, LaunchPlan& p) {
  const bool loopback =
      p.master_addr == "localhost" || p.master_addr.starts_with("127.") || p.master_addr == "::1";
  p.store_host_given = !o.master_bind.empty();
  if (p.store_host_given)
    p.store_host = o.master_bind;
  else if (loopback)
    p.store_host = p.master_addr == "127.0.0.1" ? "localhost" : p.master_addr;
  else
    p.store_host = p.nnodes > 1 ? "" : p.master_addr;
}

// Timing and restarts: --max_restarts, --monitor_interval, --rdzv_timeout, --stop_timeout.
void plan_timing(const LaunchOptions& o, LaunchPlan& p) {
  p.max_restarts = o.max_restarts;
  NANODDP_CHECK(p.max_restarts >= 0, "--max_restarts {} must be zero or more", o.max_restarts);
  p.monitor_interval = seconds_flag(o.monitor_interval, "monitor_interval", false);
  p.rdzv_timeout = seconds_flag(o.rdzv_timeout, "rdzv_timeout", false);
  if (o.stop_timeout != "auto") {
    char* end = nullptr;
    const double seconds = std::strtod(o.stop_timeout.c_str(), &end);
    NANODDP_CHECK(end != o.stop_timeout.c_str() && *end == '\0', "--stop_timeout '{}' is not auto or a number of "
                  "seconds", o.stop_timeout);
    p.stop_timeout = seconds_flag(seconds, "stop_timeout", true);
  }
}

// torchrun's rendezvous flags. c10d is a TCP store on node 0, which is what ours is; static is
// torchrun's fixed-membership rendezvous over the same MASTER_ADDR:MASTER_PORT.
void plan_rendezvous_flags(const LaunchOptions& o, LaunchPlan& p) {
  NANODDP_CHECK(o.rdzv_backend == "c10d" || o.rdzv_backend == "static", "--rdzv_backend {}: nanoddp's rendezvous is "
                "its own TCP store on node 0 (c10d's role); use --rdzv_backend c10d with --rdzv_endpoint HOST:PORT, or "
                "leave the flag out", o.rdzv_backend);
  NANODDP_CHECK(!o.rdzv_id.empty() && o.rdzv_id.find_first_of("/\\ ") == std::string::npos,
                "--rdzv_id '{}' must be a non-empty name without '/', '\\' or spaces (it names the log folder)",
                o.rdzv_id);
  p.rdzv_id = o.rdzv_id;
  apply_rdzv_conf(o.rdzv_conf, &p);
  NANODDP_CHECK(!o.role.empty(), "--role must not be empty (it is ROLE_NAME, default \"default\")");
  p.role = o.role;
  NANODDP_CHECK(o.start_method == "spawn" || o.start_method == "fork" || o.start_method == "forkserver",
                "--start_method {} is not spawn, fork or forkserver", o.start_method);
}

// The local ranks whose output the console shows: --local_ranks_filter's, or all without it.
std::vector<bool> shown_ranks(const LaunchOptions& o, int nproc) {
  std::vector<bool> shown(size_t(nproc), o.local_ranks_filter.empty());
  std::string_view rest = o.local_ranks_filter;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const auto r = parse_int(rest.substr(0, comma));
    NANODDP_CHECK(r && *r >= 0 && *r < nproc, "--local_ranks_filter {}: '{}' is not a local rank of this node "
                  "(0..{})", o.local_ranks_filter, rest.substr(0, comma), nproc - 1);
    shown[size_t(*r)] = true;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return shown;
}

// Output: where each local rank's stdout and stderr go. The log directory is made only once every
// flag has been checked.
void plan_output(const LaunchOptions& o, LaunchPlan& p) {
  const std::vector<int> redirects = parse_stream_map(o.redirects, "redirects", p.nproc);
  const std::vector<int> tee = parse_stream_map(o.tee, "tee", p.nproc);
  const std::vector<bool> shown = shown_ranks(o, p.nproc);
  bool files = !o.log_dir.empty();
  for (int l = 0; l < p.nproc; l++) files |= redirects[size_t(l)] != 0 || tee[size_t(l)] != 0;
  if (files) {
    // Note [a log folder per launch]: --log_dir gets a new folder each launch, <rdzv_id>_<random>
    // as torchrun names it, so a folder reused from an earlier (larger, or restarted) run never
    // mixes its stale rank_R.log files with this run's; nothing of the earlier run is removed.
    if (o.log_dir.empty()) {
      p.log_dir = temporary_log_dir();
    } else {
      p.log_dir = fmt::format("{}/{}_{}", o.log_dir, p.rdzv_id, random_token().substr(0, 8));
      std::error_code ec;
      std::filesystem::create_directories(p.log_dir, ec);
      NANODDP_CHECK(!ec, "cannot create the log directory {}: {}: check --log_dir", p.log_dir, ec.message());
    }
  }
  for (int l = 0; l < p.nproc; l++)
    p.routing.push_back(OutputRouting::from_flags(redirects[size_t(l)], tee[size_t(l)],
                                                  o.log_dir.empty() ? (redirects[size_t(l)] | tee[size_t(l)] ? p.log_dir : "")
                                                                    : p.log_dir,
                                                  shown[size_t(l)]));
}

}  // namespace

LaunchPlan make_launch_plan(const LaunchOptions& o) {
  // Who this node is.
  LaunchPlan p;
  p.nproc = resolve_nproc_per_node(o.nproc_per_node);
  p.nnodes = parse_nnodes(o.nnodes);
  p.node_rank = o.node_rank;
  NANODDP_CHECK(p.node_rank >= 0 && p.node_rank < p.nnodes, "--node_rank {} is out of range for --nnodes {}: use 0..{}",
                o.node_rank, p.nnodes, p.nnodes - 1);
  p.host = this_host();
  plan_store_address(o, p);
  plan_store_host(o, p);
  plan_timing(o, p);
  plan_rendezvous_flags(o, p);
  plan_output(o, p);

  // Threads: torchrun's guard against nproc workers each starting one OpenMP thread per core.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) p.omp_threads = std::max(1, usable_cores() / p.nproc);

  // One node: nobody else needs to know the store's token, so make one up to keep other local
  // processes out of the job's store. Several nodes share the user's NANODDP_STORE_TOKEN, if any.
  p.store_token = store_token_from_env();
  if (p.store_token.empty() && p.nnodes == 1) {
    p.store_token = random_token();
    p.store_token_generated = true;
  }
  // One id for this `nanoddp run` and all its restarts: a restarted trainer resumes only a run
  // folder its own job started (train/run_folder.h). Not the token: that one is a secret.
  p.job_id = random_token().substr(0, 16);
  return p;
}

int LaunchPlan::threads_per_worker() const {
  if (omp_threads) return *omp_threads;
  const char* v = std::getenv("OMP_NUM_THREADS");
  auto n = v ? parse_int(v) : std::nullopt;
  return n && *n > 0 ? *n : 0;
}

std::vector<std::string> environment_notices(const std::vector<std::string>& environ) {
  // What each variable does elsewhere, and what nanoddp offers instead.
  static const std::pair<const char*, const char*> known[] = {
      {"NCCL_DEBUG", "NCCL reads it itself: it applies to workers on the NCCL backend (GPUs); the Gloo and MPI "
                     "backends ignore it"},
      {"TORCH_DISTRIBUTED_DEBUG", "PyTorch workers read it; nanoddp's own commands ignore it "
                                  "(NANODDP_DEBUG_COLLECTIVES=1 logs each of their collectives)"},
      {"TORCH_CPP_LOG_LEVEL", "PyTorch workers read it; nanoddp's own commands ignore it"},
      {"WANDB_RUN", "nanochat's Weights & Biases run name: nanoddp logs no W&B run; train writes its metrics to "
                    "OUT/metrics.jsonl"},
      {"WANDB_MODE", "nanoddp logs no W&B run; train writes its metrics to OUT/metrics.jsonl"},
  };
  std::vector<std::string> notes;
  for (const auto& [name, note] : known)
    for (const std::string& entry : environ)
      if (entry.starts_with(std::string(name) + "=")) {
        notes.push_back(fmt::format("note: {} is set: {}", entry, note));
        break;
      }
  return notes;
}

std::vector<std::pair<std::string, std::string>> worker_variables(const LaunchPlan& plan, const WorkerIdentity& id) {
  // torchrun's names, so that programs written for torchrun run unchanged, plus nanoddp's own.
  auto s = [](auto v) { return fmt::format("{}", v); };
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", s(id.rank)},
      {"LOCAL_RANK", s(id.local_rank)},
      {"WORLD_SIZE", s(id.world_size)},
      {"LOCAL_WORLD_SIZE", s(id.local_world_size)},
      {"GROUP_RANK", s(plan.node_rank)},
      {"GROUP_WORLD_SIZE", s(plan.nnodes)},
      {"ROLE_RANK", s(id.rank)},
      {"ROLE_WORLD_SIZE", s(id.world_size)},
      {"MASTER_ADDR", id.master_addr},
      {"MASTER_PORT", s(id.master_port)},
      {"NANODDP_RESTART_COUNT", s(id.attempt)},
      {"TORCHELASTIC_RESTART_COUNT", s(id.attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", s(plan.max_restarts)},
      {"NANODDP_AGENT_STORE", "1"},
      {"NANODDP_AGENT_STORE_PORT", s(id.store_port)},
      {"NANODDP_JOB_ID", plan.job_id},
      {"TORCHELASTIC_RUN_ID", plan.rdzv_id},
      {"ROLE_NAME", plan.role},
  };
  if (plan.omp_threads) vars.emplace_back("OMP_NUM_THREADS", s(*plan.omp_threads));
  if (plan.store_token_generated) vars.emplace_back("NANODDP_STORE_TOKEN", plan.store_token);
  return vars;
}

std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::vector<std::pair<std::string, std::string>>& vars) {
  // Entries of `base` whose name `vars` sets are dropped (execve would keep both, and which one a
  // program sees depends on its libc), then `vars` are appended.
  std::set<std::string> replaced;
  for (auto& [name, value] : vars) replaced.insert(name);
  std::vector<std::string> out;
  for (const std::string& entry : base) {
    std::string name = entry.substr(0, entry.find('='));
    if (!replaced.count(name)) out.push_back(entry);
  }
  for (auto& [name, value] : vars) out.push_back(name + "=" + value);
  return out;
}

}  // namespace nanoddp::dist

#include "comm/environment.h"

#include <charconv>
#include <cstdlib>

#include "core/error.h"


namespace nanoddp::dist {

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::None: return "none";
    case Launcher::Torchrun: return "torchrun";
    case Launcher::Mpirun: return "mpirun";
    case Launcher::Srun: return "srun";
  }
  return "?";
}

std::string DistEnv::describe() const {
  std::string s = fmt::format("rank {} of {} (local {} of {}, node {})", rank, world_size, local_rank,
                              local_world_size, node_rank);
  if (launcher != Launcher::None) s += fmt::format(", launched by {}", launcher_name(launcher));
  if (!master_addr.empty()) s += fmt::format(", master {}:{}", master_addr, master_port);
  if (restart_count > 0) s += fmt::format(", restart {}", restart_count);
  return s;
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

// Reads an integer variable in [lo, hi]; nullopt when unset.
std::optional<int> int_var(const EnvLookup& env, const std::string& name, int lo, int hi) {
  auto text = env(name);
  if (!text) return std::nullopt;
  int value = 0;
  const char* b = text->data();
  const char* e = b + text->size();
  auto [end, ec] = std::from_chars(b, e, value);
  NANODDP_CHECK(ec == std::errc() && end == e && !text->empty(), "{}='{}' is not an integer: fix the launcher's "
                "environment", name, *text);
  NANODDP_CHECK(value >= lo && value <= hi, "{}={} is out of range [{}, {}]", name, value, lo, hi);
  return value;
}

int parse_int_token(std::string_view s, std::string_view whole) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  NANODDP_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(),
                "malformed Slurm list '{}' near '{}'", whole, s);
  return v;
}

// Splits at commas outside brackets.
std::vector<std::string_view> split_top_level(std::string_view list) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); i++) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      if (i > start) items.push_back(list.substr(start, i - start));
      start = i + 1;
    } else if (list[i] == '[') {
      depth++;
    } else if (list[i] == ']') {
      NANODDP_CHECK(depth > 0, "malformed Slurm node list '{}': unbalanced ']'", list);
      depth--;
    }
  }
  NANODDP_CHECK(depth == 0, "malformed Slurm node list '{}': unbalanced '['", list);
  return items;
}

// "01-04,07" -> 01 02 03 04 07 (keeping the width of each range's start).
std::vector<std::string> expand_ranges(std::string_view ranges, std::string_view whole, size_t max_hosts) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= ranges.size(); i++) {
    if (i < ranges.size() && ranges[i] != ',') continue;
    std::string_view item = ranges.substr(start, i - start);
    start = i + 1;
    size_t dash = item.find('-');
    std::string_view lo_text = dash == std::string_view::npos ? item : item.substr(0, dash);
    int lo = parse_int_token(lo_text, whole);
    int hi = dash == std::string_view::npos ? lo : parse_int_token(item.substr(dash + 1), whole);
    NANODDP_CHECK(hi >= lo, "malformed Slurm node list '{}': range '{}' runs backwards", whole, item);
    for (int v = lo; v <= hi; v++) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
      out.push_back(digits);
      NANODDP_CHECK(out.size() <= max_hosts, "Slurm node list '{}' expands to more than {} hosts", whole, max_hosts);
    }
  }
  return out;
}

// "4(x2),1" -> 4 4 1 (SLURM_TASKS_PER_NODE).
std::vector<int> expand_tasks_per_node(std::string_view list) {
  std::vector<int> out;
  for (std::string_view item : split_top_level(list)) {
    size_t paren = item.find("(x");
    int count = parse_int_token(item.substr(0, paren), list);
    int repeat = 1;
    if (paren != std::string_view::npos) {
      NANODDP_CHECK(item.back() == ')', "malformed SLURM_TASKS_PER_NODE '{}'", list);
      repeat = parse_int_token(item.substr(paren + 2, item.size() - paren - 3), list);
    }
    for (int i = 0; i < repeat && out.size() < (1u << 16); i++) out.push_back(count);
  }
  return out;
}

void read_master(const EnvLookup& env, DistEnv& d) {
  if (auto addr = env("MASTER_ADDR"); addr && !addr->empty()) {
    d.master_addr = *addr;
    d.master_from_env = true;
  }
  if (auto port = int_var(env, "MASTER_PORT", 1, 65535)) d.master_port = *port;
  if (auto port = int_var(env, "NANODDP_AGENT_STORE_PORT", 1, 65535)) d.agent_store_port = *port;
}

void check_ranks(const DistEnv& d, const char* rank_var, const char* world_var) {
  NANODDP_CHECK(d.rank < d.world_size, "{}={} is not below {}={}", rank_var, d.rank, world_var, d.world_size);
  NANODDP_CHECK(d.local_rank < d.local_world_size, "local rank {} is not below the local world size {}",
                d.local_rank, d.local_world_size);
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(std::string_view list, size_t max_hosts) {
  std::vector<std::string> hosts;
  for (std::string_view item : split_top_level(list)) {
    // Multiply out each bracket group in turn: "a[1-2]b[3-4]" -> a1b3 a1b4 a2b3 a2b4.
    std::vector<std::string> partial{""};
    size_t pos = 0;
    while (pos < item.size()) {
      size_t open = item.find('[', pos);
      std::string_view literal = item.substr(pos, open == std::string_view::npos ? item.size() - pos : open - pos);
      for (auto& p : partial) p += literal;
      if (open == std::string_view::npos) break;
      size_t close = item.find(']', open);
      auto values = expand_ranges(item.substr(open + 1, close - open - 1), list, max_hosts);
      std::vector<std::string> next;
      for (auto& p : partial)
        for (auto& v : values) {
          next.push_back(p + v);
          NANODDP_CHECK(next.size() + hosts.size() <= max_hosts, "Slurm node list '{}' expands to more than {} hosts",
                        list, max_hosts);
        }
      partial.swap(next);
      pos = close + 1;
    }
    hosts.insert(hosts.end(), partial.begin(), partial.end());
  }
  return hosts;
}

std::string first_slurm_host(std::string_view list) {
  auto items = split_top_level(list);
  NANODDP_CHECK(!items.empty(), "the Slurm node list is empty: set MASTER_ADDR");
  // The first host is the first value of every bracket group of the first item.
  std::string_view item = items[0];
  std::string host;
  size_t pos = 0;
  while (pos < item.size()) {
    size_t open = item.find('[', pos);
    host += item.substr(pos, open == std::string_view::npos ? item.size() - pos : open - pos);
    if (open == std::string_view::npos) break;
    size_t close = item.find(']', open);
    std::string_view first = item.substr(open + 1, close - open - 1);
    first = first.substr(0, first.find_first_of(",-"));
    parse_int_token(first, list);
    host += first;
    pos = close + 1;
  }
  return host;
}

namespace {

// srun's variables (the header lists them); false when this process is no task of an srun step.
bool read_slurm(const EnvLookup& env, DistEnv& d) {
  auto procid = int_var(env, "SLURM_PROCID", 0, 1 << 24);
  // Only a task that srun started has a step id. The batch script of `sbatch -n N` also has
  // SLURM_PROCID=0 and SLURM_NTASKS=N but is one process: taken for rank 0 it would wait for
  // ranks that nothing starts until the rendezvous timeout.
  if (procid && !env("SLURM_STEP_ID") && !env("SLURM_STEPID")) {
    const int tasks = int_var(env, "SLURM_NTASKS", 1, 1 << 24).value_or(1);
    NANODDP_CHECK(tasks == 1,
                  "this process is a Slurm job's batch script (SLURM_NTASKS={} but no SLURM_STEP_ID), not a task "
                  "that srun started: start the ranks with `srun nanoddp ...`, or with `nanoddp run "
                  "--nproc_per_node N ...` per node",
                  tasks);
    procid.reset();  // a one-task job's script: a single process
  }
  if (!procid) return false;
  d.launcher = Launcher::Srun;
  d.rank = *procid;
  d.world_size = int_var(env, "SLURM_NTASKS", 1, 1 << 24).value_or(1);
  d.local_rank = int_var(env, "SLURM_LOCALID", 0, 1 << 24).value_or(0);
  d.node_rank = int_var(env, "SLURM_NODEID", 0, 1 << 24).value_or(0);
  // The step's real layout first: SLURM_STEP_TASKS_PER_NODE (srun's own step), then
  // SLURM_TASKS_PER_NODE (the allocation's, as sbatch left it); SLURM_NTASKS_PER_NODE is only the
  // --ntasks-per-node maximum, which a node of an uneven layout may not reach.
  const char* layout_var = nullptr;
  std::optional<std::string> layout;  // "4(x2),2": tasks on each node of the step
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})
    if (layout = env(name); layout && !layout->empty()) {
      layout_var = name;
      break;
    }
  if (layout_var != nullptr) {
    auto counts = expand_tasks_per_node(*layout);
    NANODDP_CHECK(size_t(d.node_rank) < counts.size(), "{}='{}' has no entry for node {}", layout_var, *layout,
                  d.node_rank);
    d.local_world_size = counts[d.node_rank];
  } else if (auto per_node = int_var(env, "SLURM_NTASKS_PER_NODE", 1, 1 << 24)) {
    d.local_world_size = *per_node;
  } else {
    d.local_world_size = d.local_rank + 1;
  }
  read_master(env, d);
  if (d.master_addr.empty()) {
    // The step's nodes: rank 0 runs on the first of them, which need not be the allocation's first
    // (`srun -w`, `--relative`, or a step on part of the allocation).
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
      if (auto nodes = env(name); nodes && !nodes->empty()) {
        d.master_addr = first_slurm_host(*nodes);
        break;
      }
  }
  check_ranks(d, "SLURM_PROCID", "SLURM_NTASKS");
  return true;
}

}  // namespace

DistEnv discover_environment(const EnvLookup& env) {
  DistEnv d;
  auto restart = int_var(env, "NANODDP_RESTART_COUNT", 0, 1 << 30);
  if (!restart) restart = int_var(env, "TORCHELASTIC_RESTART_COUNT", 0, 1 << 30);
  d.restart_count = restart.value_or(0);

  auto rank = int_var(env, "RANK", 0, 1 << 24);
  auto world = int_var(env, "WORLD_SIZE", 1, 1 << 24);
  if (rank || world) {
    NANODDP_CHECK(rank && world, "{} is set but {} is not: launch with `nanoddp run` (or torchrun), or set both",
                  rank ? "RANK" : "WORLD_SIZE", rank ? "WORLD_SIZE" : "RANK");
    d.launcher = Launcher::Torchrun;
    d.rank = *rank;
    d.world_size = *world;
    // Without LOCAL_* the job is taken to be on one node.
    d.local_rank = int_var(env, "LOCAL_RANK", 0, 1 << 24).value_or(d.rank);
    d.local_world_size = int_var(env, "LOCAL_WORLD_SIZE", 1, 1 << 24).value_or(d.world_size);
    d.node_rank = int_var(env, "GROUP_RANK", 0, 1 << 24).value_or(0);
    read_master(env, d);
    check_ranks(d, "RANK", "WORLD_SIZE");
    return d;
  }

  if (auto ompi_rank = int_var(env, "OMPI_COMM_WORLD_RANK", 0, 1 << 24)) {
    d.launcher = Launcher::Mpirun;
    d.rank = *ompi_rank;
    d.world_size = int_var(env, "OMPI_COMM_WORLD_SIZE", 1, 1 << 24).value_or(1);
    d.local_rank = int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 1 << 24).value_or(0);
    d.local_world_size = int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1 << 24).value_or(1);
    // Open MPI has no node number: OMPI_COMM_WORLD_NODE_RANK is the process's place on its node. With
    // mpirun's default by-slot mapping the node is the rank over the processes per node.
    d.node_rank = d.rank / d.local_world_size;
    read_master(env, d);
    check_ranks(d, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    return d;
  }

  if (read_slurm(env, d)) return d;

  read_master(env, d);
  return d;
}

}  // namespace nanoddp::dist

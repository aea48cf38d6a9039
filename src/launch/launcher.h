// `nanoddp run`, the launcher (torchrun's equivalent): starts --nproc_per_node worker processes on
// each of --nnodes hosts, gives each its rank through the environment, forwards their output with a
// rank prefix, and watches them. When a worker fails, every launcher stops its workers, names the
// root cause, and either restarts the whole group (--max_restarts) or exits non-zero.
//
// One launcher runs per host. The launcher on node 0 hosts the rendezvous store (a TcpStoreServer
// at --master_addr:--master_port) that both the launchers and the workers use (the workers find it
// at NANODDP_AGENT_STORE_PORT: their MASTER_PORT is another, Note [two ports]); see docs/launcher.md for
// the environment contract and the restart protocol (Note [launcher rounds] in launcher.cpp).
#pragma once

#include <string>
#include <vector>

namespace nanoddp::dist {

// The launcher's flags, named as torchrun names them (the CLI also accepts them with dashes).
struct LaunchOptions {
  std::string nproc_per_node = "1";
  std::string nnodes = "1";
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string master_bind;
  std::string rdzv_endpoint;
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval = 0.5;
  double rdzv_timeout = 300;
  std::string stop_timeout = "auto";
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  std::string rdzv_backend = "static";
  std::string rdzv_id = "none";
  std::string rdzv_conf;
  std::string role = "default";
  std::string start_method = "spawn";
  bool no_python = false;
  bool module = false;
  bool run_path = false;
  std::string python;

  template <typename V>
  void visit(V&& v) {
    v(nproc_per_node, "nproc_per_node", "workers on this node: N, auto (GPUs if any, else 1), gpu or cpu (cores)");
    v(nnodes, "nnodes", "number of nodes (hosts); torchrun's elastic MIN:MAX is accepted only with MIN = MAX");
    v(node_rank, "node_rank", "this node's rank, 0..nnodes-1; node 0 hosts the rendezvous store");
    v(master_addr, "master_addr", "address of node 0, reachable from every node");
    v(master_port, "master_port", "port of the rendezvous store on node 0");
    v(master_bind, "master_bind", "the address node 0's store listens on: an address of this host, or 0.0.0.0 or :: "
      "for every interface (default: loopback when --master_addr is, else every interface for several nodes)");
    v(rdzv_endpoint, "rdzv_endpoint", "HOST[:PORT] of node 0; overrides --master_addr/--master_port");
    v(standalone, "standalone", "single node: host the store on 127.0.0.1 at a free port");
    v(max_restarts, "max_restarts", "times the whole group is restarted after a worker fails");
    v(monitor_interval, "monitor_interval",
      "seconds between checks of the other nodes' state (local exits are seen at once)");
    v(rdzv_timeout, "rdzv_timeout", "seconds to wait for node 0's store and for every node to join");
    v(stop_timeout, "stop_timeout", "seconds between the stop signal and SIGKILL when stopping workers; auto: 30 s "
      "plus twice the workers' last save after a signal to the launcher (they save), 5 s after a failure");
    v(log_dir, "log_dir", "write each rank's output to LOG_DIR/<rdzv_id>_<random>/attempt_N/rank_R.log, a new "
      "folder per launch");
    v(redirects, "redirects", "streams sent only to the log files: 0 none, 1 stdout, 2 stderr, 3 both; or per local "
      "rank, e.g. 0:3,1:0");
    v(tee, "tee", "streams copied to the log files as well as the console (bits as --redirects; per rank too)");
    v(local_ranks_filter, "local_ranks_filter", "show only these local ranks' output on the console, e.g. 0 or 0,2 "
      "(the log files get every rank's)");
    v(rdzv_backend, "rdzv_backend", "torchrun's rendezvous backend: c10d or static both mean nanoddp's own TCP store "
      "on node 0 (etcd is not supported)");
    v(rdzv_id, "rdzv_id", "the job's id: names the log folder and is given to workers as TORCHELASTIC_RUN_ID");
    v(rdzv_conf, "rdzv_conf", "KEY=VALUE,...: join_timeout or timeout (seconds, as --rdzv_timeout); torchrun's other "
      "keys are accepted and have no effect");
    v(role, "role", "the workers' role, given to them as ROLE_NAME");
    v(start_method, "start_method", "spawn, fork or forkserver: accepted for torchrun's sake; workers are always new "
      "processes (spawn)");
    v(no_python, "no_python", "run the command as a program, even a .py file (torchrun --no-python)");
    v(module, "module", "run the command as a Python module: python3 -m MODULE (torchrun -m)");
    v(run_path, "run_path", "run the command as a Python script with python3, whatever its name (torchrun --run-path)");
    v(python, "python", "the Python interpreter for scripts and -m modules (default: $NANODDP_PYTHON, else python3 on "
      "PATH)");
  }
};

// The program every worker runs.
struct WorkerProgram {
  std::string path;               // file to execute: absolute, or relative to the working directory
  std::vector<std::string> argv;  // its argv, argv[0] included
};

// --nproc_per_node as a count: N, "auto" (CUDA devices if any, else 1), "gpu" (CUDA devices; an
// error without one) or "cpu" (cores this process may run on). Throws nanoddp::Error otherwise.
int resolve_nproc_per_node(const std::string& spec);

// --nnodes as a count: "N" or "N:N". Throws nanoddp::Error on anything else.
int parse_nnodes(const std::string& spec);

// Where `name` would be executed from: itself when it contains a '/', otherwise the first
// executable file of that name on PATH. "" when there is none.
std::string find_program(const std::string& name);

// Runs the job to its end and returns the launcher's exit status: 0 when every worker on every node
// succeeded, 1 after a failure with no restarts left, 130 / 143 when interrupted by SIGINT / SIGTERM.
// Throws nanoddp::Error for bad options and rendezvous failures (port in use, master unreachable,
// node rank taken). Installs signal handlers and makes this process a child subreaper: call it once,
// from the main thread, in a process that does nothing else.
int run_launcher(const LaunchOptions& options, const WorkerProgram& program);

}  // namespace nanoddp::dist

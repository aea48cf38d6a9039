// A worker program for the launcher tests (tests/launch/test_launcher_*.cpp): it reports what the
// launcher gave it and misbehaves on request. Every line it prints names its rank, so the tests can
// check which worker said what. Runs, in order: --env, --pid, --spawn_child, --store (so every rank
// has started before any fails), the failure flags, --lines / --err_lines / --partial, --json_line,
// --report_save, --sleep (which --save_on_signal ends with a simulated save).
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// Every rank publishes a key under its attempt's prefix and waits for all the others: proves that
// MASTER_ADDR:NANODDP_AGENT_STORE_PORT reaches the launcher's store, with the token the launcher gave.
void store_exchange(int rank, int world, int restart) {
  using namespace nanoddp::dist;
  using namespace std::chrono_literals;
  TcpStoreOptions o;
  o.host = env_str("MASTER_ADDR");
  o.port = env_int("NANODDP_AGENT_STORE_PORT", 0);
  o.connect_timeout = 30s;
  o.timeout = 30s;
  auto store = std::make_shared<PrefixStore>("restart" + std::to_string(restart), std::make_shared<TcpStore>(o));
  store->set_string("rank" + std::to_string(rank), "here");
  std::vector<std::string> keys;
  for (int r = 0; r < world; r++) keys.push_back("rank" + std::to_string(r));
  store->wait(keys);
  say("store ok world " + std::to_string(world));
}

// The signal --save_on_signal received; 0 until one comes.
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  if (g_stop_signal == 0) g_stop_signal = sig;
}

// What nanoddp train does on a stop signal, in little: a save that takes `save_s` seconds, its
// duration reported where the launcher reads it (NANODDP_SAVE_SECONDS_FILE), exit 128 + the signal.
int save_and_exit(int sig, double save_s) {
  const std::string name = sigabbrev_np(sig) ? std::string("SIG") + sigabbrev_np(sig) : std::to_string(sig);
  say("saving after " + name);
  std::this_thread::sleep_for(std::chrono::duration<double>(save_s));
  if (const char* file = std::getenv("NANODDP_SAVE_SECONDS_FILE")) std::ofstream(file) << save_s << "\n";
  say("saved after " + name);
  return 128 + sig;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"launcher test worker"};
  bool print_env = false, print_pid = false, spawn_child = false, spawn_session_child = false, ignore_term = false,
       use_store = false, partial = false;
  int lines = 0, err_lines = 0, exit_rank = -1, exit_code = 0, signal_rank = -1, signal_number = SIGKILL;
  int fail_rank = -1, fail_until_restart = 0;
  double sleep_s = 0, fail_delay_s = 0, save_s = -1, report_save_s = -1;
  bool json_line = false;
  app.add_flag("--env", print_env, "print the launcher's variables");
  app.add_flag("--pid", print_pid, "print this process's pid");
  app.add_flag("--spawn_child", spawn_child, "fork a child that sleeps forever and print its pid");
  app.add_flag("--spawn_session_child", spawn_session_child, "the same, in a session of its own (setsid)");
  app.add_flag("--ignore_term", ignore_term, "ignore SIGTERM");
  app.add_flag("--store", use_store, "exchange a key with every rank through the launcher's store");
  app.add_flag("--partial", partial, "end stdout with a line that has no newline");
  app.add_option("--lines", lines, "lines to print on stdout");
  app.add_option("--err_lines", err_lines, "lines to print on stderr");
  app.add_option("--exit_rank", exit_rank, "this rank exits with --exit_code");
  app.add_option("--exit_code", exit_code, "exit code for --exit_rank");
  app.add_option("--signal_rank", signal_rank, "this rank raises --signal");
  app.add_option("--signal", signal_number, "signal for --signal_rank");
  app.add_option("--fail_rank", fail_rank, "the rank that --fail_until_restart applies to (-1: every rank)");
  app.add_option("--fail_until_restart", fail_until_restart, "exit 1 while NANODDP_RESTART_COUNT is below this");
  app.add_option("--fail_delay", fail_delay_s, "seconds to wait before --fail_until_restart fails (so that every "
                 "other rank has started, its --ignore_term in place)");
  app.add_option("--sleep", sleep_s, "seconds to sleep before exiting 0");
  app.add_option("--save_on_signal", save_s, "on SIGTERM, SIGINT or SIGHUP during --sleep, 'save' for this many "
                 "seconds, report it in NANODDP_SAVE_SECONDS_FILE, and exit 128 + the signal");
  app.add_option("--report_save", report_save_s, "write this many seconds to NANODDP_SAVE_SECONDS_FILE at start, as "
                 "an earlier save would have");
  app.add_flag("--json_line", json_line, "print a JSON object line on stdout, as eval's result line");
  CLI11_PARSE(app, argc, argv);

  int rank = env_int("RANK", -1), world = env_int("WORLD_SIZE", 0), restart = env_int("NANODDP_RESTART_COUNT", -1);
  if (ignore_term) ::signal(SIGTERM, SIG_IGN);
  if (save_s >= 0)
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::signal(sig, on_stop_signal);
  if (print_env) {
    std::string line = "env";
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                             "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NANODDP_RESTART_COUNT",
                             "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "NANODDP_AGENT_STORE",
                             "NANODDP_AGENT_STORE_PORT", "OMP_NUM_THREADS"})
      line += std::string(" ") + name + "=" + env_str(name);
    say(line);
  }
  if (print_pid) say("pid " + std::to_string(::getpid()));
  if (spawn_child) {
    pid_t child = ::fork();
    if (child == 0) {
      for (;;) ::pause();
    }
    say("child pid " + std::to_string(child));
  }
  if (spawn_session_child) {
    // Leaves the worker's process group and session, as subprocess.Popen(start_new_session=True) or
    // a daemon does; it keeps the worker's stdout and stderr.
    pid_t child = ::fork();
    if (child == 0) {
      ::setsid();
      for (;;) ::pause();
    }
    say("session child pid " + std::to_string(child));
  }
  if (use_store) store_exchange(rank, world, restart);
  if (fail_until_restart > 0 && (fail_rank < 0 || fail_rank == rank) && restart < fail_until_restart) {
    if (fail_delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(fail_delay_s));
    say("failing on restart " + std::to_string(restart));
    return 1;
  }
  if (rank == exit_rank) {
    say("about to exit with code " + std::to_string(exit_code));
    return exit_code;
  }
  if (rank == signal_rank) {
    say("about to raise signal " + std::to_string(signal_number));
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
  }
  for (int i = 0; i < lines; i++) std::printf("line %d of rank %d\n", i, rank);
  for (int i = 0; i < err_lines; i++) std::fprintf(stderr, "errline %d of rank %d\n", i, rank);
  if (partial) std::printf("no newline at the end from rank %d", rank);
  if (json_line) std::printf("{\"rank\": %d, \"accuracy\": 0.5}\n", rank);
  std::fflush(stdout);
  if (report_save_s >= 0) {
    if (const char* file = std::getenv("NANODDP_SAVE_SECONDS_FILE")) std::ofstream(file) << report_save_s << "\n";
    say("reported save " + env_str("NANODDP_SAVE_SECONDS_FILE"));
  }
  // Sleeps in short slices, so that a stop signal (--save_on_signal) is seen within one.
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, sleep_s));
  while (std::chrono::steady_clock::now() < end) {
    if (g_stop_signal != 0) return save_and_exit(g_stop_signal, save_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

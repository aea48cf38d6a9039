// Where a worker's output goes. Every line a worker writes to stdout or stderr is cut whole out of its
// pipe, then (per stream, as --redirects / --tee / --log_dir choose) written to the launcher's own
// stdout / stderr with a "[rank R]: " prefix, appended to LOG_DIR/attempt_N/rank_R.log unprefixed,
// and always kept in a short tail for the failure report.
//
// Note [result lines]
// One exception to the prefix: a stdout line of global rank 0 that starts with '{' and ends with
// '}' (a JSON object, such as eval's result line) reaches the launcher's stdout as it is, so that
// `nanoddp run ... eval ... | tail -1 | jq` works. Only rank 0's: the other ranks' copies would be
// indistinguishable from it without their prefix.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace nanoddp::dist {

enum class Stream { Out = 0, Err = 1 };

// Which streams go where. Bits as in torchrun's --redirects / --tee: 1 = stdout, 2 = stderr.
struct OutputRouting {
  bool console[2] = {true, true};
  bool file[2] = {false, false};
  std::string log_dir;  // "" = no files

  // From the flags: --redirects streams go to files only, --tee streams to both, the rest to the
  // console only; --log_dir on its own tees both streams. Needs a log_dir when files are used.
  // `console_shown` false (--local_ranks_filter leaves the rank out) keeps both streams off the console.
  static OutputRouting from_flags(int redirects, int tee, const std::string& log_dir, bool console_shown = true);
  bool any_file() const { return file[0] || file[1]; }
};

// One line from the launcher itself on stderr: "nanoddp run: <text>".
void launcher_say(const std::string& text);

// Writes all of `text` to `fd` (retrying short writes and EINTR, and waiting for room when a
// non-blocking `fd` is full, up to 10 s without progress). Used for every console line so a line
// leaves in one write() and never interleaves with another rank's line.
void write_fully(int fd, const std::string& text);

// The output of one worker, both streams.
class WorkerOutput {
 public:
  static constexpr size_t kTailLines = 10;
  // Longest line kept whole; a longer run of bytes without '\n' is passed on in pieces this size.
  static constexpr size_t kMaxLine = 64 * 1024;

  // `log_path` = "" for no file; the file is created (truncated) when files are routed.
  WorkerOutput(int rank, const OutputRouting& routing, const std::string& log_path);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  // Bytes read from the worker's pipe for `stream`: complete lines are passed on at once, a partial
  // line waits for its end (or for finish()).
  void feed(Stream stream, const char* data, size_t n);
  // The stream reached end of file: pass on its partial last line.
  void finish(Stream stream);

  // The last kTailLines lines of both streams, oldest first.
  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  void emit(Stream stream, std::string& batch_console, std::string& batch_file, std::string_view line);
  void flush(Stream stream, std::string& batch_console, std::string& batch_file);

  std::string prefix_;  // "[rank R]: "
  bool bare_results_;   // global rank 0: Note [result lines]
  OutputRouting routing_;
  int file_fd_ = -1;
  std::string pending_[2];  // bytes after the last '\n', per stream
  std::deque<std::string> tail_;
};

}  // namespace nanoddp::dist

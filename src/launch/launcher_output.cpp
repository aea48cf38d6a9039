#include "launch/launcher_output.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "core/error.h"

namespace nanoddp::dist {

OutputRouting OutputRouting::from_flags(int redirects, int tee, const std::string& log_dir, bool console_shown) {
  NANODDP_ASSERT(redirects >= 0 && redirects <= 3 && tee >= 0 && tee <= 3, "unchecked --redirects / --tee");
  OutputRouting r;
  r.log_dir = log_dir;
  // --log_dir with neither flag: keep everything on the console and in the files.
  if (!log_dir.empty() && redirects == 0 && tee == 0) tee = 3;
  for (int s = 0; s < 2; s++) {
    int bit = 1 << s;
    r.console[s] = console_shown && (redirects & bit) == 0;
    r.file[s] = ((redirects | tee) & bit) != 0;
  }
  NANODDP_ASSERT(!r.any_file() || !log_dir.empty(), "file output routed without a log directory");
  return r;
}

void write_fully(int fd, const std::string& text) {
  // Straight to the descriptor: stdio would hold lines back when the console is a pipe or a file,
  // and could split one line across two writes.
  size_t done = 0;
  int stalls = 0;  // waits in a row for a non-blocking descriptor that is full
  while (done < text.size()) {
    ssize_t k = ::write(fd, text.data() + done, text.size() - done);
    if (k < 0 && errno == EINTR) continue;
    // A console inherited non-blocking (a parent set O_NONBLOCK on a shared pipe or terminal) says
    // EAGAIN when full: wait for room, up to 10 s without progress, rather than drop the rest of
    // the batch, maybe mid-line.
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && stalls < 100) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 100) == 0) stalls++;
      continue;
    }
    if (k <= 0) return;  // console gone (EPIPE): the workers' output has nowhere to go; keep running
    done += size_t(k);
    stalls = 0;
  }
}

void launcher_say(const std::string& text) { write_fully(STDERR_FILENO, "nanoddp run: " + text + "\n"); }

WorkerOutput::WorkerOutput(int rank, const OutputRouting& routing, const std::string& log_path)
    : prefix_("[rank " + std::to_string(rank) + "]: "), bare_results_(rank == 0), routing_(routing) {
  // One file per rank and attempt for both streams, truncated: a restart writes attempt_N+1.
  if (routing_.any_file()) {
    file_fd_ = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    NANODDP_CHECK(file_fd_ >= 0, "cannot create the log file {}: {}: check --log_dir", log_path, std::strerror(errno));
  }
}

WorkerOutput::~WorkerOutput() {
  if (file_fd_ >= 0) ::close(file_fd_);
}

// Adds one complete line (without its '\n') to the batches for the console and the file.
void WorkerOutput::emit(Stream stream, std::string& batch_console, std::string& batch_file, std::string_view line) {
  int s = int(stream);
  const bool result = bare_results_ && stream == Stream::Out && line.starts_with('{') && line.ends_with('}');
  if (routing_.console[s]) batch_console.append(result ? "" : prefix_).append(line).push_back('\n');
  if (routing_.file[s] && file_fd_ >= 0) batch_file.append(line).push_back('\n');
  tail_.emplace_back(line);
  if (tail_.size() > kTailLines) tail_.pop_front();
}

// Writes the batches: one write() per destination for everything one read() delivered.
void WorkerOutput::flush(Stream stream, std::string& batch_console, std::string& batch_file) {
  if (!batch_console.empty()) write_fully(stream == Stream::Out ? STDOUT_FILENO : STDERR_FILENO, batch_console);
  if (!batch_file.empty()) write_fully(file_fd_, batch_file);
}

void WorkerOutput::feed(Stream stream, const char* data, size_t n) {
  // Cut complete lines; everything read in one call leaves in one write per destination.
  std::string& pending = pending_[int(stream)];
  std::string batch_console, batch_file;
  std::string_view in(data, n);
  while (!in.empty()) {
    size_t nl = in.find('\n');
    if (nl == std::string_view::npos) {
      pending.append(in);
      break;
    }
    if (pending.empty()) {  // the common case: the line came whole in this read
      emit(stream, batch_console, batch_file, in.substr(0, nl));
    } else {
      pending.append(in.substr(0, nl));
      emit(stream, batch_console, batch_file, pending);
      pending.clear();
    }
    in.remove_prefix(nl + 1);
  }
  // A line that never ends would grow without bound: pass it on in pieces.
  while (pending.size() >= kMaxLine) {
    emit(stream, batch_console, batch_file, std::string_view(pending).substr(0, kMaxLine));
    pending.erase(0, kMaxLine);
  }
  flush(stream, batch_console, batch_file);
}

void WorkerOutput::finish(Stream stream) {
  std::string& pending = pending_[int(stream)];
  if (pending.empty()) return;
  std::string batch_console, batch_file;
  emit(stream, batch_console, batch_file, pending);
  pending.clear();
  flush(stream, batch_console, batch_file);
}

}  // namespace nanoddp::dist

#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace nanoddp::train {

namespace {

// What the holder wrote into the lock file, without its newline; "" when it has not yet.
std::string read_holder(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace

RunLock::RunLock(const std::string& out) {
  const std::string path = (std::filesystem::path(out) / "run.lock").string();
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  NANODDP_CHECK(!ec, "--out {}: cannot create the folder ({}): choose a writable --out", out, ec.message());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  NANODDP_CHECK(fd_ >= 0, "--out {}: cannot open {} ({}): choose a writable --out", out, path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? read_holder(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    NANODDP_CHECK(err == EWOULDBLOCK, "--out {}: cannot lock {} ({}): use a --out on a file system with locks",
                  out, path, std::strerror(err));
    NANODDP_FAIL("--out {} is in use by another run ({}, which holds {}): wait for it to end or stop it, or choose "
                 "another --out", out, holder.empty() ? "a process starting up" : holder, path);
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + host + "\n";
  const bool named = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) == std::ssize(me);
  (void)named;  // best effort: the lock holds whether or not its holder is named
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace nanoddp::train

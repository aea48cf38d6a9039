// What the libFuzzer targets share (docs/fuzzing.md).
//
// The contract every target checks: bad bytes may only end in nanoddp::Error, the "your input is
// wrong" half of our two kinds of failure (core/error.h). A crash, a sanitizer report, an abort
// from NANODDP_ASSERT, a huge allocation (libFuzzer's -malloc_limit_mb) or any other exception is
// a finding. Other exceptions are caught here only to name them before aborting: an exception
// escaping LLVMFuzzerTestOneInput would abort too, but without saying which one it was.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>

#include "core/error.h"

namespace nanoddp::fuzz {

// Runs `body`; nanoddp::Error is the expected answer to bad input, anything else aborts.
template <typename Fn>
void expect_only_errors(Fn&& body) {
  try {
    body();
  } catch (const Error&) {
    // Rejected with a message: what a parser should do.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz finding: exception %s escaped the parser: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
}

// A property that must hold for every input the parser accepted; violating it is a finding.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz finding: %s\n", what);
  std::abort();
}

// The readers under test open a path (and mmap it), so each input is written to a file first. One
// path per process and per role, made once and rewritten for every input: a new file per input
// would litter the temporary directory at thousands of inputs a second. Removed at exit; a crash
// leaves it behind, next to libFuzzer's crash-* file that reproduces it anyway.
class ScratchFile {
 public:
  explicit ScratchFile(const char* role) {
    const char* dir = std::getenv("TMPDIR");
    std::string templ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/nanoddp-fuzz-" + role + "-XXXXXX";
    int fd = ::mkstemp(templ.data());
    if (fd < 0) {
      std::perror("nanoddp fuzz: mkstemp");
      std::abort();
    }
    ::close(fd);
    path_ = templ;
  }
  // A file at exactly `path` (a companion whose name the reader derives from another's), owned
  // the same way: removed at exit.
  struct At {
    std::string path;
  };
  explicit ScratchFile(At at) : path_(std::move(at.path)) {}
  ~ScratchFile() { remove(); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }
  // Replaces the file's contents with `bytes`. Written over the old contents and then cut to size,
  // not truncated first: on ext4, truncating a file to zero and writing it again flushes it to disk
  // at close, which made that the slowest part of a run. A failed write is the test machine's
  // problem, not a finding in the parser: it stops the run with exit status 2, not a crash report.
  void write(std::string_view bytes) const {
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    bool ok = fd >= 0;
    for (size_t done = 0; ok && done < bytes.size();) {
      ssize_t k = ::pwrite(fd, bytes.data() + done, bytes.size() - done, off_t(done));
      ok = k > 0;
      done += ok ? size_t(k) : 0;
    }
    ok = ok && ::ftruncate(fd, off_t(bytes.size())) == 0;
    ok = fd >= 0 && ::close(fd) == 0 && ok;
    if (!ok) {
      std::perror(("nanoddp fuzz: cannot write " + path_).c_str());
      std::exit(2);
    }
  }
  void remove() const { std::remove(path_.c_str()); }

 private:
  std::string path_;
};

// For the readers that mmap their file: once the reader is gone, whether it accepted the file or
// threw, no mapping of the file may be left (a leak that no sanitizer sees: LeakSanitizer tracks
// malloc, not mmap).
inline void require_unmapped(const std::string& path) {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return;  // not Linux, or no /proc: nothing to check with
  char line[4096];
  bool mapped = false;
  while (!mapped && std::fgets(line, sizeof line, maps) != nullptr) mapped = std::strstr(line, path.c_str()) != nullptr;
  std::fclose(maps);
  require(!mapped, "the file is still mapped after its reader is gone");
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace nanoddp::fuzz

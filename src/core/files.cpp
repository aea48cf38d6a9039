#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace nanoddp {

namespace fs = std::filesystem;

std::string read_whole_file(const std::string& path, std::string_view what) {
  const std::string name = what.empty() ? path : fmt::format("{} {}", what, path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  NANODDP_CHECK(fd >= 0, "cannot read {}: {}", name, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  NANODDP_CHECK(::fstat(fd, &st) == 0, "cannot read {}: {}", name, std::strerror(errno));
  NANODDP_CHECK(!S_ISDIR(st.st_mode), "cannot read {}: it is a directory; give a file", name);
  std::string out;
  // The size is a hint only (a pipe or /proc file says 0; a growing file says less): read to EOF.
  // One spare byte, so that a file of the size stat gave ends without the buffer growing.
  out.resize(S_ISREG(st.st_mode) ? size_t(st.st_size) + 1 : 64 * 1024);
  size_t got = 0;
  for (;;) {
    if (got == out.size()) out.resize(out.size() * 2);
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    NANODDP_CHECK(n >= 0, "cannot read {}: {}", name, std::strerror(errno));
    if (n == 0) break;
    got += size_t(n);
  }
  out.resize(got);
  return out;
}

void write_file_atomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    NANODDP_CHECK(out.good(), "cannot write {}: {}", tmp, std::strerror(errno));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out.good()) {
      const std::string why = std::strerror(errno);
      out.close();
      fs::remove(tmp, ec);
      NANODDP_FAIL("cannot write {}: {} (disk full?)", tmp, why);
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    NANODDP_FAIL("cannot write {}: {}; if it is a directory, remove it or choose another file name", path,
                 ec.message());
  }
}

}  // namespace nanoddp

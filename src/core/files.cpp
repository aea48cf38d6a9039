#include "core/files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace nanoddp {

namespace fs = std::filesystem;

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

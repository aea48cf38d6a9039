#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace nanoddp {

void internal_failure(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "nanoddp: internal error (a bug, please report it): %s failed at %s:%d%s%s\n", expr,
               file, line, msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace nanoddp

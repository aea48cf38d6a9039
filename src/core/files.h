// Small file helpers every layer uses.
#pragma once

#include <string>

namespace nanoddp {

// Writes `data` to PATH.tmp and renames it to `path`, so `path` is never half-written; a failure
// removes PATH.tmp again and throws nanoddp::Error naming the file (disk full, `path` a directory).
void write_file_atomically(const std::string& path, const std::string& data);

}  // namespace nanoddp

// Small file helpers every layer uses.
#pragma once

#include <string>
#include <string_view>

namespace nanoddp {

// Writes `data` to PATH.tmp and renames it to `path`, so `path` is never half-written; a failure
// removes PATH.tmp again and throws nanoddp::Error naming the file (disk full, `path` a directory).
void write_file_atomically(const std::string& path, const std::string& data);

// The whole of the file at `path`, in one buffer sized from the file. Throws nanoddp::Error
// "cannot read WHAT PATH: REASON" when it is missing, unreadable or a directory (which would
// otherwise read as empty); `what` says what the file is to the user ("--input", "tokenizer
// sidecar"), or is "" to name only the path.
std::string read_whole_file(const std::string& path, std::string_view what = "");

}  // namespace nanoddp

// Checks of the paths a command is given, before any work: each problem is one error that names
// the flag, the path and what is wrong with it ("--out /proc/run: cannot create anything under /proc
// ..."), where the library's own error would say only "filesystem error: cannot create directories:
// No such file or directory [/proc/run]", late, after the work it was meant to save. Nothing is
// created or changed on disk by the checks.
#pragma once

#include <string>

namespace nanoddp::cli {

enum class PathKind { File, Directory };

// A path a command will write: a file, or a directory it creates if missing. Refused: an empty or
// too long path; a path that exists and is not of `kind`; a missing parent whose nearest existing
// ancestor is not a directory, not writable or on a pseudo file system (/proc, /sys).
void check_output_path(const std::string& flag, const std::string& path, PathKind kind);

// A path a command will read: it must exist, be of `kind` and be readable.
void check_input_path(const std::string& flag, const std::string& path, PathKind kind);
// The same for a path that may be a file or a directory.
void check_input_exists(const std::string& flag, const std::string& path);
// A file or directory of text to read (data prepare's --input): as check_input_exists, and not on a
// kernel file system, whose walk would read thousands of generated files (or none) as documents.
void check_text_input(const std::string& flag, const std::string& path);

// Refuses to replace an existing `file` that belongs to a checkpoint, a run folder or a prepared
// dataset (Note [files that belong] in path_checks.cpp): one error naming `flag` and `given` (what
// the user wrote; `file` is it or a file written beside it), the file, what it belongs to and
// --overwrite, which a command passes by not calling this.
void check_not_owned(const std::string& flag, const std::string& given, const std::string& file);

// The checkpoint a command reads from what the user named (a checkpoint directory, or a run's OUT
// for its newest): check_input_path, then train::resolve_checkpoint, whose error then names the flag.
std::string resolve_checkpoint_flag(const std::string& flag, const std::string& path);

}  // namespace nanoddp::cli

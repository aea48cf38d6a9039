#include "cli/path_checks.h"

#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "data/dataset.h"
#include "train/checkpoint.h"

namespace nanoddp::cli {

namespace {

namespace fs = std::filesystem;

const char* kind_name(PathKind kind) { return kind == PathKind::File ? "a file" : "a directory"; }

// What the path is, in words, for "X is a directory, not a file".
std::string what_is(const fs::path& p) {
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (fs::is_directory(st)) return "a directory";
  if (fs::is_regular_file(st)) return "a file";
  return "neither a file nor a directory";
}

void check_length(const std::string& flag, const std::string& path) {
  NANODDP_CHECK(!path.empty(), "{} is empty; give a path", flag);
  NANODDP_CHECK(path.size() < PATH_MAX, "{} is too long: {} characters, and a path has at most {}", flag, path.size(),
                PATH_MAX - 1);
  for (const auto& part : fs::path(path)) {
    const std::string name = part.string();
    NANODDP_CHECK(name.size() <= NAME_MAX, "{} {}...: the name '{}...' is too long: {} characters, and one name in a "
                  "path has at most {}", flag, path.substr(0, 60), name.substr(0, 40), name.size(), NAME_MAX);
  }
}

// procfs and sysfs hold the kernel's files: nothing can be created in them.
bool on_pseudo_file_system(const fs::path& dir) {
  struct statfs st {};
  if (::statfs(dir.c_str(), &st) != 0) return false;
  return st.f_type == PROC_SUPER_MAGIC || st.f_type == SYSFS_MAGIC;
}

// The directory a new entry at `p` would be created in, after creating any missing parents: the
// deepest ancestor that exists.
fs::path nearest_existing_ancestor(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec).parent_path();
  while (!a.empty() && !fs::exists(a, ec) && a != a.root_path()) a = a.parent_path();
  return a;
}

// Note [files that belong]: `export --out` and `tokenizer train --out` write a file the user names
// (and, beside it, a tokenizer copy or sidecar), replacing whatever is there. A file that another
// nanoddp folder is made of is not the user's to lose that way, so it is replaced only with
// --overwrite. A folder is recognised by its own marks, and only the file names it is made of
// count, so that a user's other files in the same folder stay theirs:
//  - a checkpoint folder holds DONE, or meta.json beside model.safetensors (a save still in its
//    step_N.tmp); its files are model.safetensors, optim_rank<r>.safetensors, meta.json and DONE;
//  - a run folder holds run.json; its files are run.json, metrics.jsonl and run.lock;
//  - a prepared dataset holds a meta.json of format nanoddp-dataset (data/dataset.h); its files
//    are its shards, meta.json and its tokenizer copy (data::is_dataset_file_name).
// What `file` belongs to ("the checkpoint in DIR"), or "" when nothing.
std::string owner_of(const fs::path& file) {
  std::error_code ec;
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  const std::string name = file.filename().string();
  const train::CheckpointFiles ckpt;
  static const std::regex optimizer(R"(optim_rank[0-9]+\.safetensors)");
  const bool checkpoint_dir = fs::exists(dir / "DONE", ec) ||
                              (fs::exists(dir / ckpt.meta, ec) && fs::exists(dir / ckpt.model, ec));
  const bool checkpoint_file = name == ckpt.model || name == ckpt.meta || name == "DONE" ||
                               std::regex_match(name, optimizer);
  if (checkpoint_dir && checkpoint_file)
    return fmt::format("the checkpoint in {}", dir.string());
  if (fs::exists(dir / "run.json", ec) && (name == "run.json" || name == "metrics.jsonl" || name == "run.lock"))
    return fmt::format("the run folder {}", dir.string());
  if (data::is_dataset_file_name(name) && data::is_prepared_dataset(dir.string()))
    return fmt::format("the dataset prepared in {}", dir.string());
  return "";
}

}  // namespace

void check_not_owned(const std::string& flag, const std::string& given, const std::string& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return;
  const std::string owner = owner_of(fs::path(file));
  if (owner.empty()) return;
  NANODDP_FAIL("{} {} would overwrite {}, a file of {}; choose another {}, or pass --overwrite to replace it", flag,
               given, file, owner, flag);
}

void check_output_path(const std::string& flag, const std::string& path, PathKind kind) {
  check_length(flag, path);
  std::error_code ec;
  const fs::path p(path);
  if (fs::exists(p, ec)) {
    const bool right = kind == PathKind::File ? fs::is_regular_file(p, ec) : fs::is_directory(p, ec);
    NANODDP_CHECK(right, "{} {} is {}, not {}; choose another {}", flag, path, what_is(p), kind_name(kind), flag);
    const fs::path dir = kind == PathKind::File ? fs::absolute(p, ec).parent_path() : p;
    NANODDP_CHECK(!on_pseudo_file_system(dir), "{} {} is on a kernel file system (/proc, /sys), where nothing can be "
                  "written; choose another {}", flag, path, flag);
    // Root may write where the mode says no; a read-only file system still stops it (EROFS).
    NANODDP_CHECK(::access(p.c_str(), W_OK) == 0, "{} {}: cannot write it: {}; choose another {}", flag, path,
                  std::strerror(errno), flag);
    return;
  }
  const fs::path parent = nearest_existing_ancestor(p);
  NANODDP_CHECK(fs::is_directory(parent, ec), "{} {}: {} is {}, not a directory; choose another {}", flag, path,
                parent.string(), what_is(parent), flag);
  NANODDP_CHECK(!on_pseudo_file_system(parent), "{} {}: nothing can be created under {}, a kernel file system; "
                "choose another {}", flag, path, parent.string(), flag);
  NANODDP_CHECK(::access(parent.c_str(), W_OK | X_OK) == 0, "{} {}: cannot create it in {}: {}; choose another {}",
                flag, path, parent.string(), std::strerror(errno), flag);
}

void check_input_exists(const std::string& flag, const std::string& path) {
  check_length(flag, path);
  std::error_code ec;
  NANODDP_CHECK(fs::exists(path, ec), "{} {} does not exist{}", flag, path, ec ? " (" + ec.message() + ")" : "");
  NANODDP_CHECK(::access(path.c_str(), R_OK) == 0, "{} {}: cannot read it: {}", flag, path, std::strerror(errno));
}

void check_input_path(const std::string& flag, const std::string& path, PathKind kind) {
  check_input_exists(flag, path);
  std::error_code ec;
  const fs::path p(path);
  const bool right = kind == PathKind::File ? fs::is_regular_file(p, ec) : fs::is_directory(p, ec);
  NANODDP_CHECK(right, "{} {} is {}, not {}", flag, path, what_is(p), kind_name(kind));
}

void check_text_input(const std::string& flag, const std::string& path) {
  check_input_exists(flag, path);
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  NANODDP_CHECK(!on_pseudo_file_system(fs::is_directory(p, ec) ? p : p.parent_path()), "{} {} is on a kernel file "
                "system (/proc, /sys), whose files are the kernel's state, not text; give the corpus's files or "
                "folder", flag, path);
}

std::string resolve_checkpoint_flag(const std::string& flag, const std::string& path) {
  check_input_path(flag, path, PathKind::Directory);
  try {
    return train::resolve_checkpoint(path);
  } catch (const Error& e) {
    NANODDP_FAIL("{} {}", flag, e.what());
  }
}

}  // namespace nanoddp::cli

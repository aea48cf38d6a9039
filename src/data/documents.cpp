#include "data/documents.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "data/dataset.h"
#include "data/input_kind.h"
#include "data/parquet.h"

namespace nanoddp::data {

namespace fs = std::filesystem;

namespace {

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// The regular files below `dir` a walk would read, hidden ones left out; for the warning.
int64_t count_files(const fs::path& dir) {
  int64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!hidden(it->path())) n += it->is_regular_file(ec);
    else if (it->is_directory(ec)) it.disable_recursion_pending();
  }
  return n;
}

// Note [not text]: a corpus folder often holds what nanoddp made of it. `data prepare --input corpus
// --out corpus/ds` (or --out corpus) run a second time, or `tokenizer train --input corpus`, would
// read the earlier dataset's meta.json, shards and tokenizer copy as documents, and with the bytes
// tokenizer train on that binary without any error. So a directory walk leaves out:
//  - in a directory that is a prepared dataset (dataset.h's is_prepared_dataset), or one of the
//    caller's `skip` directories (prepare's --out), the dataset's own files (is_dataset_file_name)
//    and nothing else: --out may be the corpus folder itself, whose other files are the user's text;
//  - a staging folder an interrupted prepare left behind (is_prepare_staging_dir: it holds nothing
//    but dataset files), whole; the staging folder of a running prepare is hidden, or made after
//    the walk;
//  - tokenizer files (*.tiktoken and their *.tiktoken.json sidecars), such as the one `tokenizer
//    train --out corpus/tok.tiktoken` wrote into the corpus on its first run.
// A file named as an input is always read. The files left out are counted and named once on stderr.

// The files of input directory `dir` to read, in sorted order. Adds what it leaves out (Note [not
// text]) to `left_out` ("PATH (why: N files)") and `skipped`.
std::vector<std::string> walk(const std::string& dir, const std::vector<fs::path>& skip,
                              std::vector<std::string>& left_out, int64_t& skipped) {
  // Per directory that holds dataset files: why they are not text (null: they are), and how many.
  struct Holder {
    const char* why = nullptr;
    int64_t files = 0;
  };
  std::map<fs::path, Holder> holders;
  auto holder = [&](const fs::path& d) -> Holder& {
    auto [it, fresh] = holders.try_emplace(d);
    if (fresh) {
      std::error_code ec;
      for (const auto& s : skip)
        if (fs::equivalent(d, s, ec)) it->second.why = "the dataset files of the output directory";
      if (it->second.why == nullptr && is_prepared_dataset(d.string()))
        it->second.why = "the files of the dataset prepared into it";
    }
    return it->second;
  };
  int64_t tokenizer_files = 0;  // *.tiktoken(.json) anywhere below `dir`
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (hidden(p)) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory()) {
      if (is_prepare_staging_dir(p.string())) {
        const int64_t n = count_files(p);
        if (n > 0) {
          left_out.push_back(fmt::format("{} (a staging folder an interrupted data prepare left: {} file{})",
                                         p.string(), n, n == 1 ? "" : "s"));
        }
        skipped += n;
        it.disable_recursion_pending();
      }
      continue;
    }
    if (!it->is_regular_file()) continue;
    const std::string name = p.filename().string();
    if (is_dataset_file_name(name)) {
      Holder& h = holder(p.parent_path());
      if (h.why != nullptr) {
        h.files++;
        continue;
      }
    }
    if (name.ends_with(".tiktoken") || name.ends_with(".tiktoken.json")) {
      tokenizer_files++;
      continue;
    }
    found.push_back(p.string());
  }
  NANODDP_CHECK(!ec, "cannot list directory {}: {}", dir, ec.message());
  for (const auto& [d, h] : holders) {
    if (h.files == 0) continue;
    left_out.push_back(fmt::format("{} ({}: {})", d.string(), h.why, h.files));
    skipped += h.files;
  }
  if (tokenizer_files > 0)
    left_out.push_back(fmt::format("{} (tokenizer files, *.tiktoken and *.tiktoken.json: {})", dir, tokenizer_files));
  skipped += tokenizer_files;
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

TextSplit parse_text_split(const std::string& name) {
  if (name == "file") return TextSplit::kFile;
  if (name == "paragraphs") return TextSplit::kParagraphs;
  if (name == "lines") return TextSplit::kLines;
  NANODDP_FAIL("--text_split {} is not one of file (a text file is one document), paragraphs (blank lines separate "
               "documents), lines (every line is a document)", name);
}

DocumentReader::DocumentReader(const std::vector<std::string>& inputs, TextSplit split,
                               const std::vector<std::string>& skip)
    : split_(split) {
  NANODDP_CHECK(!inputs.empty(), "no input files given");
  // Only directories that exist can hold files; fs::equivalent then matches any spelling of them.
  std::vector<fs::path> skip_dirs;
  for (const auto& s : skip) {
    std::error_code ec;
    if (fs::is_directory(s, ec)) skip_dirs.emplace_back(s);
  }
  std::vector<std::string> left_out;  // what the walks did not read, and why
  for (const auto& input : inputs) {
    std::error_code ec;
    const auto status = fs::status(input, ec);
    NANODDP_CHECK(!ec && fs::exists(status), "input {} does not exist", input);
    if (!fs::is_directory(status)) {
      files_.push_back(input);
      continue;
    }
    const int64_t skipped_before = skipped_files_;
    const auto notes_before = static_cast<std::ptrdiff_t>(left_out.size());
    const std::vector<std::string> found = walk(input, skip_dirs, left_out, skipped_files_);
    NANODDP_CHECK(!found.empty(), "input directory {} contains no files{}", input,
                  skipped_files_ == skipped_before
                      ? ""
                      : fmt::format(" but the {} that nanoddp wrote ({}); give the text files or their directories",
                                    skipped_files_ - skipped_before,
                                    fmt::join(left_out.begin() + notes_before, left_out.end(), "; ")));
    files_.insert(files_.end(), found.begin(), found.end());
  }
  if (skipped_files_ > 0) {
    constexpr size_t kNamed = 4;
    const size_t more = left_out.size() > kNamed ? left_out.size() - kNamed : 0;
    left_out.resize(left_out.size() - more);
    log::warn("not reading {} file{} that nanoddp wrote into the input directories, as they are not text: {}{}; to "
              "read one anyway, give the file itself as an input", skipped_files_, skipped_files_ == 1 ? "" : "s",
              fmt::join(left_out, "; "), more > 0 ? fmt::format(" and {} more folders", more) : "");
  }
}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::open_next_file() {
  if (in_.is_open()) in_.close();
  parquet_.reset();
  if (file_index_ >= files_.size()) return false;
  const std::string& path = files_[file_index_++];
  if (input_kind(path) == InputKind::kParquet) {
    parquet_ = std::make_unique<ParquetTextReader>(path);
    rows_.clear();
    row_group_ = row_ = 0;
    rows_before_ = 0;
    return true;
  }
  in_.open(path, std::ios::binary);
  NANODDP_CHECK(in_.is_open(), "cannot read {}: {}", path, std::strerror(errno));
  jsonl_ = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  whole_file_done_ = false;
  line_ = 0;
  lines_read_ = 0;
  return true;
}

bool DocumentReader::next(std::string& text) {
  for (;;) {
    if (!parquet_ && !in_.is_open() && !open_next_file()) return false;
    if (parquet_) {
      if (next_row(text)) return true;
      parquet_.reset();
      continue;
    }
    const std::string& path = files_[file_index_ - 1];
    if (!jsonl_ && split_ != TextSplit::kFile) {
      if (next_piece(text)) return true;
      in_.close();
      continue;
    }
    if (!jsonl_) {
      if (whole_file_done_) {
        in_.close();
        continue;
      }
      // Not `ss << in_.rdbuf()`: a read error (EIO) there looks like the end of the file, and the
      // document would be cut short without a word.
      text = read_whole_file(path);
      whole_file_done_ = true;
      return true;
    }
    if (!std::getline(in_, line_buf_)) {
      NANODDP_CHECK(!in_.bad(), "cannot read {}: {}", path, std::strerror(errno));
      in_.close();
      continue;
    }
    line_++;
    if (blank(line_buf_)) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line_buf_);
    } catch (const nlohmann::json::exception& e) {
      NANODDP_FAIL("{}:{}: not valid JSON ({})", path, line_, e.what());
    }
    auto it = j.is_object() ? j.find("text") : j.end();
    NANODDP_CHECK(it != j.end() && it->is_string(), "{}:{}: expected a JSON object with a \"text\" string", path,
                  line_);
    text = it->get<std::string>();
    return true;
  }
}

bool DocumentReader::next_piece(std::string& text) {
  const std::string& path = files_[file_index_ - 1];
  text.clear();
  int64_t first = 0;  // line number of the piece's first line
  while (std::getline(in_, line_buf_)) {
    lines_read_++;
    if (blank(line_buf_)) {
      if (text.empty()) continue;  // blank lines before a piece
      break;                       // the blank line that ends a paragraph
    }
    if (text.empty()) first = lines_read_;
    else text += '\n';
    text += line_buf_;
    if (split_ == TextSplit::kLines) break;
  }
  NANODDP_CHECK(!in_.bad(), "cannot read {}: {}", path, std::strerror(errno));
  if (text.empty()) return false;
  line_ = first;
  return true;
}

bool DocumentReader::next_row(std::string& text) {
  for (;;) {
    while (row_ < rows_.size()) {
      auto& row = rows_[row_++];
      if (!row) continue;  // a null: no document
      text = std::move(*row);
      return true;
    }
    if (row_group_ >= parquet_->row_groups()) return false;
    rows_before_ += static_cast<int64_t>(rows_.size());
    rows_ = parquet_->read_row_group(row_group_++);
    row_ = 0;
  }
}

std::string DocumentReader::where() const {
  if (file_index_ == 0) return "";
  const std::string& path = files_[file_index_ - 1];
  if (parquet_) return fmt::format("{} row {}", path, rows_before_ + static_cast<int64_t>(row_));
  return jsonl_ || split_ != TextSplit::kFile ? path + ":" + std::to_string(line_) : path;
}

bool read_document_batch(DocumentReader& reader, std::vector<std::string>& docs, int64_t max_bytes) {
  docs.clear();
  int64_t bytes = 0;
  std::string text;
  while (bytes < max_bytes && reader.next(text)) {
    bytes += static_cast<int64_t>(text.size());
    docs.push_back(std::move(text));
  }
  return !docs.empty();
}

}  // namespace nanoddp::data

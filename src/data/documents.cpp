#include "data/documents.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace nanoddp::data {

namespace fs = std::filesystem;

namespace {

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

}  // namespace

TextSplit parse_text_split(const std::string& name) {
  if (name == "file") return TextSplit::kFile;
  if (name == "paragraphs") return TextSplit::kParagraphs;
  if (name == "lines") return TextSplit::kLines;
  NANODDP_FAIL("--text_split {} is not one of file (a text file is one document), paragraphs (blank lines separate "
               "documents), lines (every line is a document)", name);
}

DocumentReader::DocumentReader(const std::vector<std::string>& inputs, TextSplit split) : split_(split) {
  NANODDP_CHECK(!inputs.empty(), "no input files given");
  for (const auto& input : inputs) {
    std::error_code ec;
    const auto status = fs::status(input, ec);
    NANODDP_CHECK(!ec && fs::exists(status), "input {} does not exist", input);
    if (!fs::is_directory(status)) {
      files_.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(input, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path().string());
    }
    NANODDP_CHECK(!ec, "cannot list directory {}: {}", input, ec.message());
    std::sort(found.begin(), found.end());
    NANODDP_CHECK(!found.empty(), "input directory {} contains no files", input);
    files_.insert(files_.end(), found.begin(), found.end());
  }
}

bool DocumentReader::open_next_file() {
  if (in_.is_open()) in_.close();
  if (file_index_ >= files_.size()) return false;
  const std::string& path = files_[file_index_++];
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
    if (!in_.is_open() && !open_next_file()) return false;
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
      std::ostringstream ss;
      ss << in_.rdbuf();
      NANODDP_CHECK(!in_.bad(), "cannot read {}: {}", path, std::strerror(errno));
      text = std::move(ss).str();
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

std::string DocumentReader::where() const {
  if (file_index_ == 0) return "";
  const std::string& path = files_[file_index_ - 1];
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

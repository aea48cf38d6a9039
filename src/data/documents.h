// Reading a corpus one document at a time, so that nothing ever holds a whole corpus in memory.
//
// Inputs are files and directories. A directory stands for every regular file below it (recursively,
// in sorted path order, skipping names that start with '.'). A file named *.jsonl holds one JSON
// object per line whose "text" string is a document (blank lines are skipped); any other file is one
// document, its bytes as they are.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace nanoddp::data {

class DocumentReader {
 public:
  // Throws nanoddp::Error naming an input that does not exist, or when there are no files at all.
  explicit DocumentReader(const std::vector<std::string>& inputs);

  // The next document into `text`; false at the end. Throws nanoddp::Error naming the file (and
  // line) of an unreadable file or a bad JSONL line.
  bool next(std::string& text);

  const std::vector<std::string>& files() const { return files_; }
  // "FILE" or "FILE:LINE" of the document last returned.
  std::string where() const;

 private:
  bool open_next_file();

  std::vector<std::string> files_;
  size_t file_index_ = 0;     // files_[file_index_ - 1] is open (or done)
  std::ifstream in_;
  bool jsonl_ = false;
  bool whole_file_done_ = false;
  int64_t line_ = 0;          // JSONL: line number of the document last returned
  std::string line_buf_;
};

// Reads up to max_bytes of documents (at least one when any is left) into `docs`, replacing its
// contents. Returns false when the reader had nothing left.
bool read_document_batch(DocumentReader& reader, std::vector<std::string>& docs, int64_t max_bytes);

}  // namespace nanoddp::data

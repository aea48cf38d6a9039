// Reading a corpus one document at a time, so that nothing ever holds a whole corpus in memory.
//
// Inputs are files and directories. A directory stands for every regular file below it (recursively,
// in sorted path order, skipping names that start with '.' and what nanoddp wrote there: see Note
// [not text] in documents.cpp). A file named *.jsonl holds one JSON
// object per line whose "text" string is a document (blank lines are skipped). Any other file is plain
// text, cut into documents by TextSplit: by default the whole file is one document, its bytes as they
// are; `paragraphs` cuts it at blank lines (lines of only spaces, tabs and '\r'), which is how
// nanoGPT's input.txt and most prose separate speeches and paragraphs; `lines` makes every non-blank
// line a document. Paragraphs and lines keep their text as it is, less the newline that ends them.
// A parquet file (found by its magic bytes, whatever its name) holds one document per row of its
// "text" column, as nanochat's FineWeb-edu shards do; null rows are skipped. Any other binary file
// is refused when it is opened (Note [binary input] in input_kind.h).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nanoddp::data {

class ParquetTextReader;

// How a plain text file is cut into documents (JSONL files are always one document per line).
enum class TextSplit { kFile, kParagraphs, kLines };
// "file" | "paragraphs" | "lines"; throws nanoddp::Error naming the choices otherwise.
TextSplit parse_text_split(const std::string& name);

class DocumentReader {
 public:
  // Throws nanoddp::Error naming an input that does not exist, or when there are no files at all.
  // A directory walk leaves out nanoddp's own files (Note [not text] in documents.cpp), among them
  // the dataset files of the `skip` directories (data prepare's --out); what it leaves out is said
  // once on stderr.
  explicit DocumentReader(const std::vector<std::string>& inputs, TextSplit split = TextSplit::kFile,
                          const std::vector<std::string>& skip = {});
  ~DocumentReader();

  // The next document into `text`; false at the end. Throws nanoddp::Error naming the file (and
  // line) of an unreadable, binary or damaged file or a bad JSONL line.
  bool next(std::string& text);

  const std::vector<std::string>& files() const { return files_; }
  // "FILE", "FILE:LINE" or "FILE row N" (parquet) of the document last returned.
  std::string where() const;

 private:
  bool open_next_file();

  bool next_piece(std::string& text);  // a paragraph or line of a plain text file
  bool next_row(std::string& text);    // a row of a parquet file

  std::unique_ptr<ParquetTextReader> parquet_;  // the open file, when it is parquet
  std::vector<std::optional<std::string>> rows_;  // its row group being read
  size_t row_group_ = 0;                          // row groups read so far
  size_t row_ = 0;                                // rows_[row_] is next
  int64_t rows_before_ = 0;                       // rows of the file before rows_

  std::vector<std::string> files_;
  int64_t skipped_files_ = 0;  // files the directory walks left out as not text (Note [not text])
  TextSplit split_ = TextSplit::kFile;
  size_t file_index_ = 0;     // files_[file_index_ - 1] is open (or done)
  std::ifstream in_;
  bool jsonl_ = false;
  bool whole_file_done_ = false;
  int64_t line_ = 0;          // JSONL, paragraphs, lines: line number where the document last returned starts
  int64_t lines_read_ = 0;    // paragraphs, lines: lines of the open file read so far
  std::string line_buf_;
};

// Reads up to max_bytes of documents (at least one when any is left) into `docs`, replacing its
// contents. Returns false when the reader had nothing left.
bool read_document_batch(DocumentReader& reader, std::vector<std::string>& docs, int64_t max_bytes);

}  // namespace nanoddp::data

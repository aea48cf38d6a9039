// Reading one string column (nanochat's `text`) of a parquet file, one row group at a time: enough
// of the format for the FineWeb-edu shards nanochat trains on, written from the format's
// specification (no parquet library).
//
// What it reads: the footer (FileMetaData in thrift's compact protocol, see thrift_compact.h); a
// top-level BYTE_ARRAY column, required or optional (nulls come back as std::nullopt); dictionary
// pages and data pages v1 and v2; the PLAIN and dictionary (PLAIN_DICTIONARY, RLE_DICTIONARY)
// encodings; RLE/bit-packed definition levels; pages UNCOMPRESSED, SNAPPY or ZSTD. Anything
// else (nested columns, DELTA_* encodings, other codecs, encryption) and every malformed file is one
// nanoddp::Error naming the file and what to do. Memory holds one column chunk and its values.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace nanoddp::data {

class ParquetTextReader {
 public:
  // Opens `path` and reads its footer. Throws nanoddp::Error naming the file when it is not a
  // readable parquet file or has no string column `column` (the message lists its columns).
  explicit ParquetTextReader(std::string path, std::string column = "text");

  int64_t num_rows() const { return num_rows_; }
  size_t row_groups() const { return chunks_.size(); }
  // The values of row group `g` in row order, null values as std::nullopt.
  std::vector<std::optional<std::string>> read_row_group(size_t g);

  // The pages read so far, by kind; tests check that a writer made the kinds they mean to cover.
  struct PageCounts {
    int64_t dictionary = 0, plain = 0, dictionary_encoded = 0, v1 = 0, v2 = 0;
  };
  const PageCounts& pages_read() const { return pages_; }

  // Parsed from the footer; public for the page reader in parquet.cpp.
  struct Chunk {
    int64_t rows = 0;                 // the row group's rows
    int64_t codec = 0;                // CompressionCodec
    int64_t num_values = 0;           // values in the chunk, nulls included
    int64_t start = 0, bytes = 0;     // [start, start + bytes) of the file: its pages
  };

 private:
  void read_footer();

  std::string path_, column_;
  std::ifstream in_;
  int64_t file_size_ = 0;
  int64_t num_rows_ = 0;
  int max_def_ = 0;                   // 1: the column is optional (definition levels present)
  std::vector<Chunk> chunks_;         // the column's chunk in each row group
  PageCounts pages_;
};

}  // namespace nanoddp::data

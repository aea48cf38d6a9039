// The parquet reader (data/parquet.h): files written by an independent writer (nodejs-polars, run
// by tests/data/write_parquet.mjs) read back to the texts they were given, nulls included, for every
// codec and for PLAIN and dictionary pages over several row groups and pages; data pages v2 (which
// polars does not write) from a small writer here; every damaged file one nanoddp::Error naming it;
// and data prepare on a parquet shard, as nanochat's are.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/documents.h"
#include "data/input_kind.h"
#include "data/parquet.h"
#include "data/prepare.h"
#include "data/thrift_compact.h"
#include "data_test_util.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

using testing::ScratchDir;
using Rows = std::vector<std::optional<std::string>>;

// Every row of the file, row group after row group.
Rows read_all(ParquetTextReader& r) {
  Rows all;
  for (size_t g = 0; g < r.row_groups(); g++) {
    Rows part = r.read_row_group(g);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// Texts for the writer: unique ones (long, short, empty, Unicode of many scripts, adversarial
// strings, a null every fifth row) and a few repeated ones with nulls, so that polars chooses PLAIN
// pages for the first and dictionary pages for the second.
std::pair<Rows, Rows> writer_texts() {
  Rows unique;
  for (auto& d : testing::generated_documents(600, 15, 5)) unique.emplace_back(d);
  for (auto& s : testing::adversarial_strings()) unique.emplace_back(s);
  unique.emplace_back(testing::random_unicode_text(3000, 9));
  unique.emplace_back("");
  for (size_t i = 4; i < unique.size(); i += 5) unique[i] = std::nullopt;
  Rows repeated;
  const char* few[] = {"alpha", "beta gamma", "", "δέλτα 🙂"};
  for (int i = 0; i < 700; i++) repeated.emplace_back(i % 7 == 3 ? std::nullopt : std::optional<std::string>(few[i % 4]));
  return {unique, repeated};
}

nlohmann::json to_json(const Rows& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows) j.push_back(r ? nlohmann::json(*r) : nlohmann::json(nullptr));
  return j;
}

// A small parquet writer for what polars does not write: data pages v2 (levels uncompressed before
// the values, values compressed or not per page). One row group of columns id (INT64, not read)
// and text (optional BYTE_ARRAY, PLAIN), pages of `page_rows` rows.
class MiniWriter {
 public:
  std::string write(const Rows& rows, size_t page_rows, bool zstd) {
    std::string pages;
    for (size_t begin = 0, n = 0; begin < rows.size(); begin += page_rows, n++)
      pages += page(Rows(rows.begin() + begin, rows.begin() + std::min(rows.size(), begin + page_rows)),
                    zstd && n % 2 == 1);
    out_.clear();
    begin_struct();
    put_int(1, 1);  // version
    field(2, kCtList);
    out_ += static_cast<char>(3 << 4 | kCtStruct);
    element("schema", -1, -1, 2);
    element("id", 2, 0, 0);
    element("text", 6, 1, 0);
    put_int(3, static_cast<int64_t>(rows.size()), kCtI64);
    field(4, kCtList);
    out_ += static_cast<char>(1 << 4 | kCtStruct);
    begin_struct();  // RowGroup
    field(1, kCtList);
    out_ += static_cast<char>(2 << 4 | kCtStruct);
    chunk("id", 2, 0, 4, 0, 0);
    chunk("text", 6, zstd ? 6 : 0, 4, static_cast<int64_t>(pages.size()), static_cast<int64_t>(rows.size()));
    put_int(2, static_cast<int64_t>(pages.size()), kCtI64);
    put_int(3, static_cast<int64_t>(rows.size()), kCtI64);
    end_struct();
    end_struct();
    const std::string meta = out_;
    std::string file = "PAR1" + pages + meta;
    for (int i = 0; i < 4; i++) file += static_cast<char>(meta.size() >> (8 * i));
    return file + "PAR1";
  }

 private:
  void varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) out_ += static_cast<char>((v & 0x7f) | 0x80);
    out_ += static_cast<char>(v);
  }
  void field(int16_t id, uint8_t type) {
    out_ += static_cast<char>((id - last_) << 4 | type);  // ids here rise by at most 15
    last_ = id;
  }
  void put_int(int16_t id, int64_t v, uint8_t type = kCtI32) {
    field(id, type);
    varint(static_cast<uint64_t>(v) << 1 ^ static_cast<uint64_t>(v >> 63));
  }
  void put_string(int16_t id, const std::string& s) {
    field(id, kCtBinary);
    varint(s.size());
    out_ += s;
  }
  void begin_struct() {
    saved_.push_back(last_);
    last_ = 0;
  }
  void end_struct() {
    out_ += '\0';
    last_ = saved_.back();
    saved_.pop_back();
  }
  void element(const std::string& name, int type, int repetition, int children) {
    begin_struct();
    if (type >= 0) put_int(1, type);
    if (repetition >= 0) put_int(3, repetition);
    put_string(4, name);
    if (children > 0) put_int(5, children);
    end_struct();
  }
  void chunk(const std::string& name, int type, int codec, int64_t offset, int64_t bytes, int64_t values) {
    begin_struct();
    put_int(2, offset, kCtI64);
    field(3, kCtStruct);
    begin_struct();
    put_int(1, type);
    field(3, kCtList);
    out_ += static_cast<char>(1 << 4 | kCtBinary);
    varint(name.size());
    out_ += name;
    put_int(4, codec);
    put_int(5, values, kCtI64);
    put_int(6, bytes, kCtI64);
    put_int(7, bytes, kCtI64);
    put_int(9, offset, kCtI64);
    end_struct();
    end_struct();
  }
  // A data page v2: header, definition levels (one bit-packed run), PLAIN values.
  std::string page(const Rows& rows, bool compress) {
    std::string levels, values;
    std::swap(out_, levels);
    varint((rows.size() + 7) / 8 << 1 | 1);
    std::swap(out_, levels);
    levels.resize(levels.size() + (rows.size() + 7) / 8, '\0');
    int nulls = 0;
    for (size_t i = 0; i < rows.size(); i++) {
      if (!rows[i]) {
        nulls++;
        continue;
      }
      levels[levels.size() - (rows.size() + 7) / 8 + i / 8] |= static_cast<char>(1 << (i % 8));
      for (int b = 0; b < 4; b++) values += static_cast<char>(rows[i]->size() >> (8 * b));
      values += *rows[i];
    }
    std::string stored = values;
    if (compress) {
      stored.resize(ZSTD_compressBound(values.size()));
      stored.resize(ZSTD_compress(stored.data(), stored.size(), values.data(), values.size(), 3));
    }
    std::string header;
    std::swap(out_, header);
    begin_struct();
    put_int(1, 3);  // DATA_PAGE_V2
    put_int(2, static_cast<int64_t>(levels.size() + values.size()));
    put_int(3, static_cast<int64_t>(levels.size() + stored.size()));
    field(8, kCtStruct);
    begin_struct();
    put_int(1, static_cast<int64_t>(rows.size()));
    put_int(2, nulls);
    put_int(3, static_cast<int64_t>(rows.size()));
    put_int(4, 0);  // PLAIN
    put_int(5, static_cast<int64_t>(levels.size()));
    put_int(6, 0);
    field(7, compress ? kCtTrue : kCtFalse);
    end_struct();
    end_struct();
    std::swap(out_, header);
    return header + levels + stored;
  }

  std::string out_;
  int16_t last_ = 0;
  std::vector<int16_t> saved_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Parquet, ReadsDataPagesV2) {
  ScratchDir dir("parquet_v2");
  const Rows rows = writer_texts().first;
  for (bool zstd : {false, true}) {
    const std::string path = dir.str(zstd ? "v2_zstd.parquet" : "v2.parquet");
    write_bytes(path, MiniWriter().write(rows, 9, zstd));
    ParquetTextReader reader(path);
    EXPECT_EQ(read_all(reader), rows);
    EXPECT_GT(reader.pages_read().v2, 1);
  }
}

// Every prefix of a file, and the file with any one byte changed, reads or fails with one
// nanoddp::Error naming the file: never a crash, a hang or another exception.
TEST(Parquet, DamagedFilesAreOneErrorNamingTheFile) {
  ScratchDir dir("parquet_damaged");
  Rows rows = {std::string("first"), std::nullopt, std::string("third text"), std::string("")};
  const std::string good = MiniWriter().write(rows, 3, true);
  const std::string path = dir.str("shard_00000.parquet");
  auto attempt = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    try {
      ParquetTextReader reader(path);
      read_all(reader);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  for (size_t n = 0; n < good.size(); n++) attempt(good.substr(0, n));
  for (size_t i = 0; i < good.size(); i++) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ x);
      attempt(bad);
    }
  }
  write_bytes(path, good.substr(0, good.size() - 10));
  NANODDP_EXPECT_ERROR(ParquetTextReader r(path), path, "cut short");
  write_bytes(path, good);
  EXPECT_EQ([&] { ParquetTextReader r(path); return read_all(r); }(), rows);
  // A file without the column names the columns it has.
  NANODDP_EXPECT_ERROR(ParquetTextReader r(path, "content"), path, "no column 'content'", "id, text");
}

TEST(Parquet, ReadsWhatPolarsWrote) {
  std::string missing = testing::run_command("node --version").status == 0 ? "" : "node is not installed";
  if (missing.empty()) missing = testing::missing_npm_package("nodejs-polars");
  if (missing.empty()) missing = testing::missing_npm_package("nodejs-polars-linux-x64-gnu");
  NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  ScratchDir dir("parquet_polars");
  const auto [unique, repeated] = writer_texts();
  std::ofstream(dir.str("texts.json")) << nlohmann::json{{"unique", to_json(unique)}, {"repeated", to_json(repeated)}};
  const auto r = testing::run_command("node " + std::string(NANODDP_SOURCE_DIR) + "/tests/data/write_parquet.mjs " +
                                      dir.str("texts.json") + " " + dir.str());
  ASSERT_EQ(r.status, 0) << r.output;

  ParquetTextReader::PageCounts total;
  for (const char* codec : {"uncompressed", "snappy", "zstd"}) {
    for (const auto& [name, expected] : {std::pair{"unique", unique}, std::pair{"repeated", repeated}}) {
      const std::string path = dir.str(fmt::format("{}_{}.parquet", name, codec));
      SCOPED_TRACE(path);
      ASSERT_EQ(input_kind(path), InputKind::kParquet);
      ParquetTextReader reader(path);
      EXPECT_EQ(reader.num_rows(), static_cast<int64_t>(expected.size()));
      // Row groups of 256 rows (write_parquet.mjs).
      EXPECT_EQ(reader.row_groups(), (expected.size() + 255) / 256);
      EXPECT_EQ(read_all(reader), expected);
      const auto& p = reader.pages_read();
      EXPECT_GT(p.v1, static_cast<int64_t>(reader.row_groups())) << "expected several pages in some chunk";
      total.dictionary += p.dictionary, total.plain += p.plain, total.dictionary_encoded += p.dictionary_encoded;
    }
  }
  // The files must cover both encodings, or this test would not test them.
  EXPECT_GT(total.plain, 0);
  EXPECT_GT(total.dictionary, 0);
  EXPECT_GT(total.dictionary_encoded, 0);

  // As documents: the rows in order, nulls skipped; a directory of shards reads every shard.
  DocumentReader docs({dir.str("unique_zstd.parquet")});
  std::string text;
  for (const auto& row : unique) {
    if (!row) continue;
    ASSERT_TRUE(docs.next(text));
    EXPECT_EQ(text, *row);
  }
  EXPECT_FALSE(docs.next(text));

  // data prepare on the shard, as on nanochat's: every non-null, non-empty row is a document.
  PrepareOptions opt;
  opt.input = {dir.str("unique_zstd.parquet")};
  opt.out = dir.str("prepared");
  const PrepareStats st = prepare_dataset(opt);
  const auto documents = std::count_if(unique.begin(), unique.end(), [](const auto& r) { return r && !r->empty(); });
  EXPECT_EQ(st.train_documents + st.val_documents, documents);
  EXPECT_FALSE(st.end_held_out_by_default) << "a parquet file is many documents, split every 20th";
}

}  // namespace
}  // namespace nanoddp::data

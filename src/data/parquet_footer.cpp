// ParquetTextReader's constructor: the footer (FileMetaData) and the choice of the column's chunks.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/ranges.h>

#include "core/error.h"
#include "data/parquet.h"
#include "data/thrift_compact.h"

namespace nanoddp::data {

namespace {

constexpr int64_t kByteArray = 6;  // parquet's physical Type BYTE_ARRAY
constexpr int64_t kRepeated = 2;   // FieldRepetitionType REPEATED (OPTIONAL is 1)

// Calls on_field for each field of the struct that starts here; a field it does not take (returns
// false) is skipped.
template <typename F>
void read_struct(CompactReader& r, F&& on_field) {
  r.begin_struct();
  for (auto f = r.next_field(); f.type != kCtStop; f = r.next_field())
    if (!on_field(f)) r.skip(f.type);
  r.end_struct();
}

// Calls on_element(element type) for each element of the list field `f`.
template <typename F>
void read_list(CompactReader& r, const CompactReader::Field& f, F&& on_element) {
  NANODDP_CHECK(f.type == kCtList, "field {} is not a list", f.id);
  const auto h = r.read_list_header();
  for (int64_t i = 0; i < h.size; i++) on_element(h.elem_type);
}

std::string read_string(CompactReader& r, uint8_t type) {
  NANODDP_CHECK(type == kCtBinary, "a string field of another type");
  return r.read_binary();
}

struct SchemaElement {
  std::string name;
  int64_t type = -1, repetition = 0, num_children = 0;
};

struct ColumnMeta {
  std::vector<std::string> path;
  int64_t type = -1, codec = 0, num_values = -1, compressed = -1, data_offset = -1, dict_offset = -1;
  bool external = false;  // ColumnChunk.file_path: the data lives in another file
};

struct RowGroup {
  int64_t rows = -1;
  std::vector<ColumnMeta> columns;
};

SchemaElement read_schema_element(CompactReader& r) {
  SchemaElement e;
  read_struct(r, [&](const CompactReader::Field& f) {
    switch (f.id) {
      case 1: e.type = r.read_int(f.type); return true;
      case 3: e.repetition = r.read_int(f.type); return true;
      case 4: e.name = read_string(r, f.type); return true;
      case 5: e.num_children = r.read_int(f.type); return true;
      default: return false;
    }
  });
  return e;
}

ColumnMeta read_column_chunk(CompactReader& r) {
  ColumnMeta c;
  read_struct(r, [&](const CompactReader::Field& f) {
    if (f.id == 1) c.external = true;
    if (f.id != 3 || f.type != kCtStruct) return false;
    read_struct(r, [&](const CompactReader::Field& m) {  // ColumnMetaData
      switch (m.id) {
        case 1: c.type = r.read_int(m.type); return true;
        case 3: read_list(r, m, [&](uint8_t t) { c.path.push_back(read_string(r, t)); }); return true;
        case 4: c.codec = r.read_int(m.type); return true;
        case 5: c.num_values = r.read_int(m.type); return true;
        case 7: c.compressed = r.read_int(m.type); return true;
        case 9: c.data_offset = r.read_int(m.type); return true;
        case 11: c.dict_offset = r.read_int(m.type); return true;
        default: return false;
      }
    });
    return true;
  });
  return c;
}

RowGroup read_row_group_meta(CompactReader& r) {
  RowGroup g;
  read_struct(r, [&](const CompactReader::Field& f) {
    if (f.id == 1) {
      read_list(r, f, [&](uint8_t t) {
        NANODDP_CHECK(t == kCtStruct, "a column chunk that is not a struct");
        g.columns.push_back(read_column_chunk(r));
      });
      return true;
    }
    if (f.id == 3) {
      g.rows = r.read_int(f.type);
      return true;
    }
    return false;
  });
  return g;
}

// The index among the leaf columns of the top-level column `name`; its schema element in `*found`.
// -1 when there is none; `names` gets every top-level column's name.
int64_t find_leaf(const std::vector<SchemaElement>& schema, const std::string& name, const SchemaElement** found,
                  std::vector<std::string>& names) {
  NANODDP_CHECK(!schema.empty() && schema[0].num_children >= 0, "no schema");
  size_t i = 1;
  int64_t leaf = 0, result = -1;
  for (int64_t child = 0; child < schema[0].num_children; child++) {
    NANODDP_CHECK(i < schema.size(), "the schema is shorter than its root's {} children", schema[0].num_children);
    names.push_back(schema[i].name);
    if (schema[i].name == name && schema[i].num_children == 0 && result < 0) {
      result = leaf;
      *found = &schema[i];
    }
    // Steps over the subtree at i, counting its leaves.
    for (int64_t pending = 1; pending > 0; i++) {
      NANODDP_CHECK(i < schema.size() && schema[i].num_children >= 0 &&
                        schema[i].num_children < static_cast<int64_t>(schema.size()),
                    "a schema tree that does not add up");
      pending += schema[i].num_children - 1;
      leaf += schema[i].num_children == 0;
    }
  }
  return result;
}

}  // namespace

ParquetTextReader::ParquetTextReader(std::string path, std::string column)
    : path_(std::move(path)), column_(std::move(column)) {
  in_.open(path_, std::ios::binary);
  NANODDP_CHECK(in_.is_open(), "cannot read {}: {}", path_, std::strerror(errno));
  try {
    read_footer();
  } catch (const Error& e) {
    NANODDP_FAIL("cannot read parquet file {}: {}", path_, e.what());
  }
}

// The footer: FileMetaData, then its length (4 bytes, little-endian) and "PAR1" at the very end.
void ParquetTextReader::read_footer() {
  in_.seekg(0, std::ios::end);
  file_size_ = static_cast<int64_t>(in_.tellg());
  NANODDP_CHECK(file_size_ >= 12, "{} bytes is too short for a parquet file; is it complete?", file_size_);
  uint8_t tail[8];
  in_.seekg(file_size_ - 8);
  in_.read(reinterpret_cast<char*>(tail), 8);
  NANODDP_CHECK(in_, "cannot read its footer: {}", std::strerror(errno));
  NANODDP_CHECK(std::memcmp(tail + 4, "PARE", 4) != 0, "it is encrypted, which nanoddp does not read; decrypt it first");
  NANODDP_CHECK(std::memcmp(tail + 4, "PAR1", 4) == 0, "it does not end with parquet's magic PAR1: the file is cut "
                "short (an interrupted download?) or not parquet");
  const int64_t len = tail[0] | tail[1] << 8 | tail[2] << 16 | static_cast<int64_t>(tail[3]) << 24;
  NANODDP_CHECK(len > 0 && len <= file_size_ - 12, "its footer claims {} bytes of {}", len, file_size_);
  std::vector<uint8_t> meta(static_cast<size_t>(len));
  in_.seekg(file_size_ - 8 - len);
  in_.read(reinterpret_cast<char*>(meta.data()), len);
  NANODDP_CHECK(in_, "cannot read its footer: {}", std::strerror(errno));

  CompactReader r(meta.data(), meta.size());
  std::vector<SchemaElement> schema;
  std::vector<RowGroup> groups;
  read_struct(r, [&](const CompactReader::Field& f) {
    if (f.id == 2) {
      read_list(r, f, [&](uint8_t) { schema.push_back(read_schema_element(r)); });
    } else if (f.id == 3) {
      num_rows_ = r.read_int(f.type);
    } else if (f.id == 4) {
      read_list(r, f, [&](uint8_t) { groups.push_back(read_row_group_meta(r)); });
    } else {
      return false;
    }
    return true;
  });
  const SchemaElement* element = nullptr;
  std::vector<std::string> names;
  const int64_t leaf = find_leaf(schema, column_, &element, names);
  NANODDP_CHECK(leaf >= 0, "it has no column '{}' (its columns: {}); nanoddp reads the text of column '{}', as "
                "nanochat's shards have it", column_, fmt::join(names, ", "), column_);
  NANODDP_CHECK(element->type == kByteArray && element->repetition != kRepeated, "its column '{}' is not a string "
                "column (physical type {}, repetition {}); nanoddp reads a column of strings", column_,
                element->type, element->repetition);
  max_def_ = element->repetition == 0 ? 0 : 1;
  const int64_t data_end = file_size_ - 8 - len;
  for (const RowGroup& g : groups) {
    NANODDP_CHECK(static_cast<int64_t>(g.columns.size()) > leaf, "a row group without column '{}'", column_);
    const ColumnMeta& c = g.columns[static_cast<size_t>(leaf)];
    NANODDP_CHECK(!c.external, "column '{}' is stored in another file (ColumnChunk.file_path), which nanoddp does "
                  "not read", column_);
    NANODDP_CHECK(c.path == std::vector<std::string>{column_} && c.type == kByteArray, "the column chunks do not "
                  "match the schema (expected column '{}', found '{}')", column_, fmt::join(c.path, "."));
    Chunk chunk;
    chunk.rows = g.rows;
    chunk.codec = c.codec;
    chunk.num_values = c.num_values;
    // A dictionary page, when there is one, comes first.
    chunk.start = c.dict_offset > 0 && c.dict_offset < c.data_offset ? c.dict_offset : c.data_offset;
    chunk.bytes = c.compressed;
    NANODDP_CHECK(g.rows >= 0 && c.num_values == g.rows, "a row group of {} rows whose column has {} values", g.rows,
                  c.num_values);
    NANODDP_CHECK(chunk.start >= 4 && chunk.bytes > 0 && chunk.bytes <= data_end - chunk.start, "a column chunk at "
                  "bytes [{}, {}) outside the file's data (4 to {})", chunk.start, chunk.start + chunk.bytes, data_end);
    chunks_.push_back(chunk);
  }
}

}  // namespace nanoddp::data

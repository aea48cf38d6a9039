// The safetensors file format: an 8-byte little-endian header length, a JSON header mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data section)
// plus an optional "__metadata__" object of strings, then the raw little-endian data. PyTorch,
// nanochat and Hugging Face load it; nanoddp uses it for checkpoints and `nanoddp export`.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace nanoddp {

// Holds the tensors (sharing their storage) and reads their contents only when write() runs.
class SafetensorsWriter {
 public:
  // Tensors may live on any device; they are copied to the host when written. Names are unique.
  void add(const std::string& name, const Tensor& t);
  // The format allows only string values in __metadata__.
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Writes the file at `path` (callers that need atomicity write a temporary name and rename it).
  void write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A safetensors file mapped read-only. Opening validates the header and every tensor's extent,
// and throws nanoddp::Error naming the file when anything is wrong.
class SafetensorsFile {
 public:
  // The mapping lives as long as the object; read() and read_into() copy out of it, so no tensor
  // ever points into the file.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's shape and dtype (throws when missing).
  Shape shape(const std::string& name) const;
  DType dtype(const std::string& name) const;
  // Copies the named tensor into `dst`, which must have the same dtype and number of elements
  // (any device). The error names the file, the tensor and both shapes.
  void read_into(const std::string& name, const Tensor& dst) const;
  // A host copy of the named tensor.
  Tensor read(const std::string& name) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    // Byte offsets into the data section, as in the header.
    size_t begin, end;
  };
  const Entry& entry(const std::string& name) const;
  // The constructor's steps: the header's JSON `text` into entries_ and metadata_, each entry
  // checked against the `data_bytes` that follow the header, then against each other.
  void parse_header(std::string_view text, size_t data_bytes);
  Entry parse_entry(const std::string& name, const nlohmann::json& j, size_t data_bytes) const;
  void check_no_overlap() const;

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  // Start of the data section inside map_, just past the header.
  const char* data_ = nullptr;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace nanoddp

#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace nanoddp {

namespace {

// The format's dtype spellings (upper case, unlike dtype_name()) for every DType.
const std::pair<DType, const char*> kDTypeNames[] = {
    {DType::F32, "F32"}, {DType::BF16, "BF16"}, {DType::F16, "F16"}, {DType::I32, "I32"}, {DType::U16, "U16"},
    {DType::U32, "U32"}, {DType::U8, "U8"},     {DType::F64, "F64"}, {DType::I64, "I64"}};

const char* st_name(DType t) {
  for (auto& [d, n] : kDTypeNames)
    if (d == t) return n;
  NANODDP_ASSERT(false, "no safetensors name for {}", dtype_name(t));
  return "";
}

bool st_dtype(const std::string& name, DType* out) {
  for (auto& [d, n] : kDTypeNames)
    if (name == n) {
      *out = d;
      return true;
    }
  return false;
}

// Bytes of a `dtype` tensor of `shape` (non-negative dims), or SIZE_MAX when that exceeds `limit` or
// the element count overflows on the way. The dims come from the file, and Shape::numel() multiplies
// them in this order with no check: [2^40, 2^40, 0] would overflow before reaching the 0.
size_t bytes_within(const Shape& shape, DType dtype, size_t limit) {
  int64_t n = 1;
  for (int i = 0; i < shape.ndim(); i++) {
    if (shape[i] != 0 && n > INT64_MAX / shape[i]) return SIZE_MAX;
    n *= shape[i];
  }
  return static_cast<size_t>(n) <= limit / dtype_size(dtype) ? static_cast<size_t>(n) * dtype_size(dtype) : SIZE_MAX;
}

}  // namespace

void SafetensorsWriter::add(const std::string& name, const Tensor& t) {
  for (auto& [n, _] : tensors_) NANODDP_ASSERT(n != name, "tensor '{}' added twice", name);
  tensors_.emplace_back(name, t);
}

void SafetensorsWriter::write(const std::string& path) const {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  // Offsets count from the start of the data section, where tensors lie back to back in the order
  // they were added.
  for (auto& [name, t] : tensors_) {
    std::vector<int64_t> shape;
    for (int i = 0; i < t.ndim(); i++) shape.push_back(t.dim(i));
    header[name] = {{"dtype", st_name(t.dtype())}, {"shape", shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  // The format allows trailing spaces in the header; an aligned data section lets readers use the
  // mapped bytes in place.
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  std::FILE* f = std::fopen(path.c_str(), "wb");
  NANODDP_CHECK(f != nullptr, "cannot write {}: {}", path, std::strerror(errno));
  // Host byte order: the format is little-endian, so this assumes a little-endian host (the reader
  // below does the same).
  uint64_t n = text.size();
  bool ok = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(text.data(), 1, n, f) == n;
  // One tensor at a time: a device tensor is copied to the host just before it is written, so the
  // host never holds more than one extra tensor.
  for (auto& [name, t] : tensors_) {
    if (!ok) break;
    Tensor host = t.device().is_cpu() ? t : t.copy_to(Device::cpu());
    ok = std::fwrite(host.raw(), 1, host.nbytes(), f) == host.nbytes();
  }
  // On disk before the caller renames anything into place (checkpoint atomicity, train/checkpoint.h).
  // Each step runs even after a failure, so the file is always closed.
  ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  NANODDP_CHECK(ok, "cannot write {}: {} (disk full?)", path, std::strerror(errno));
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  NANODDP_CHECK(fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  const bool is_dir = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  map_bytes_ = st.st_size;
  // Read-only private mapping: pages load on demand, so reading one tensor of a large file is cheap.
  // The descriptor is not needed once the mapping exists.
  if (map_bytes_ > 0 && !is_dir) map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  NANODDP_CHECK(!is_dir, "{} is a directory; give a safetensors file", path);
  // A constructor that throws never runs the destructor: without this every rejected file would
  // stay mapped for the life of the process.
  struct UnmapUnlessKept {
    void*& map;
    size_t bytes;
    bool keep = false;
    ~UnmapUnlessKept() {
      if (!keep && map != nullptr && map != MAP_FAILED) ::munmap(map, bytes);
    }
  } unmap_on_error{map_, map_bytes_};
  NANODDP_CHECK(map_bytes_ >= 8 && map_ != nullptr && map_ != MAP_FAILED,
                "{} is not a safetensors file (empty or unreadable)", path);
  uint64_t n = 0;
  std::memcpy(&n, map_, 8);
  // Before the header is parsed: a bogus length must not make the parser read past the mapping.
  NANODDP_CHECK(n <= map_bytes_ - 8, "{} is truncated or not a safetensors file (header of {} bytes in a {}-byte "
                "file)", path, n, map_bytes_);
  const char* base = static_cast<const char*>(map_);
  data_ = base + 8 + n;
  parse_header(std::string_view(base + 8, n), map_bytes_ - 8 - n);
  unmap_on_error.keep = true;
}

void SafetensorsFile::parse_header(std::string_view text, size_t data_bytes) {
  // nlohmann throws on malformed JSON and on missing or mistyped fields (at(), get<>()); each becomes
  // one Error naming the file.
  try {
    const nlohmann::json header = nlohmann::json::parse(text);
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        for (auto m = it->begin(); m != it->end(); ++m) metadata_[m.key()] = m->get<std::string>();
        continue;
      }
      entries_[it.key()] = parse_entry(it.key(), *it, data_bytes);
    }
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("{} has a corrupt safetensors header: {}", path_, e.what());
  }
  check_no_overlap();
}

SafetensorsFile::Entry SafetensorsFile::parse_entry(const std::string& name, const nlohmann::json& j,
                                                    size_t data_bytes) const {
  Entry e{};
  std::string dt = j.at("dtype").get<std::string>();
  NANODDP_CHECK(st_dtype(dt, &e.dtype), "{}: tensor '{}' has dtype {} which nanoddp does not read", path_, name, dt);
  // Numbers are checked for their kind before get<>(), which casts a float to an integer with
  // undefined behaviour when it is out of range; dims before Shape, which asserts (a bug) on a
  // negative dim or too many dims, here a corrupt file.
  const nlohmann::json& dims = j.at("shape");
  NANODDP_CHECK(dims.is_array() && dims.size() <= size_t{Shape::kMaxDims}, "{}: tensor '{}' has shape {}; "
                "expected a list of at most {} dims", path_, name, dims.dump(), Shape::kMaxDims);
  for (const nlohmann::json& d : dims) {
    NANODDP_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "{}: tensor '{}' has shape {}; dims must be "
                  "non-negative integers", path_, name, dims.dump());
    e.shape.push_back(d.get<int64_t>());
  }
  const nlohmann::json& offsets = j.at("data_offsets");
  NANODDP_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                    offsets[1].is_number_unsigned(), "{}: tensor '{}' has data_offsets {}; expected [begin, end], "
                "two non-negative integers", path_, name, offsets.dump());
  e.begin = offsets[0].get<size_t>();
  e.end = offsets[1].get<size_t>();
  // Every extent is validated here, so read_into() can copy without further checks.
  NANODDP_CHECK(e.begin <= e.end && e.end <= data_bytes && e.end - e.begin == bytes_within(e.shape, e.dtype, data_bytes),
                "{} is truncated or corrupt: tensor '{}' claims bytes [{}, {}) of a {}-byte data section", path_, name,
                e.begin, e.end, data_bytes);
  return e;
}

// The format gives each byte of the data section to at most one tensor. Two tensors on the same
// bytes would load as aliases of each other, which no writer means; zero-byte tensors claim nothing.
void SafetensorsFile::check_no_overlap() const {
  std::vector<std::pair<const std::string*, const Entry*>> by_begin;
  for (auto& [name, e] : entries_)
    if (e.end > e.begin) by_begin.emplace_back(&name, &e);
  std::sort(by_begin.begin(), by_begin.end(), [](auto& a, auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < by_begin.size(); i++) {
    const Entry &prev = *by_begin[i - 1].second, &cur = *by_begin[i].second;
    NANODDP_CHECK(cur.begin >= prev.end, "{} is corrupt: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path_,
                  *by_begin[i - 1].first, prev.begin, prev.end, *by_begin[i].first, cur.begin, cur.end);
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr && map_ != MAP_FAILED) ::munmap(map_, map_bytes_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (auto& [n, _] : entries_) out.push_back(n);
  return out;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  NANODDP_CHECK(it != entries_.end(), "{} has no tensor named '{}'", path_, name);
  return it->second;
}

Shape SafetensorsFile::shape(const std::string& name) const { return entry(name).shape; }
DType SafetensorsFile::dtype(const std::string& name) const { return entry(name).dtype; }

void SafetensorsFile::read_into(const std::string& name, const Tensor& dst) const {
  const Entry& e = entry(name);
  NANODDP_CHECK(e.dtype == dst.dtype() && e.shape.numel() == dst.numel(), "{}: tensor '{}' is {} {} but {} {} was "
                "expected (was it written for another model configuration?)", path_, name, dtype_name(e.dtype),
                e.shape.str(), dtype_name(dst.dtype()), dst.shape().str());
  // wrap() takes a mutable pointer; the mapping is read-only, but this view is only the copy's source.
  Tensor src = Tensor::wrap(const_cast<char*>(data_ + e.begin), dst.shape(), e.dtype);
  copy(dst, src);
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const Entry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  read_into(name, t);
  return t;
}

}  // namespace nanoddp

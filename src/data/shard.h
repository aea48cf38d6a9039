// Token shards in llm.c's .bin format: a header of 256 little-endian int32 -- [0] magic, [1]
// version, [2] token count -- then the tokens. Version 1 (magic 20240520) stores uint16 tokens;
// version 7 (magic 20240801) stores uint32 tokens, for vocabularies over 65,535 ids. Offsets are
// 64-bit throughout (llm.c's are 32-bit), so shards may exceed 4 GB of tokens' bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace nanoddp::data {

inline constexpr int32_t kShardMagicU16 = 20240520, kShardVersionU16 = 1;
inline constexpr int32_t kShardMagicU32 = 20240801, kShardVersionU32 = 7;
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// A shard mapped read-only into memory. Opening checks the header and the file size and throws
// nanoddp::Error naming the file when either is wrong.
class ShardReader {
 public:
  explicit ShardReader(const std::string& path);
  ~ShardReader();
  ShardReader(ShardReader&& o) noexcept;
  ShardReader& operator=(ShardReader&&) = delete;
  ShardReader(const ShardReader&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }                 // tokens
  int token_bytes() const { return width_; }              // 2 or 4
  int32_t token(int64_t i) const {
    return width_ == 2 ? static_cast<const uint16_t*>(tokens_)[i] : static_cast<int32_t>(static_cast<const uint32_t*>(tokens_)[i]);
  }
  // Copies tokens [begin, begin + n) into out as int32.
  void read(int64_t begin, int64_t n, int32_t* out) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
  int64_t count_ = 0;
  int width_ = 2;
};

// Writes one shard: tokens are appended to `path + ".tmp"`; finish() writes the final header and
// renames the file into place, so a shard that exists is complete.
class ShardWriter {
 public:
  // vocab_size decides the width: uint16 up to 65,536 ids, uint32 above.
  ShardWriter(const std::string& path, int64_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const int32_t* tokens, int64_t n);
  int64_t size() const { return count_; }
  void finish();

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t count_ = 0;
  int64_t vocab_ = 0;
  int width_ = 2;
};

}  // namespace nanoddp::data

#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace nanoddp::data {

ShardReader::ShardReader(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  NANODDP_CHECK(fd >= 0, "cannot open token shard {}: {}", path, std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const int64_t file_bytes = st.st_size;
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    NANODDP_FAIL("token shard {} is truncated: {} bytes, shorter than the {}-byte header; re-run `nanoddp data "
                 "prepare`", path, file_bytes, kShardHeaderBytes);
  }
  map_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  NANODDP_CHECK(map_ != MAP_FAILED, "cannot map token shard {}: {}", path, std::strerror(errno));
  map_bytes_ = file_bytes;
  int32_t header[3];  // copied: the error paths below unmap the file before formatting messages
  std::memcpy(header, map_, sizeof header);
  if (header[0] == kShardMagicU16 && header[1] == kShardVersionU16) {
    width_ = 2;
  } else if (header[0] == kShardMagicU32 && header[1] == kShardVersionU32) {
    width_ = 4;
  } else {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    NANODDP_FAIL("{} is not a token shard: magic {} version {} (expected {} v{} or {} v{}); was it written by "
                 "`nanoddp data prepare` or llm.c?", path, header[0], header[1], kShardMagicU16, kShardVersionU16,
                 kShardMagicU32, kShardVersionU32);
  }
  count_ = static_cast<uint32_t>(header[2]);
  const int64_t want = kShardHeaderBytes + count_ * width_;
  if (file_bytes != want) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    NANODDP_FAIL("token shard {} is {}: the header promises {} tokens ({} bytes) but the file has {} bytes; "
                 "re-run `nanoddp data prepare`", path, file_bytes < want ? "truncated" : "corrupt", count_, want,
                 file_bytes);
  }
  tokens_ = static_cast<const char*>(map_) + kShardHeaderBytes;
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), map_bytes_(o.map_bytes_), tokens_(o.tokens_), count_(o.count_),
      width_(o.width_) {
  o.map_ = nullptr;
}

ShardReader::~ShardReader() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

void ShardReader::read(int64_t begin, int64_t n, int32_t* out) const {
  NANODDP_ASSERT(begin >= 0 && begin + n <= count_, "read [{}, +{}) of {} tokens in {}", begin, n, count_, path_);
  if (width_ == 2) {
    const uint16_t* p = static_cast<const uint16_t*>(tokens_) + begin;
    for (int64_t i = 0; i < n; i++) out[i] = p[i];
  } else {
    const uint32_t* p = static_cast<const uint32_t*>(tokens_) + begin;
    for (int64_t i = 0; i < n; i++) out[i] = static_cast<int32_t>(p[i]);
  }
}

ShardWriter::ShardWriter(const std::string& path, int64_t vocab_size)
    : path_(path), vocab_(vocab_size), width_(vocab_size <= 65536 ? 2 : 4) {
  file_ = std::fopen((path + ".tmp").c_str(), "wb");
  NANODDP_CHECK(file_ != nullptr, "cannot write token shard {}.tmp: {}", path, std::strerror(errno));
  std::vector<int32_t> header(kShardHeaderInts, 0);
  NANODDP_CHECK(std::fwrite(header.data(), 4, header.size(), file_) == header.size(), "cannot write {}.tmp: {}",
                path, std::strerror(errno));
}

ShardWriter::~ShardWriter() {
  if (file_ != nullptr) {  // abandoned: leave no partial shard behind
    std::fclose(file_);
    std::remove((path_ + ".tmp").c_str());
  }
}

void ShardWriter::append(const int32_t* tokens, int64_t n) {
  NANODDP_ASSERT(file_ != nullptr, "append after finish");
  NANODDP_CHECK(count_ + n <= int64_t{0xffffffff}, "token shard {} would exceed 2^32 tokens; use a smaller "
                "--shard_tokens", path_);
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint8_t> buf(std::min(n, kChunk) * width_);
  for (int64_t done = 0; done < n; done += kChunk) {
    int64_t m = std::min(kChunk, n - done);
    for (int64_t i = 0; i < m; i++) {
      int32_t t = tokens[done + i];
      NANODDP_ASSERT(t >= 0 && t < vocab_, "token {} outside the vocabulary of {}", t, vocab_);
      if (width_ == 2) {
        uint16_t v = static_cast<uint16_t>(t);
        std::memcpy(&buf[i * 2], &v, 2);
      } else {
        uint32_t v = static_cast<uint32_t>(t);
        std::memcpy(&buf[i * 4], &v, 4);
      }
    }
    NANODDP_CHECK(std::fwrite(buf.data(), width_, m, file_) == static_cast<size_t>(m), "cannot write {}.tmp: {}",
                  path_, std::strerror(errno));
  }
  count_ += n;
}

void ShardWriter::finish() {
  NANODDP_ASSERT(file_ != nullptr, "finish twice");
  int32_t header[3] = {width_ == 2 ? kShardMagicU16 : kShardMagicU32, width_ == 2 ? kShardVersionU16 : kShardVersionU32,
                       static_cast<int32_t>(static_cast<uint32_t>(count_))};
  bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(header, 4, 3, file_) == 3 && std::fflush(file_) == 0 &&
            ::fsync(::fileno(file_)) == 0;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  NANODDP_CHECK(ok, "cannot finish token shard {}: {}", path_, std::strerror(errno));
  std::filesystem::rename(path_ + ".tmp", path_);
}

}  // namespace nanoddp::data

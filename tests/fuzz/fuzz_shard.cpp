// Fuzzes the token shard reader (data/shard.h, llm.c's .bin format): the input is the whole file.
// A shard the reader accepts is then read in full, as the loader would, so a token count or width
// that disagrees with the mapping shows up as an out-of-bounds read under ASan. Accepted or not,
// the file must be unmapped once the reader is gone.
#include <vector>

#include "data/shard.h"
#include "fuzz_support.h"

using nanoddp::fuzz::ScratchFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file("shard");
  file.write(nanoddp::fuzz::as_text(data, size));
  nanoddp::fuzz::expect_only_errors([&] {
    nanoddp::data::ShardReader shard(file.path());
    nanoddp::fuzz::require(shard.token_bytes() == 2 || shard.token_bytes() == 4, "token width is neither 2 nor 4");
    nanoddp::fuzz::require(nanoddp::data::kShardHeaderBytes + shard.size() * shard.token_bytes() == int64_t(size),
                           "the accepted token count does not match the file size");
    std::vector<int32_t> tokens(shard.size());  // [size()]
    shard.read(0, shard.size(), tokens.data());
    // token(i) and read() are two paths to the same bytes.
    for (int64_t i = 0; i < shard.size(); i++) nanoddp::fuzz::require(shard.token(i) == tokens[i], "token(i) != read()");
  });
  nanoddp::fuzz::require_unmapped(file.path());
  return 0;
}

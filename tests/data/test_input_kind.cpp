// Binary inputs are refused before they are read as text (Note [binary input] in input_kind.h),
// while text in any byte encoding without NULs, and parquet, pass.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>

#include "core/error.h"
#include "data/documents.h"
#include "data/input_kind.h"
#include "data/prepare.h"
#include "data_test_util.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

using testing::ScratchDir;

TEST(InputKind, NamesCompressedAndBinaryFormats) {
  EXPECT_NE(binary_kind(std::string("\x1f\x8b\x08\x00", 4) + "rest").find("gzip"), std::string::npos);
  EXPECT_NE(binary_kind("\x28\xb5\x2f\xfd....").find("zstd"), std::string::npos);
  EXPECT_NE(binary_kind("PK\x03\x04....").find("zip"), std::string::npos);
  EXPECT_NE(binary_kind(std::string(257, 'a') + "ustar").find("tar"), std::string::npos);
  // Uniform random bytes (compressed data) hold NULs; without them they are still mostly invalid UTF-8.
  std::mt19937 rng(3);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  EXPECT_NE(binary_kind(bytes).find("NUL"), std::string::npos);
  std::string no_nul = bytes;
  for (char& c : no_nul) c = static_cast<char>(c | 0x80);  // high bytes only: valid UTF-8 is rare
  EXPECT_NE(binary_kind(no_nul).find("not UTF-8"), std::string::npos);
  // UTF-16 text: a NUL in every ASCII character.
  EXPECT_NE(binary_kind(std::string("h\0e\0l\0l\0o\0", 10)).find("UTF-16"), std::string::npos);
}

TEST(InputKind, TextPasses) {
  for (const auto& s : testing::adversarial_strings()) EXPECT_EQ(binary_kind(s), "") << s;
  EXPECT_EQ(binary_kind(testing::random_unicode_text(5000, 1)), "");
  EXPECT_EQ(binary_kind(""), "");
  // Latin-1 French: only the accented letters are invalid UTF-8, far below the 30% limit.
  EXPECT_EQ(binary_kind("Le caf\xe9 \xe9tait ferm\xe9, et la for\xeat \xe9tait calme. " + std::string(200, 'a')), "");
  // A multi-byte character cut off by the end of the sample still counts as valid.
  EXPECT_EQ(binary_kind(std::string(100, 'a') + "\xe2\x82"), "");
}

TEST(InputKind, PrepareAndTokenizerInputRefuseAGzipFile) {
  ScratchDir dir("input_kind");
  const std::string gz = dir.str("input.txt.gz");
  std::ofstream(gz, std::ios::binary) << std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10)
                                      << testing::random_bytes(2000, 7);
  PrepareOptions opt;
  opt.input = {gz};
  opt.out = dir.str("ds");
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), gz, "gzip", "gunzip");
  EXPECT_FALSE(std::filesystem::exists(dir.str("ds")));
  // tokenizer train reads its input through DocumentReader too; inside a directory as well.
  DocumentReader reader({dir.str()});
  std::string text;
  NANODDP_EXPECT_ERROR(reader.next(text), gz, "not text");
}

}  // namespace
}  // namespace nanoddp::data

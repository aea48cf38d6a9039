// Tokenizer files: save/load round trip, tiktoken's npm tables, and errors that name file and line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "data/base64.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer_file.h"
#include "data_test_util.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

using testing::read_file;
using testing::ScratchDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(Base64, RoundTripsAndRejectsNonCanonicalText) {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x80", 3)})
    EXPECT_EQ(base64_decode(base64_encode(s)), s);
  EXPECT_EQ(base64_encode("hello"), "aGVsbG8=");
  EXPECT_FALSE(base64_decode("aGVsbG8"));   // length not a multiple of 4
  EXPECT_FALSE(base64_decode("aGVsbG9="));  // non-zero bits under the padding
  EXPECT_FALSE(base64_decode("aGV*bG8="));
}

TEST(TokenizerFile, SaveLoadRoundTrip) {
  ScratchDir dir("tokenizer_file_roundtrip");
  const BpeVocab v = testing::small_trained_vocab();
  const std::string path = dir.str("tok.tiktoken");
  write_tokenizer_file(path, v);
  const BpeVocab back = read_tokenizer_file(path);
  EXPECT_EQ(back.tokens, v.tokens);
  EXPECT_EQ(back.pattern, v.pattern);
  EXPECT_EQ(back.bos, v.bos);
  ASSERT_EQ(back.specials.size(), v.specials.size());
  BpeTokenizer a(v), b(back);
  for (size_t i = 0; i < v.specials.size(); i++) EXPECT_EQ(b.special_id(v.specials[i].text), v.specials[i].id);
  const auto docs = testing::generated_documents(3, 200, 1);
  for (const auto& d : docs) EXPECT_EQ(a.encode(d), b.encode(d));
  // Each line is "base64 rank", in rank order.
  const std::string text = read_file(path);
  EXPECT_EQ(text.substr(0, 7), "AA== 0\n");
  auto t = load_tokenizer(path);
  EXPECT_EQ(t->vocab_size(), a.vocab_size());
  EXPECT_EQ(t->name(), path);
}

TEST(TokenizerFile, BadFilesNameTheFileAndLine) {
  ScratchDir dir("tokenizer_file_errors");
  const BpeVocab v = testing::small_trained_vocab();
  const std::string good = dir.str("good.tiktoken");
  write_tokenizer_file(good, v);
  const std::string sidecar = read_file(sidecar_path(good));
  std::vector<std::string> lines;  // [vocab] line k + 1 of the file is lines[k] = "base64 k"
  {
    std::ifstream in(good);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  auto joined = [](const std::vector<std::string>& ls) {
    std::string t;
    for (auto& l : ls) t += l + "\n";
    return t;
  };
  auto base64_of = [&](int rank) { return lines[rank].substr(0, lines[rank].find(' ')); };
  // Writes a variant of the file (with the good sidecar); returns its path.
  auto variant = [&](const std::string& name, const std::vector<std::string>& ls) {
    const std::string p = dir.str(name);
    write_text(p, joined(ls));
    write_text(sidecar_path(p), sidecar);
    return p;
  };
  // Line 301 repeats rank 299, first given on line 300.
  auto ls = lines;
  ls[300] = base64_of(300) + " 299";
  NANODDP_EXPECT_ERROR(read_tokenizer_file(variant("dup_rank.tiktoken", ls)),
                       "dup_rank.tiktoken:301: rank 299 appears twice", "dup_rank.tiktoken:300");

  // Rank 123 missing (its line deleted).
  ls = lines;
  ls.erase(ls.begin() + 123);
  NANODDP_EXPECT_ERROR(read_tokenizer_file(variant("missing.tiktoken", ls)), "missing.tiktoken: rank 123 is missing");

  // Garbage on line 5, bad base64 on line 6, a non-integer rank on line 7.
  for (auto [name, bad, k] : {std::tuple{"garbage.tiktoken", "this is not a token line", 5},
                              std::tuple{"base64.tiktoken", "@@@@ 5", 6}, std::tuple{"rank.tiktoken", "Bw== seven", 7}}) {
    ls = lines;
    ls[k - 1] = bad;
    NANODDP_EXPECT_ERROR(read_tokenizer_file(variant(name, ls)), std::string(name) + ":" + std::to_string(k) + ":");
  }

  // As tiktoken's loader (splitlines), blank lines are skipped and CRLF line ends read the same: a
  // blank line in place of line 8 leaves its rank missing; blank lines at the end and CRLF change
  // nothing. Was: "expected "base64 rank", got ''" and "rank '0' is not an integer".
  ls = lines;
  ls[7] = "";
  NANODDP_EXPECT_ERROR(read_tokenizer_file(variant("blank.tiktoken", ls)), "blank.tiktoken: rank 7 is missing");
  ls = lines;
  ls.push_back("");
  ls.push_back("");
  EXPECT_EQ(read_tokenizer_file(variant("trailing.tiktoken", ls)).tokens, v.tokens);
  ls = lines;
  for (auto& l : ls) l += "\r";
  EXPECT_EQ(read_tokenizer_file(variant("crlf.tiktoken", ls)).tokens, v.tokens);

  // The same bytes under two ranks (line 301 holds the bytes of rank 299, with rank 300).
  ls = lines;
  ls[300] = base64_of(299) + " 300";
  NANODDP_EXPECT_ERROR(read_tokenizer_file(variant("dup_bytes.tiktoken", ls)), "dup_bytes.tiktoken:301",
                       "appear twice (first at");

  // No sidecar; a corrupt sidecar.
  write_text(dir.str("lonely.tiktoken"), joined(lines));
  NANODDP_EXPECT_ERROR(read_tokenizer_file(dir.str("lonely.tiktoken")), "lonely.tiktoken.json");
  write_text(dir.str("corrupt.tiktoken"), joined(lines));
  write_text(dir.str("corrupt.tiktoken.json"), "{\"format\": \"nanoddp-bpe\", \"pattern\": ");
  NANODDP_EXPECT_ERROR(read_tokenizer_file(dir.str("corrupt.tiktoken")), "corrupt.tiktoken.json");
  // A file that does not exist.
  NANODDP_EXPECT_ERROR(read_tokenizer_file(dir.str("nothing.tiktoken")), "nothing.tiktoken");
}

TEST(TokenizerFile, NpmTablesLoadWithTheirSpecialTokens) {
  const std::string missing = testing::missing_npm_package("tiktoken");
  NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  struct Want {
    const char* name;
    int32_t vocab_size, bos, ranks;
  };
  for (const Want w : {Want{"gpt2", 50257, 50256, 50256}, Want{"cl100k_base", 100277, 100257, 100256},
                       Want{"o200k_base", 200019, 199999, 199998}}) {
    auto tok = load_tokenizer(w.name);
    EXPECT_EQ(tok->vocab_size(), w.vocab_size) << w.name;
    EXPECT_EQ(tok->bos_id(), w.bos) << w.name;
    EXPECT_EQ(tok->special_id("<|endoftext|>"), w.bos);
    const auto bytes = tok->token_bytes();
    EXPECT_EQ(std::count(bytes.begin(), bytes.end(), 0), w.vocab_size - w.ranks) << "specials and gaps count 0";
    EXPECT_EQ(tok->decode(tok->encode(" hello world")), " hello world");
  }
}

}  // namespace
}  // namespace nanoddp::data

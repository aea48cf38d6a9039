// The PCRE2 pre-tokenizer: known splits, cover-the-text invariants, invalid UTF-8, long runs, and
// the pieces against JavaScript's regex engine (an independent implementation) on the corpora.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "data/split_pattern.h"
#include "data/tokenizer_file.h"
#include "data_test_util.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

using testing::ScratchDir;

std::vector<std::string> split_all(const SplitPattern& p, std::string_view text) {
  SplitPattern::Matcher m(p);
  std::vector<std::string> out;
  p.split(m, text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string s;
  for (auto& p : pieces) s += p;
  return s;
}

using Pieces = std::vector<std::string>;

TEST(SplitPattern, NanochatPatternKnownSplits) {
  SplitPattern p{std::string(kNanochatSplitPattern)};
  EXPECT_EQ(split_all(p, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split_all(p, "1234567"), (Pieces{"12", "34", "56", "7"}));  // digits in groups of 1-2
  EXPECT_EQ(split_all(p, "I don't know"), (Pieces{"I", " don", "'t", " know"}));
  EXPECT_EQ(split_all(p, "WE'LL"), (Pieces{"WE", "'LL"}));  // (?i:...) contractions
  EXPECT_EQ(split_all(p, "   x"), (Pieces{"  ", " x"}));      // \s+(?!\S) leaves one space to the word
  EXPECT_EQ(split_all(p, "a\n\n\nb"), (Pieces{"a", "\n\n\n", "b"}));
  EXPECT_EQ(split_all(p, "x!!!\n\ny"), (Pieces{"x", "!!!\n\n", "y"}));
  EXPECT_EQ(split_all(p, "end.   "), (Pieces{"end", ".", "   "}));
  EXPECT_EQ(split_all(p, "$100"), (Pieces{"$", "10", "0"}));
}

TEST(SplitPattern, Cl100kDigitsAndNewlines) {
  SplitPattern p{R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  EXPECT_EQ(split_all(p, "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split_all(p, "a\n\n\nb"), (Pieces{"a", "\n\n\n", "b"}));
}

// Rust's \s is Unicode White_Space: U+0085 and U+3000 are spaces, U+180E and U+FEFF are not.
TEST(SplitPattern, WhitespaceIsUnicodeWhiteSpace) {
  SplitPattern p{R"(\s+|\S+)"};
  EXPECT_EQ(split_all(p, "a\u0085b"), (Pieces{"a", "\u0085", "b"}));
  EXPECT_EQ(split_all(p, "a\u3000\u2028b"), (Pieces{"a", "\u3000\u2028", "b"}));
  EXPECT_EQ(split_all(p, "a\u180Eb\uFEFFc"), (Pieces{"a\u180Eb\uFEFFc"}));
  EXPECT_EQ(to_pcre2_syntax(R"([^\s\p{L}])"),
            R"([^\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\p{L}])");
  EXPECT_THROW(to_pcre2_syntax(R"([\S])"), Error);
}

// A POSIX class inside a class keeps the class open and means its ASCII characters, as in Rust's
// syntax; a nested class or a set operation, which PCRE2 would read otherwise, is refused. Was:
// "[[:alpha:]\s]+" split "ab c]]" as "ab " and "c]]", the inner ']' taken as the end of the class.
TEST(SplitPattern, PosixClassesKeepTheClassAndNestedClassesAreRefused) {
  SplitPattern p{R"([[:alpha:]\s]+)"};
  EXPECT_EQ(split_all(p, "ab c]]"), (Pieces{"ab c", "]]"}));
  // Rust's POSIX classes are ASCII: PCRE2_UCP alone would let [:alpha:] take the é.
  EXPECT_EQ(split_all(SplitPattern{"[[:alpha:]]+"}, "ab\u00e9c"), (Pieces{"ab", "\u00e9", "c"}));
  NANODDP_EXPECT_ERROR(to_pcre2_syntax("[[:^alpha:]]"), "not a POSIX class");
  NANODDP_EXPECT_ERROR(to_pcre2_syntax(R"([a[bc]]+)"), "nested character classes");
  NANODDP_EXPECT_ERROR(to_pcre2_syntax(R"([\p{L}&&[^a]])"), "class operation '&&'");
  NANODDP_EXPECT_ERROR(to_pcre2_syntax(R"([a-z&&b])"), "class operation '&&'");
  EXPECT_EQ(to_pcre2_syntax(R"(\[[a&b~]\])"), R"(\[[a&b~]\])");
}

TEST(SplitPattern, InvalidUtf8BecomesItsOwnPieces) {
  SplitPattern p{std::string(kNanochatSplitPattern)};
  EXPECT_EQ(split_all(p, "ab\xff\xfe" "cd"), (Pieces{"ab", "\xff\xfe", "cd"}));
  EXPECT_EQ(split_all(p, "\x80"), (Pieces{"\x80"}));
  EXPECT_EQ(split_all(p, "x \xf0\x9f\x98"), (Pieces{"x", " ", "\xf0\x9f\x98"}));
  for (uint64_t seed = 0; seed < 50; seed++) {
    const std::string text = testing::random_bytes(2000, seed);
    const auto pieces = split_all(p, text);
    EXPECT_EQ(joined(pieces), text);
    for (const auto& piece : pieces) ASSERT_FALSE(piece.empty());
  }
}

TEST(SplitPattern, LongRunsSplitInLinearTime) {
  SplitPattern p{std::string(kNanochatSplitPattern)};
  for (char c : {' ', '!', 'a', '\n', '7'}) {
    const std::string text = std::string(1 << 20, c) + "z";
    const auto pieces = split_all(p, text);
    EXPECT_EQ(joined(pieces), text);
  }
}

TEST(SplitPattern, BadPatternIsAnError) {
  NANODDP_EXPECT_ERROR(SplitPattern p{"(unclosed"}, "(unclosed");
  SplitPattern empty{"x*"};
  SplitPattern::Matcher m(empty);
  EXPECT_THROW(empty.split(m, "abc", [](std::string_view) {}), Error);
}

// Our pieces against JavaScript's regex engine (the pattern translated by the node tool), for
// nanochat's pattern and those of gpt2, cl100k_base and o200k_base, on the corpora and the
// adversarial strings.
TEST(SplitPattern, MatchesJavaScriptRegexOnCorpora) {
  const std::string missing = testing::missing_node_reference();
  NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  std::vector<std::string> docs = testing::adversarial_strings();
  for (const char* corpus : {"brown", "nlp-corpus"})
    for (auto& d : testing::corpus_documents(corpus)) docs.push_back(std::move(d));
  ScratchDir dir("split_vs_js");
  testing::write_docs_file(dir.str("docs.bin"), docs);
  std::vector<std::string> patterns = {std::string(kNanochatSplitPattern)};
  for (const char* name : {"gpt2", "cl100k_base", "o200k_base"}) patterns.push_back(read_npm_encoding(name).pattern);
  for (const auto& pattern : patterns) {
    SCOPED_TRACE(pattern);
    std::string quoted = "'";
    for (char c : pattern) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    ASSERT_TRUE(testing::run_node_reference("split --pattern " + quoted + " --input " + dir.str("docs.bin") +
                                            " --out " + dir.str("pieces.bin")));
    const auto want = testing::read_u32_arrays(dir.str("pieces.bin"));
    ASSERT_EQ(want.size(), docs.size());
    SplitPattern p{pattern};
    SplitPattern::Matcher m(p);
    for (size_t d = 0; d < docs.size(); d++) {
      std::vector<uint32_t> got;
      p.split(m, docs[d], [&](std::string_view piece) { got.push_back(static_cast<uint32_t>(piece.size())); });
      ASSERT_EQ(got, want[d]) << "document " << d << " splits differently: " << docs[d].substr(0, 200);
    }
  }
}

}  // namespace
}  // namespace nanoddp::data

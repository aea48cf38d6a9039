// Pre-tokenization: the split pattern cuts text into pieces (words with their leading space,
// number groups, punctuation runs, whitespace runs) that BPE then encodes one by one, so no token
// ever crosses a piece boundary.
//
// The patterns (nanochat's, gpt2's, cl100k_base's, o200k_base's) are written in the syntax of
// Rust's regex crates, which tiktoken matches with. They need Unicode classes (\p{L}, \p{N}, ...),
// possessive quantifiers and a negative lookahead, so we compile them with PCRE2 and its JIT (the
// fast path: no hand-written matcher to keep equal to the reference). One difference is translated:
// Rust's \s is Unicode White_Space, PCRE2's (with UCP) is \p{Z} plus \h and \v, which adds U+180E;
// so \s and \S are rewritten to explicit White_Space classes before compiling (see to_pcre2_syntax).
//
// Unicode version: Debian's PCRE2 10.42 has Unicode 14 tables, tiktoken's regex crate a later
// version, so characters assigned since Unicode 14 (CJK extension H, Kawi, ...) may split
// differently; the reference tests use text without them.
//
// Text need not be valid UTF-8. Bytes that are not part of a valid UTF-8 character never match; a
// run of them between two matches becomes a piece of its own, so the pieces always cover the text.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace nanoddp::data {

// nanochat's split pattern (GPT-4 style with digit groups of 1-2; ANCHORS.md §1).
inline constexpr std::string_view kNanochatSplitPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

// Rewrites \s and \S into explicit classes of Unicode White_Space characters, so that PCRE2 matches
// what Rust's regex (tiktoken's engine) matches. Throws nanoddp::Error on \S inside a class.
std::string to_pcre2_syntax(std::string_view pattern);

class SplitPattern {
 public:
  // Throws nanoddp::Error naming the pattern and the offset when PCRE2 cannot compile it.
  explicit SplitPattern(std::string pattern);
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Matching state (PCRE2 match data and JIT stack) for one thread at a time.
  class Matcher {
   public:
    explicit Matcher(const SplitPattern& pattern);
    ~Matcher();
    Matcher(Matcher&&) noexcept;
    Matcher(const Matcher&) = delete;
    Matcher& operator=(const Matcher&) = delete;

    // Starts splitting `text` (which must outlive the calls to next()).
    void reset(std::string_view text) {
      text_ = text;
      pos_ = 0;
      pending_end_ = 0;
    }
    // The next piece, or false when the text is used up. Pieces are non-empty, in order, and
    // concatenate to the text.
    bool next(std::string_view& piece);

   private:
    const SplitPattern* pattern_;
    void* match_data_ = nullptr;  // pcre2_match_data_8*
    void* context_ = nullptr;     // pcre2_match_context_8*
    void* jit_stack_ = nullptr;   // pcre2_jit_stack_8*
    std::string_view text_;
    size_t pos_ = 0;
    size_t pending_end_ = 0;      // end of a match found after an unmatched gap, returned next
  };

  // Calls fn(piece) for each piece of `text`.
  template <typename Fn>
  void split(Matcher& m, std::string_view text, Fn&& fn) const {
    m.reset(text);
    std::string_view piece;
    while (m.next(piece)) fn(piece);
  }

 private:
  friend class Matcher;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace nanoddp::data

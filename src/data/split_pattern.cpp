#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/split_pattern.h"

#include <pcre2.h>

#include "core/error.h"

namespace nanoddp::data {

namespace {

// Unicode White_Space (what \s means to Rust's regex), as the body of a character class.
constexpr std::string_view kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string to_pcre2_syntax(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); i++) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[++i];
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (d == 'S') {
        NANODDP_CHECK(!in_class, "split pattern '{}': \\S inside a character class is not supported", p);
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

SplitPattern::SplitPattern(std::string pattern) : pattern_(std::move(pattern)) {
  const std::string translated = to_pcre2_syntax(pattern_);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  NANODDP_CHECK(code != nullptr, "split pattern '{}' does not compile (PCRE2: {} at offset {} of '{}')", pattern_,
                pcre2_message(error), offset, translated);
  code_ = code;
  // Without a JIT (an unusual PCRE2 build) matching falls back to the interpreter: slower, same result.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

SplitPattern::~SplitPattern() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

SplitPattern::Matcher::Matcher(const SplitPattern& pattern) : pattern_(&pattern) {
  match_data_ = pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(pattern.code_), nullptr);
  NANODDP_ASSERT(match_data_ != nullptr, "out of memory creating PCRE2 match data");
  if (pattern.jit_) {
    // Backtracking over a long run (a megabyte of spaces) needs more than the default 32 KiB stack.
    jit_stack_ = pcre2_jit_stack_create(32 << 10, 64 << 20, nullptr);
    context_ = pcre2_match_context_create(nullptr);
    NANODDP_ASSERT(jit_stack_ != nullptr && context_ != nullptr, "out of memory creating a PCRE2 JIT stack");
    pcre2_jit_stack_assign(static_cast<pcre2_match_context*>(context_), nullptr, jit_stack_);
  }
}

SplitPattern::Matcher::Matcher(Matcher&& o) noexcept
    : pattern_(o.pattern_), match_data_(o.match_data_), context_(o.context_), jit_stack_(o.jit_stack_),
      text_(o.text_), pos_(o.pos_), pending_end_(o.pending_end_) {
  o.match_data_ = o.context_ = o.jit_stack_ = nullptr;
}

SplitPattern::Matcher::~Matcher() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
  pcre2_match_context_free(static_cast<pcre2_match_context*>(context_));
  pcre2_jit_stack_free(static_cast<pcre2_jit_stack*>(jit_stack_));
}

bool SplitPattern::Matcher::next(std::string_view& piece) {
  if (pending_end_ > pos_) {  // the match found behind the gap returned last time
    piece = text_.substr(pos_, pending_end_ - pos_);
    pos_ = pending_end_;
    return true;
  }
  if (pos_ >= text_.size()) return false;
  auto* code = static_cast<pcre2_code*>(pattern_->code_);
  auto* md = static_cast<pcre2_match_data*>(match_data_);
  auto* subject = reinterpret_cast<PCRE2_SPTR>(text_.data());
  const int rc = pattern_->jit_ ? pcre2_jit_match(code, subject, text_.size(), pos_, 0, md,
                                                  static_cast<pcre2_match_context*>(context_))
                                : pcre2_match(code, subject, text_.size(), pos_, 0, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) {  // the rest of the text matches nothing: one gap piece
    piece = text_.substr(pos_);
    pos_ = text_.size();
    return true;
  }
  NANODDP_CHECK(rc > 0, "split pattern '{}' failed at byte {} of a {}-byte text: {}", pattern_->pattern_, pos_,
                text_.size(), pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  const size_t start = ov[0], end = ov[1];
  NANODDP_CHECK(end > start, "split pattern '{}' matched an empty string at byte {}; a split pattern must "
                "consume at least one character", pattern_->pattern_, start);
  if (start > pos_) {  // bytes no match covers (invalid UTF-8): a piece of their own
    piece = text_.substr(pos_, start - pos_);
    pos_ = start;
    pending_end_ = end;
    return true;
  }
  piece = text_.substr(start, end - start);
  pos_ = end;
  return true;
}

}  // namespace nanoddp::data

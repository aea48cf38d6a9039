#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/split_pattern.h"

#include <pcre2.h>

#include <utility>

#include "core/error.h"

namespace nanoddp::data {

namespace {

// Unicode White_Space (what \s means to Rust's regex), as the body of a character class.
constexpr std::string_view kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rust's POSIX classes are ASCII only; under PCRE2_UCP PCRE2's are Unicode ([:alpha:] is \p{L}). So
// each is written out as its ASCII ranges, as the body of a character class.
std::string_view posix_class_ascii(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kClasses[] = {
      {"alnum", "0-9A-Za-z"}, {"alpha", "A-Za-z"}, {"ascii", "\\x00-\\x7F"}, {"blank", "\\t "},
      {"cntrl", "\\x00-\\x1F\\x7F"}, {"digit", "0-9"}, {"graph", "!-~"}, {"lower", "a-z"},
      {"print", " -~"}, {"punct", "!-/:-@\\[-`{-~"}, {"space", "\\t\\n\\x0B\\f\\r "}, {"upper", "A-Z"},
      {"word", "0-9A-Za-z_"}, {"xdigit", "0-9A-Fa-f"}};
  for (const auto& [n, body] : kClasses)
    if (n == name) return body;
  return {};
}

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
    if (c == '[' && in_class) {
      // A POSIX class ([:alpha:]) becomes its ASCII ranges (posix_class_ascii). A nested class
      // ([a[b]], Rust's union) is not PCRE2's, which would read its ']' as the end of the outer class.
      const size_t close = p.find(":]", i + 2);
      NANODDP_CHECK(i + 1 < p.size() && p[i + 1] == ':' && close != std::string_view::npos,
                    "split pattern '{}': nested character classes (a '[' inside [...], offset {}) are not supported; "
                    "write the union as alternatives, or escape the '[' as \\[", p, i);
      const std::string_view name = p.substr(i + 2, close - i - 2), body = posix_class_ascii(name);
      NANODDP_CHECK(!body.empty(), "split pattern '{}': [:{}:] is not a POSIX class this translation knows (a "
                    "negated one, [:^name:], is not supported)", p, name);
      out += body;
      i = close + 1;
      continue;
    }
    // Rust's set operations inside a class; PCRE2 would read them as literal characters.
    NANODDP_CHECK(!in_class || !((c == '&' || c == '~') && i + 1 < p.size() && p[i + 1] == c),
                  "split pattern '{}': the class operation '{}{}' (offset {}) is not supported", p, c, c, i);
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

// Generated text as the tokens arrive (sample, chat, serve): everything so far is decoded each
// time and only the new part handed on, holding back the bytes of a UTF-8 character that the next
// token may complete (a piece of a multi-byte character decodes to no text of its own).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace nanoddp::chat {

// The length of `text` without a trailing UTF-8 character that is still incomplete (a lead byte
// followed by fewer continuation bytes than it announces). Invalid bytes are not waited for.
inline size_t complete_utf8_prefix(const std::string& text) {
  size_t i = text.size(), continuations = 0;
  while (i > 0 && continuations < 3 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) {
    i--;
    continuations++;
  }
  if (i == 0) return text.size();
  const unsigned char lead = static_cast<unsigned char>(text[i - 1]);
  const size_t announced = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  return continuations < announced ? i - 1 : text.size();
}

// The text of a growing reply in pieces that never split a character.
class Utf8Pieces {
 public:
  explicit Utf8Pieces(const data::Tokenizer& tok) : tok_(tok) {}
  // The new complete text after `id` ("" while a character is incomplete).
  std::string add(int32_t id) {
    ids_.push_back(id);
    const std::string text = tok_.decode(ids_);
    const size_t end = complete_utf8_prefix(text);
    if (end <= sent_) return "";
    std::string piece = text.substr(sent_, end - sent_);
    sent_ = end;
    return piece;
  }
  // What is left once the reply has ended.
  std::string finish() const { return tok_.decode(ids_).substr(sent_); }
  std::string text() const { return tok_.decode(ids_); }
  int64_t tokens() const { return static_cast<int64_t>(ids_.size()); }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  const data::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t sent_ = 0;
};

// Utf8Pieces printed to stdout, flushed after each piece: stdout is buffered, and text may go a long
// way without a newline.
class TextStream {
 public:
  explicit TextStream(const data::Tokenizer& tok) : pieces_(tok) {}
  void add(int32_t id) {
    fmt::print("{}", pieces_.add(id));
    std::fflush(stdout);
  }
  // Prints what is left and a newline; returns the whole text.
  std::string finish() {
    fmt::print("{}\n", pieces_.finish());
    return pieces_.text();
  }
  const std::vector<int32_t>& ids() const { return pieces_.ids(); }

 private:
  Utf8Pieces pieces_;
};

}  // namespace nanoddp::chat

// Prints generated text as the tokens arrive (sample, chat): everything so far is decoded and the
// new part printed, holding back the bytes of a UTF-8 character that the next token may complete.
// stdout is flushed after each piece: it is buffered, and text may go a long way without a newline.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace nanoddp::cli {

class TextStream {
 public:
  explicit TextStream(const data::Tokenizer& tok) : tok_(tok) {}

  void add(int32_t id) {
    ids_.push_back(id);
    const std::string text = tok_.decode(ids_);
    size_t end = text.size();
    while (end > printed_ && (static_cast<unsigned char>(text[end - 1]) & 0xC0) == 0x80) end--;  // continuation
    // Then the lead byte. This may hold back a complete character too; finish() prints it.
    if (end > printed_ && static_cast<unsigned char>(text[end - 1]) >= 0xC0) end--;
    fmt::print("{}", text.substr(printed_, end - printed_));
    std::fflush(stdout);
    printed_ = end;
  }

  // Prints what is left and a newline; returns the whole text.
  std::string finish() {
    const std::string text = tok_.decode(ids_);
    fmt::print("{}\n", text.substr(printed_));
    return text;
  }

  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  const data::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t printed_ = 0;
};

}  // namespace nanoddp::cli

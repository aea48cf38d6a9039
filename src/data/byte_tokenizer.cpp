// The byte-level tokenizer: every byte is its own token, followed by nanochat's special tokens.
// Used until a BPE vocabulary is trained, and as the tokenizer of last resort (it never fails).
#include "core/error.h"
#include "data/tokenizer.h"

namespace nanoddp::data {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int32_t vocab_size() const override { return 256 + static_cast<int32_t>(std::size(kNanochatSpecials)); }
  int32_t bos_id() const override { return 256; }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); i++) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      NANODDP_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the byte tokenizer's {} ids", id,
                    vocab_size());
      if (id < 256)
        out.push_back(static_cast<char>(id));
      else
        out += kNanochatSpecials[id - 256];
    }
    return out;
  }

  std::vector<int32_t> token_bytes() const override {
    std::vector<int32_t> bytes(vocab_size(), 0);
    for (int i = 0; i < 256; i++) bytes[i] = 1;
    return bytes;
  }

  std::vector<SpecialToken> special_tokens() const override {
    std::vector<SpecialToken> out;
    for (size_t i = 0; i < std::size(kNanochatSpecials); i++)
      out.push_back({std::string(kNanochatSpecials[i]), 256 + static_cast<int32_t>(i)});
    return out;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace nanoddp::data

// The tokenizer interface the data pipeline, the trainer (bits per byte) and `nanoddp sample` use.
// Implementations: the byte-level tokenizer (256 byte ids + nanochat's special tokens) and the
// byte-level BPE (our own trained vocabularies and tiktoken's gpt2 / cl100k_base / o200k_base).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanoddp::data {

// nanochat's special tokens, in id order after the ordinary vocabulary.
inline constexpr std::string_view kNanochatSpecials[] = {
    "<|bos|>",          "<|user_start|>",   "<|user_end|>",      "<|assistant_start|>", "<|assistant_end|>",
    "<|python_start|>", "<|python_end|>",   "<|output_start|>",  "<|output_end|>"};

struct SpecialToken {
  std::string text;
  int32_t id = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "bytes", "gpt2", a file path, ...: what load_tokenizer() was given.
  virtual std::string name() const = 0;
  // Number of ids, special tokens included (before the model pads it to a multiple of 64).
  virtual int32_t vocab_size() const = 0;
  // The id prepended to every document.
  virtual int32_t bos_id() const = 0;

  // Ordinary text: special-token strings in `text` are encoded as plain text.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Any byte sequence decodes; decode(encode(x)) == x for every byte string.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // Bytes each id stands for when decoded; 0 for special tokens (bits-per-byte counts these).
  virtual std::vector<int32_t> token_bytes() const = 0;

  // The special tokens (text and id), in id order.
  virtual std::vector<SpecialToken> special_tokens() const = 0;

  // Encodes many texts on `threads` threads (0: all cores); out[i] = encode(texts[i]).
  virtual std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts,
                                                         int threads = 0) const;

  // Like encode(), but occurrences of the special tokens named in `allowed` become their ids
  // (tiktoken's allowed_special); all special tokens when `allowed_all`.
  std::vector<int32_t> encode_with_specials(std::string_view text, std::span<const std::string> allowed,
                                            bool allowed_all = false) const;

  // The id of a special token; throws nanoddp::Error when this tokenizer has no such token.
  int32_t special_id(std::string_view text) const;
};

// "bytes" | "gpt2" | "cl100k_base" | "o200k_base" | path to a tokenizer file.
// Throws nanoddp::Error naming the spec when it cannot be loaded.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

// The number of threads a `threads` argument of 0 means: the cores this process may use.
int resolve_threads(int threads);

// The byte-level tokenizer: ids 0-255 are bytes, 256-264 nanochat's specials (<|bos|> = 256).
std::unique_ptr<Tokenizer> make_byte_tokenizer();

}  // namespace nanoddp::data

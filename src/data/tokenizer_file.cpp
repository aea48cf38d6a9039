#include "data/tokenizer_file.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "data/base64.h"
#include "data/bytes_map.h"

namespace nanoddp::data {

namespace fs = std::filesystem;

namespace {

// Collects (rank -> token bytes), checking that every rank and every token occurs once. Places are
// kept as numbers (line or token index) and turned into text by `where` only for a message.
class RankTable {
 public:
  using Where = std::function<std::string(int64_t place)>;
  // `limit`: ranks at or above it are refused at once. The table grows to the highest rank seen, so a
  // bogus rank must be refused before it asks for gigabytes; smaller gaps are reported by finish().
  RankTable(std::string source, Where where, int64_t limit)
      : source_(std::move(source)), where_(std::move(where)), limit_(limit) {}

  void add(int64_t rank, std::string bytes, int64_t place) {
    NANODDP_CHECK(rank >= 0 && rank < limit_, "{}: rank {} is out of range (ranks go from 0 to the number of tokens "
                  "minus one, and {} cannot have more than {})", where_(place), rank, source_, limit_);
    if (static_cast<size_t>(rank) >= tokens_.size()) {
      tokens_.resize(rank + 1);
      place_.resize(rank + 1, -1);
    }
    NANODDP_CHECK(place_[rank] < 0, "{}: rank {} appears twice (first at {})", where_(place), rank,
                  where_(place_[rank]));
    if (!seen_.insert(bytes, static_cast<uint32_t>(rank)))
      NANODDP_FAIL("{}: token bytes (base64 {}) appear twice (first at {})", where_(place), base64_encode(bytes),
                   where_(place_[*seen_.find(bytes)]));
    tokens_[rank] = std::move(bytes);
    place_[rank] = place;
  }

  // The tokens by rank; throws when a rank below the highest one is missing.
  std::vector<std::string> finish() {
    NANODDP_CHECK(!tokens_.empty(), "{}: no tokens", source_);
    for (size_t r = 0; r < tokens_.size(); r++)
      NANODDP_CHECK(place_[r] >= 0, "{}: rank {} is missing (ranks go up to {}; each of 0..{} must appear once)",
                    source_, r, tokens_.size() - 1, tokens_.size() - 1);
    return std::move(tokens_);
  }

 private:
  std::string source_;
  Where where_;
  int64_t limit_;
  std::vector<std::string> tokens_;  // [max rank + 1]
  std::vector<int64_t> place_;       // [max rank + 1] where each rank was defined, -1 = not yet
  BytesMap seen_;                    // token bytes -> rank
};

std::string cache_dir() {
  if (const char* c = std::getenv("NANODDP_CACHE"); c != nullptr && *c != '\0') return c;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/nanoddp";
}

// Special ids come after the ordinary tokens, with room for gaps like tiktoken's (cl100k_base leaves
// 100261-100275 unused). A farther id is a corrupt or hand-edited sidecar, and every table sized by
// the vocabulary (the embedding above all) would grow with it.
constexpr int64_t kMaxSpecialGap = 4096;

// Needs vocab.tokens (the ordinary tokens) to check the special ids against.
void read_sidecar(const std::string& path, BpeVocab& vocab) {
  const std::string side = sidecar_path(path);
  NANODDP_CHECK(fs::exists(side), "tokenizer file {} has no sidecar {} (it holds the split pattern and the "
                "special tokens; `nanoddp tokenizer train` writes both)", path, side);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_whole_file(side, "tokenizer sidecar"));
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("tokenizer sidecar {} is not valid JSON: {}", side, e.what());
  }
  try {
    NANODDP_CHECK(j.value("format", "") == "nanoddp-bpe", "tokenizer sidecar {}: \"format\" is not \"nanoddp-bpe\"",
                  side);
    vocab.pattern = j.at("pattern").get<std::string>();
    vocab.bos = j.at("bos").get<std::string>();
    const int64_t n = static_cast<int64_t>(vocab.tokens.size());
    for (auto& [text, id] : j.at("special_tokens").items()) {
      // An empty text would match everywhere: encoding with specials allowed would never advance.
      NANODDP_CHECK(!text.empty(), "tokenizer sidecar {}: special token id {} has an empty text; give it a name such "
                    "as \"<|bos|>\"", side, id.dump());
      // get<int32_t>() would quietly truncate 1e10 or 2.5; the check below needs the id as written.
      NANODDP_CHECK(id.is_number_integer(), "tokenizer sidecar {}: special token '{}' has id {}, which is not an "
                    "integer", side, text, id.dump());
      const int64_t v = id.get<int64_t>();
      NANODDP_CHECK(v >= n && v < n + kMaxSpecialGap, "tokenizer sidecar {}: special token '{}' has id {}, but {} has "
                    "{} ordinary tokens, so special ids must lie in [{}, {}); is the sidecar from another tokenizer "
                    "file? Re-create both with `nanoddp tokenizer train`", side, text, v, path, n, n,
                    n + kMaxSpecialGap);
      vocab.specials.push_back({text, static_cast<int32_t>(v)});
    }
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("tokenizer sidecar {}: {} (expected \"pattern\", \"bos\" and \"special_tokens\")", side, e.what());
  }
}

}  // namespace

std::string sidecar_path(const std::string& path) { return path + ".json"; }

void copy_tokenizer_file(const std::string& src, const std::string& dest) {
  namespace fs = std::filesystem;
  fs::copy_file(src, dest, fs::copy_options::overwrite_existing);
  if (fs::exists(sidecar_path(src)))
    fs::copy_file(sidecar_path(src), sidecar_path(dest), fs::copy_options::overwrite_existing);
}

BpeVocab read_tokenizer_file(const std::string& path) {
  const std::string text = read_whole_file(path, "tokenizer file");
  // One token per line: a rank far beyond the line count is corrupt. The slack lets a modest gap be
  // reported by finish() as the missing rank it is.
  const int64_t lines = std::count(text.begin(), text.end(), '\n') + (!text.empty() && text.back() != '\n');
  RankTable table(path, [&](int64_t line) { return fmt::format("{}:{}", path, line); }, 2 * lines + 1024);
  int64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    line_no++;
    // As tiktoken's loader (splitlines): a CRLF file reads the same, and blank lines are skipped.
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    auto where = [&] { return fmt::format("{}:{}", path, line_no); };  // formatted only for a message
    const size_t space = line.find(' ');
    NANODDP_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos,
                  "{}: expected \"base64 rank\", got '{}'", where(), line.substr(0, 80));
    auto bytes = base64_decode(line.substr(0, space));
    NANODDP_CHECK(bytes && !bytes->empty(), "{}: '{}' is not the base64 of a non-empty token", where(),
                  line.substr(0, std::min<size_t>(space, 80)));
    std::string_view rank_text = line.substr(space + 1);
    int64_t rank = -1;
    auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    NANODDP_CHECK(ec == std::errc() && end == rank_text.data() + rank_text.size(), "{}: rank '{}' is not an integer",
                  where(), rank_text.substr(0, 40));
    table.add(rank, std::move(*bytes), line_no);
  }
  BpeVocab vocab;
  vocab.name = path;
  vocab.tokens = table.finish();
  read_sidecar(path, vocab);
  return vocab;
}

void write_tokenizer_file(const std::string& path, const BpeVocab& vocab) {
  std::string ranks;
  for (size_t r = 0; r < vocab.tokens.size(); r++) ranks += fmt::format("{} {}\n", base64_encode(vocab.tokens[r]), r);
  nlohmann::json side;
  side["format"] = "nanoddp-bpe";
  side["version"] = 1;
  side["pattern"] = vocab.pattern;
  side["bos"] = vocab.bos;
  side["special_tokens"] = nlohmann::json::object();
  for (const auto& s : vocab.specials) side["special_tokens"][s.text] = s.id;
  write_file_atomically(path, ranks);
  write_file_atomically(sidecar_path(path), side.dump(2) + "\n");
}

bool is_npm_encoding(const std::string& name) {
  return name == "gpt2" || name == "cl100k_base" || name == "o200k_base";
}

std::string npm_modules_dir() { return cache_dir() + "/npm/node_modules"; }

std::string npm_package_dir(const std::string& package) {
  const std::string dir = npm_modules_dir() + "/" + package;
  NANODDP_CHECK(fs::is_directory(dir), "npm package '{}' is not installed ({} is missing); run scripts/setup.sh "
                "--no-build, which installs scripts/npm/package.json into $NANODDP_CACHE/npm", package, dir);
  return dir;
}

BpeVocab read_npm_encoding(const std::string& name) {
  NANODDP_CHECK(is_npm_encoding(name), "unknown tiktoken encoding '{}' (have gpt2, cl100k_base, o200k_base)", name);
  const std::string path = npm_package_dir("tiktoken") + "/encoders/" + name + ".json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_whole_file(path, "tiktoken table"));
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("tiktoken table {} is not valid JSON: {}", path, e.what());
  }
  BpeVocab vocab;
  vocab.name = name;
  vocab.bos = "<|endoftext|>";
  // tiktoken's largest table (o200k_base) has 200,000 tokens; 2^24 leaves room and still bounds the table.
  RankTable table(path, [&](int64_t k) { return fmt::format("{}, bpe_ranks token {}", path, k); }, int64_t{1} << 24);
  try {
    vocab.pattern = j.at("pat_str").get<std::string>();
    for (auto& [text, id] : j.at("special_tokens").items()) vocab.specials.push_back({text, id.get<int32_t>()});
    // bpe_ranks: lines of "PREFIX FIRST_RANK token token ...", tokens in base64 with consecutive ranks.
    const std::string& ranks = j.at("bpe_ranks").get_ref<const std::string&>();
    std::istringstream lines(ranks);
    std::string line;
    int64_t index = 0;  // tokens read so far, over all lines
    for (int line_no = 1; std::getline(lines, line); line_no++) {
      if (line.empty()) continue;
      std::istringstream fields(line);
      std::string prefix, token;
      int64_t rank = -1;
      fields >> prefix >> rank;
      NANODDP_CHECK(!fields.fail(), "{}: bpe_ranks line {} does not start with \"PREFIX RANK\"", path, line_no);
      for (; fields >> token; index++, rank++) {
        auto bytes = base64_decode(token);
        NANODDP_CHECK(bytes && !bytes->empty(), "{}, bpe_ranks token {}: '{}' is not base64", path, index,
                      token.substr(0, 80));
        table.add(rank, std::move(*bytes), index);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("tiktoken table {}: {} (expected \"pat_str\", \"special_tokens\" and \"bpe_ranks\")", path, e.what());
  }
  vocab.tokens = table.finish();
  return vocab;
}

}  // namespace nanoddp::data

#include "data/dataset.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "data/tokenizer_file.h"

namespace nanoddp::data {

namespace fs = std::filesystem;

namespace {

bool is_builtin(const std::string& spec) { return spec == "bytes" || is_npm_encoding(spec); }

}  // namespace

DatasetMeta read_dataset_meta(const std::string& dir) {
  const std::string path = (fs::path(dir) / "meta.json").string();
  // nanoGPT's habit: --data input.txt. The text must be prepared into a dataset folder first.
  NANODDP_CHECK(!fs::is_regular_file(dir), "--data {} is a file, but training reads a prepared dataset folder: "
                "prepare the text first with `nanoddp data prepare --input {} --out data`, then train with --data data",
                dir, dir);
  std::ifstream in(path);
  NANODDP_CHECK(in.good(), "{} is missing: {} is not a prepared dataset (run `nanoddp data prepare --out {}`)", path,
                dir, dir);
  DatasetMeta m;
  m.dir = dir;
  try {
    const auto j = nlohmann::json::parse(in);
    NANODDP_CHECK(j.value("format", "") == kDatasetFormat, "{}: \"format\" is not \"{}\"", path, kDatasetFormat);
    m.tokenizer = j.at("tokenizer").get<std::string>();
    m.vocab_size = j.at("vocab_size").get<int32_t>();
    m.bos_id = j.at("bos_id").get<int32_t>();
    m.token_width = j.at("token_width").get<int32_t>();
    m.shard_tokens = j.at("shard_tokens").get<int64_t>();
    m.val_every = j.at("val_every").get<int32_t>();
    m.val_split = j.value("val_split", "");
    m.text_split = j.value("text_split", "");
    m.train_documents = j.at("documents").at("train").get<int64_t>();
    m.val_documents = j.at("documents").at("val").get<int64_t>();
    m.train_tokens = j.at("tokens").at("train").get<int64_t>();
    m.val_tokens = j.at("tokens").at("val").get<int64_t>();
    m.chars = j.at("chars").get<int64_t>();
    m.bytes = j.at("bytes").get<int64_t>();
    for (auto& s : j.at("shards").at("train")) m.train_shards.push_back((fs::path(dir) / s.get<std::string>()).string());
    for (auto& s : j.at("shards").at("val")) m.val_shards.push_back((fs::path(dir) / s.get<std::string>()).string());
  } catch (const nlohmann::json::exception& e) {
    NANODDP_FAIL("{} is corrupt: {}; re-run `nanoddp data prepare`", path, e.what());
  }
  NANODDP_CHECK(m.vocab_size > 0 && m.bos_id >= 0 && m.bos_id < m.vocab_size && (m.token_width == 2 || m.token_width == 4),
                "{} is corrupt: vocab_size {}, bos_id {}, token_width {}", path, m.vocab_size, m.bos_id, m.token_width);
  NANODDP_CHECK(!m.train_shards.empty() && !m.val_shards.empty(), "{} lists no {} shards", path,
                m.train_shards.empty() ? "train" : "val");
  for (const auto* list : {&m.train_shards, &m.val_shards})
    for (const auto& s : *list)
      NANODDP_CHECK(fs::is_regular_file(s), "{} lists shard {}, which is missing; re-run `nanoddp data prepare`", path,
                    s);
  return m;
}

void write_dataset_meta(const DatasetMeta& m) {
  auto names = [](const std::vector<std::string>& paths) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : paths) a.push_back(fs::path(p).filename().string());
    return a;
  };
  nlohmann::json j = {
      {"format", kDatasetFormat},
      {"version", 1},
      {"tokenizer", m.tokenizer},
      {"vocab_size", m.vocab_size},
      {"bos_id", m.bos_id},
      {"token_width", m.token_width},
      {"shard_tokens", m.shard_tokens},
      {"val_every", m.val_every},
      {"val_split", m.val_split},
      {"text_split", m.text_split},
      {"documents", {{"train", m.train_documents}, {"val", m.val_documents}}},
      {"tokens", {{"train", m.train_tokens}, {"val", m.val_tokens}}},
      {"chars", m.chars},
      {"bytes", m.bytes},
      {"shards", {{"train", names(m.train_shards)}, {"val", names(m.val_shards)}}},
  };
  const std::string path = (fs::path(m.dir) / "meta.json").string();
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << j.dump(2) << '\n';
    NANODDP_CHECK(out.good(), "cannot write {}.tmp", path);
  }
  fs::rename(path + ".tmp", path);
}

std::unique_ptr<Tokenizer> load_dataset_tokenizer(const std::string& dir) {
  const DatasetMeta m = read_dataset_meta(dir);
  const std::string spec = is_builtin(m.tokenizer) ? m.tokenizer : (fs::path(dir) / m.tokenizer).string();
  // A trained tokenizer is a file of the dataset: its absence is a damaged dataset, not an unknown name.
  NANODDP_CHECK(is_builtin(m.tokenizer) || fs::is_regular_file(spec), "dataset {}: its tokenizer file {} (named in "
                "{}/meta.json) is missing; copy it back or prepare the dataset again", dir, spec, dir);
  auto tok = load_tokenizer(spec);
  NANODDP_CHECK(tok->vocab_size() == m.vocab_size && tok->bos_id() == m.bos_id, "tokenizer {} has vocab_size {} and "
                "bos_id {}, but {}/meta.json says {} and {}; the dataset and its tokenizer do not belong together",
                spec, tok->vocab_size(), tok->bos_id(), dir, m.vocab_size, m.bos_id);
  return tok;
}

bool is_prepared_dataset(const std::string& dir) {
  std::error_code ec;
  const fs::path path = fs::path(dir) / "meta.json";
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path);
  // allow_exceptions = false: a file that is not JSON parses to a "discarded" value.
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return false;
  const auto it = j.find("format");
  return it != j.end() && it->is_string() && it->get<std::string>() == kDatasetFormat;
}

bool is_dataset_file_name(const std::string& name) {
  static const std::regex ours(R"((train|val)_[0-9]+\.bin(\.tmp)?|meta\.json(\.tmp)?|tokenizer\.tiktoken(\.json)?)");
  return std::regex_match(name, ours);
}

bool is_prepare_staging_dir(const std::string& dir) {
  static const std::regex name(R"(.+\.tmp-[0-9]+)");
  static const std::regex all_shard(R"(all_[0-9]+\.bin(\.tmp)?)");
  const fs::path p = fs::path(dir).lexically_normal();
  if (!std::regex_match((p.has_filename() ? p : p.parent_path()).filename().string(), name)) return false;
  // A user's folder that merely has such a name holds other files too.
  std::error_code ec;
  for (auto it = fs::directory_iterator(p, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (!it->is_regular_file(ec) || !(is_dataset_file_name(f) || std::regex_match(f, all_shard))) return false;
  }
  return !ec;
}

}  // namespace nanoddp::data

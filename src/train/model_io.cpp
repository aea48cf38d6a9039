#include "train/model_io.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/safetensors.h"
#include "data/dataset.h"
#include "data/tokenizer_file.h"
#include "train/checkpoint.h"
#include "train/run_folder.h"
#include "train/validate.h"

namespace nanoddp::train {

namespace fs = std::filesystem;

namespace {
// Prefixed, so it cannot clash with metadata keys other tools write.
constexpr const char* kConfigKey = "nanoddp.model_config";

// The rotary tables hold 10x the context (model/config.h) and are allocated up front; a context
// beyond this is a corrupt file or a typo, not a model nanoddp could train.
constexpr int64_t kMaxImportSeqLen = int64_t{1} << 20;

// A tensor's shape, required to be a matrix: the indexing below must not meet a 1-d tensor.
Shape matrix_shape(const SafetensorsFile& f, const std::string& name) {
  const Shape s = f.shape(name);
  NANODDP_CHECK(s.ndim() == 2, "{}: tensor '{}' has shape {}, but a matrix was expected; is this a GPT checkpoint in "
                "nanochat's layout?", f.path(), name, s.str());
  return s;
}

// The model config of an imported file: its nanoddp metadata, else inferred from nanochat's tensor
// names and the flags. `dataset_vocab` (0: none) stands in for a missing --vocab_size.
model::GPTConfig import_config(const SafetensorsFile& f, const ImportOptions& o, int64_t dataset_vocab) {
  model::GPTConfig c;
  auto it = f.metadata().find(kConfigKey);
  if (it != f.metadata().end()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(it->second);
    } catch (const nlohmann::json::exception& e) {
      NANODDP_FAIL("{}: metadata {} is not valid JSON ({}); the file is corrupt", f.path(), kConfigKey, e.what());
    }
    c = model::GPTConfig::from_json(j);
  } else {
    // A file from elsewhere (e.g. nanochat): infer the shape from the tensors.
    const Shape wte = matrix_shape(f, "transformer.wte.weight");
    c.n_embd = wte[1];
    // Before n_embd divides anything below.
    NANODDP_CHECK(c.n_embd >= 2, "{}: transformer.wte.weight is {}: no embedding dimension", f.path(), wte.str());
    while (f.contains(fmt::format("transformer.h.{}.attn.c_q.weight", c.n_layer))) c.n_layer++;
    NANODDP_CHECK(c.n_layer > 0, "{} has no transformer.h.0.attn.c_q.weight: not a GPT in nanochat's layout",
                  f.path());
    // nanochat's rule: heads of 128 dimensions, rounded up (--head_dim's default).
    c.n_head = o.n_head > 0 ? o.n_head : (c.n_embd + 127) / 128;
    NANODDP_CHECK(c.n_embd % c.n_head == 0, "{}: model_dim {} does not divide into {} heads; pass the model's "
                  "--n_head", f.path(), c.n_embd, c.n_head);
    // c_k has n_kv_head * head_dim rows.
    c.n_kv_head = matrix_shape(f, "transformer.h.0.attn.c_k.weight")[0] / (c.n_embd / c.n_head);
    // wte's rows are the padded vocabulary: the true size cannot be read off the tensors.
    c.vocab_size = o.vocab_size > 0 ? o.vocab_size : dataset_vocab;
    NANODDP_CHECK(c.vocab_size > 0, "{} has no nanoddp metadata: pass --vocab_size (the tokenizer's, before padding "
                  "to {}) or --data (the dataset the model was trained on)", f.path(), wte[0]);
    c.max_seq_len = o.max_seq_len;
    // nanochat's 2026 model has per-layer scalars; its window pattern is not in the tensors: its
    // default, SSSL.
    if (f.contains("resid_lambdas")) {
      c.recipe = model::Recipe::R2026;
      c.rope_base = 100000.f;
      c.window_pattern = "SSSL";
    }
    c.validate();
  }
  NANODDP_CHECK(c.max_seq_len <= kMaxImportSeqLen, "{}: max_seq_len {} is beyond the {} nanoddp supports; pass a "
                "smaller --max_seq_len (nanochat's is 2048)", f.path(), c.max_seq_len, kMaxImportSeqLen);
  return c;
}

// The embedding and the layer count against the file, before GPT allocates a model of config `c`: a
// config that disagrees with the tensors (a wrong --vocab_size, corrupt metadata) is reported here
// in the user's terms rather than as one tensor's shape, and never allocates more than the file holds.
void check_config_matches_file(const SafetensorsFile& f, const model::GPTConfig& c) {
  const Shape wte = matrix_shape(f, "transformer.wte.weight");
  NANODDP_CHECK(wte[1] == c.n_embd, "{}: the model config says model_dim {}, but transformer.wte.weight is {}; the "
                "file is corrupt or its metadata belongs to another model", f.path(), c.n_embd, wte.str());
  NANODDP_CHECK(wte[0] == c.padded_vocab(), "{}: transformer.wte.weight is {}, but vocab_size {} pads to {} rows; the "
                "vocabulary must be the tokenizer's, between {} and {} for this file", f.path(), wte.str(),
                c.vocab_size, c.padded_vocab(), std::max<int64_t>(2, wte[0] - 63), wte[0]);
  NANODDP_CHECK(f.contains(fmt::format("transformer.h.{}.attn.c_q.weight", c.n_layer - 1)) &&
                    !f.contains(fmt::format("transformer.h.{}.attn.c_q.weight", c.n_layer)),
                "{}: the model config says {} layers, but the file's transformer.h.* tensors do not; the file is "
                "corrupt or its metadata belongs to another model", f.path(), c.n_layer);
}

bool is_builtin_tokenizer(const std::string& spec) { return spec == "bytes" || data::is_npm_encoding(spec); }

// Refuses a dataset whose tokenizer cannot be the model's: its ids would index another embedding,
// and the checkpoint would fail (or produce garbage) only when used.
void check_dataset_matches(const SafetensorsFile& f, const model::GPTConfig& c, const data::DatasetMeta& d) {
  NANODDP_CHECK(c.vocab_size == d.vocab_size, "--data {} was tokenized with {} ({} ids), but the model in {} has a "
                "vocabulary of {}; pass the dataset the model was trained on", d.dir, d.tokenizer, d.vocab_size,
                f.path(), c.vocab_size);
  auto it = f.metadata().find("nanoddp.tokenizer");
  if (it == f.metadata().end()) return;
  // Two built-in names are comparable as they are; a trained tokenizer file is known only by its
  // vocabulary size, checked above.
  NANODDP_CHECK(!is_builtin_tokenizer(it->second) || !is_builtin_tokenizer(d.tokenizer) || it->second == d.tokenizer,
                "--data {} was tokenized with {}, but the model in {} was trained with {}; pass the dataset the "
                "model was trained on", d.dir, d.tokenizer, f.path(), it->second);
}

// write_model_checkpoint, leaving nothing behind when it fails: not OUT/checkpoints/step_000000.tmp,
// nor the directories created for it.
void write_imported_checkpoint(const std::string& out, const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const nlohmann::json& meta) {
  const fs::path checkpoints = fs::path(out) / "checkpoints";
  std::vector<fs::path> created;  // innermost first
  std::error_code ec;
  for (fs::path p = fs::absolute(checkpoints); p != p.root_path(); p = p.parent_path()) {
    if (fs::exists(p, ec) || ec) break;
    created.push_back(p);
  }
  auto clean_up = [&] {
    std::error_code ignored;
    fs::remove_all(checkpoint_dir(out, 0) + ".tmp", ignored);
    // remove() takes only empty directories: nothing that appeared in them meanwhile is lost.
    for (const auto& p : created)
      if (fs::is_directory(fs::symlink_status(p, ignored))) fs::remove(p, ignored);
  };
  fs::create_directories(checkpoints, ec);
  if (ec) {
    clean_up();
    NANODDP_FAIL("cannot create {}: {}; make --out writable or choose another --out", checkpoints.string(),
                 ec.message());
  }
  try {
    write_model_checkpoint(out, 0, tensors, meta);
  } catch (const Error&) {
    clean_up();
    throw;
  } catch (const std::exception& e) {  // filesystem_error from a rename or a directory removal
    clean_up();
    NANODDP_FAIL("cannot write the checkpoint into --out {}: {}", out, e.what());
  }
}

}  // namespace

bool all_finite(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.copy_to(Device::cpu());
  if (h.dtype() != DType::F32) return true;  // only f32 master weights are checked
  const float* p = h.data<float>();
  for (int64_t i = 0; i < h.numel(); i++)
    if (!std::isfinite(p[i])) return false;
  return true;
}

std::unique_ptr<model::GPT> load_model(const std::string& dir, Device device, const std::string& dtype) {
  const DType act = activation_dtype(dtype, device);
  const auto meta = read_checkpoint_meta(dir);
  NANODDP_CHECK(meta.contains("model_config"), "{}/meta.json has no model_config", dir);
  auto config = model::GPTConfig::from_json(meta.at("model_config"));
  auto gpt = std::make_unique<model::GPT>(config, device, act);
  SafetensorsFile weights(dir + "/" + CheckpointFiles().model);
  for (auto& p : gpt->parameters()) weights.read_into(p.name, p.data);
  // As resume: one NaN would make every logit NaN, and sampling would print garbage and succeed.
  for (const auto& p : gpt->parameters())
    NANODDP_CHECK(all_finite(p.data), "{}: parameter {} holds NaN or infinite values; the model cannot be used. "
                  "Use an earlier checkpoint of the run", weights.path(), p.name);
  // The file holds the f32 master weights; the activation-dtype copies are derived from them.
  gpt->refresh_compute_weights();
  return gpt;
}

// Where a checkpoint's trained tokenizer file is: the run folder's copy, else the recorded dataset's;
// "" when neither exists.
// The run folder's copy of a trained tokenizer: the trainer keeps one in OUT/tokenizer/ (dir is
// OUT/checkpoints/step_N), so a run is self-contained.
static fs::path run_tokenizer_copy(const std::string& dir, const std::string& spec) {
  return fs::path(dir).parent_path().parent_path() / "tokenizer" / fs::path(spec).filename();
}

static std::string tokenizer_file_of(const std::string& dir, const std::string& spec) {
  const fs::path own = run_tokenizer_copy(dir, spec);
  if (fs::is_regular_file(own)) return own.string();
  const auto meta = read_checkpoint_meta(dir);
  const fs::path recorded = fs::path(meta.value("data_dir", "")) / spec;
  return fs::is_regular_file(recorded) ? recorded.string() : "";
}

void check_dataset_tokenizer(const std::string& dir, const std::string& data_dir) {
  const auto meta = read_checkpoint_meta(dir);
  const std::string spec = meta.value("tokenizer", "");
  // By name first: another built-in tokenizer, or a trained file for a built-in one (or the other
  // way round), maps the same ids to other text. Was: sample failed on an id outside the model's
  // vocabulary, or printed text decoded with the wrong table and exited 0.
  // (A --data that is not a prepared dataset, such as sft's conversations, has no tokenizer to compare.)
  if (!data::is_prepared_dataset(data_dir)) return;
  const std::string theirs_spec = data::read_dataset_meta(data_dir).tokenizer;
  const bool same_name = spec.ends_with(".tiktoken")
                             ? fs::path(theirs_spec).filename() == fs::path(spec).filename()
                             : theirs_spec == spec;
  NANODDP_CHECK(spec.empty() || same_name, "dataset {} was tokenized with {}, but checkpoint {} was trained with {}: "
                "the same ids would be other text; give --data the dataset it was trained on, or leave --data out",
                data_dir, theirs_spec, dir, spec);
  if (!spec.ends_with(".tiktoken")) return;  // a built-in tokenizer is the same wherever it is named
  const fs::path own = run_tokenizer_copy(dir, spec), theirs = fs::path(data_dir) / fs::path(spec).filename();
  if (!fs::is_regular_file(own) || !fs::is_regular_file(theirs)) return;
  // The sidecar too: it holds the special tokens and the split pattern. Compared as JSON, so that a
  // sidecar written again in another layout still counts as the same.
  const std::string own_side = data::sidecar_path(own), their_side = data::sidecar_path(theirs.string());
  auto sidecar = [](const std::string& path) {
    if (!fs::is_regular_file(path)) return nlohmann::json();
    const std::string text = read_whole_file(path, "tokenizer sidecar");
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    return j.is_discarded() ? nlohmann::json(text) : j;
  };
  NANODDP_CHECK(read_whole_file(own, "tokenizer") == read_whole_file(theirs, "tokenizer") &&
                    sidecar(own_side) == sidecar(their_side),
                "the tokenizer of dataset {} ({}) is not the one checkpoint {} was trained with (its run keeps that "
                "one at {}); the same ids would be other text: give the dataset it was trained on",
                data_dir, theirs.string(), dir, own.string());
}

std::unique_ptr<data::Tokenizer> load_checkpoint_tokenizer(const std::string& dir, const std::string& data_dir) {
  if (!data_dir.empty()) {
    check_dataset_tokenizer(dir, data_dir);
    return data::load_dataset_tokenizer(data_dir);
  }
  const auto meta = read_checkpoint_meta(dir);
  // The run's own copy first: the dataset folder may have been prepared again since, with another
  // tokenizer of the same size.
  const std::string spec = meta.value("tokenizer", "");
  const fs::path own = run_tokenizer_copy(dir, spec);
  if (!spec.empty() && fs::is_regular_file(own)) return data::load_tokenizer(own.string());
  // The dataset recorded at training time (an absolute path), if it is still there.
  const std::string recorded = meta.value("data_dir", "");
  if (!recorded.empty() && fs::exists(recorded + "/meta.json")) return data::load_dataset_tokenizer(recorded);
  // Otherwise only a built-in tokenizer (bytes, gpt2, ...) can be rebuilt from its name; a trained
  // .tiktoken file lived in the dataset directory.
  NANODDP_CHECK(!spec.empty() && !spec.ends_with(".tiktoken"), "cannot find the tokenizer of {}: its dataset {} is "
                "gone; pass --data DIR (the prepared dataset)", dir, recorded.empty() ? "(unrecorded)" : recorded);
  return data::load_tokenizer(spec);  // a built-in tokenizer needs no dataset
}

void export_safetensors(const std::string& dir, const std::string& file) {
  const std::string tmp = file + ".tmp";
  // Before any work: each of these would otherwise fail only at the final rename, after FILE.tmp is
  // written (the rename of a file onto a directory is refused).
  NANODDP_CHECK(!file.empty(), "--out is empty; give the .safetensors file to write");
  std::error_code ec;
  NANODDP_CHECK(!fs::is_directory(file, ec), "--out {} is a directory; remove it or choose another path for the "
                ".safetensors file", file);
  const fs::path parent = fs::absolute(file).parent_path();
  NANODDP_CHECK(fs::is_directory(parent, ec), "--out {}: {} is not a directory{}; create it or choose another --out",
                file, parent.string(), ec ? " (" + ec.message() + ")" : "");
  const auto meta = read_checkpoint_meta(dir);
  NANODDP_CHECK(meta.contains("model_config"), "{}/meta.json has no model_config; is {} a nanoddp checkpoint?", dir,
                dir);
  SafetensorsFile weights(dir + "/" + CheckpointFiles().model);
  SafetensorsWriter w;
  for (const auto& name : weights.names()) w.add(name, weights.read(name));
  // "format": "pt" is what PyTorch's safetensors writers record; Hugging Face loaders check it.
  w.set_metadata("format", "pt");
  w.set_metadata(kConfigKey, meta.at("model_config").dump());
  if (meta.contains("tokenizer")) {
    NANODDP_CHECK(meta["tokenizer"].is_string(), "{}/meta.json: \"tokenizer\" is {}, not a string", dir,
                  meta["tokenizer"].dump());
    w.set_metadata("nanoddp.tokenizer", meta["tokenizer"].get<std::string>());
  }
  // No FILE.tmp is left behind, whatever fails.
  try {
    w.write(tmp);
    fs::rename(tmp, file);
    // A trained tokenizer travels with the weights: FILE's name with .tiktoken (and its .json).
    const std::string spec = meta.value("tokenizer", "");
    if (spec.ends_with(".tiktoken")) {
      const fs::path base = fs::path(file).replace_extension(".tiktoken");
      const std::string src = tokenizer_file_of(dir, spec);
      if (!src.empty()) data::copy_tokenizer_file(src, base.string());
    }
  } catch (const Error&) {
    fs::remove(tmp, ec);
    throw;
  } catch (const fs::filesystem_error& e) {
    fs::remove(tmp, ec);
    NANODDP_FAIL("cannot write --out {}: {}", file, e.what());
  }
}

std::string import_safetensors(const ImportOptions& o) {
  NANODDP_CHECK(!o.out.empty(), "--out is empty; give the run directory to create the checkpoint in");
  std::error_code ec;
  NANODDP_CHECK(!fs::exists(o.out, ec) || fs::is_directory(o.out, ec), "--out {} exists and is not a directory; "
                "import writes a run directory (OUT/checkpoints/step_000000): choose another --out", o.out);
  NANODDP_CHECK(o.vocab_size >= 0 && o.n_head >= 0, "--vocab_size and --n_head must be positive (or 0 for the "
                "default; got {} and {})", o.vocab_size, o.n_head);
  // Another run's folder, or an earlier import, is never written into: its step 0 would be replaced.
  const std::string existing = describe_run(o.out);
  NANODDP_CHECK(existing.empty() || o.overwrite, "--out {} holds {}: choose another --out, or pass --overwrite to "
                "move it aside (it is never deleted)", o.out, existing);
  // The dataset first: it is cheap to read, and it may supply the vocabulary of a foreign file.
  std::optional<data::DatasetMeta> dataset;
  if (!o.data.empty()) dataset = data::read_dataset_meta(o.data);
  SafetensorsFile f(o.input);
  const model::GPTConfig c = import_config(f, o, dataset ? dataset->vocab_size : 0);
  if (dataset) check_dataset_matches(f, c, *dataset);
  check_config_matches_file(f, c);

  model::GPT gpt(c, Device::cpu());  // checks every name and shape while reading
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& p : gpt.parameters()) {
    f.read_into(p.name, p.data);
    tensors.emplace_back(p.name, p.data);
  }
  // Complete for what it is: a model-only checkpoint, from which training can start but not resume
  // (no optimizer state, no data position, and no world size to resume with).
  nlohmann::json meta = {{"step", 0},
                         {"model_config", c.to_json()},
                         {"imported_from", o.input},
                         {"model_only", true},
                         {"world_size", nullptr}};
  // Absolute, so `nanoddp sample` finds the dataset from any working directory.
  if (!o.data.empty()) meta["data_dir"] = fs::absolute(o.data).string();
  auto tok = f.metadata().find("nanoddp.tokenizer");
  if (tok != f.metadata().end()) meta["tokenizer"] = tok->second;
  if (!existing.empty()) fmt::print("--overwrite: moved {} aside to {}\n", o.out, move_run_aside(o.out));
  write_imported_checkpoint(o.out, tensors, meta);
  return checkpoint_dir(o.out, 0);
}

}  // namespace nanoddp::train

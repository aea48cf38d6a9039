#include "train/model_io.h"

#include <filesystem>

#include "core/safetensors.h"
#include "data/dataset.h"
#include "train/checkpoint.h"

namespace nanoddp::train {

namespace {
// Prefixed, so it cannot clash with metadata keys other tools write.
constexpr const char* kConfigKey = "nanoddp.model_config";
}

std::unique_ptr<model::GPT> load_model(const std::string& dir, Device device) {
  const auto meta = read_checkpoint_meta(dir);
  NANODDP_CHECK(meta.contains("model_config"), "{}/meta.json has no model_config", dir);
  auto config = model::GPTConfig::from_json(meta.at("model_config"));
  auto gpt = std::make_unique<model::GPT>(config, device, device.is_cuda() ? DType::BF16 : DType::F32);
  SafetensorsFile weights(dir + "/" + CheckpointFiles().model);
  for (auto& p : gpt->parameters()) weights.read_into(p.name, p.data);
  // The file holds the f32 master weights; the activation-dtype copies are derived from them.
  gpt->refresh_compute_weights();
  return gpt;
}

std::unique_ptr<data::Tokenizer> load_checkpoint_tokenizer(const std::string& dir, const std::string& data_dir) {
  if (!data_dir.empty()) return data::load_dataset_tokenizer(data_dir);
  const auto meta = read_checkpoint_meta(dir);
  // The dataset recorded at training time (an absolute path), if it is still there.
  const std::string recorded = meta.value("data_dir", "");
  if (!recorded.empty() && std::filesystem::exists(recorded + "/meta.json")) return data::load_dataset_tokenizer(recorded);
  const std::string spec = meta.value("tokenizer", "");
  // Otherwise only a built-in tokenizer (bytes, gpt2, ...) can be rebuilt from its name; a trained
  // .tiktoken file lived in the dataset directory.
  NANODDP_CHECK(!spec.empty() && !spec.ends_with(".tiktoken"), "cannot find the tokenizer of {}: its dataset {} is "
                "gone; pass --data DIR (the prepared dataset)", dir, recorded.empty() ? "(unrecorded)" : recorded);
  return data::load_tokenizer(spec);  // a built-in tokenizer needs no dataset
}

void export_safetensors(const std::string& dir, const std::string& file) {
  const auto meta = read_checkpoint_meta(dir);
  SafetensorsFile weights(dir + "/" + CheckpointFiles().model);
  SafetensorsWriter w;
  for (const auto& name : weights.names()) w.add(name, weights.read(name));
  // "format": "pt" is what PyTorch's safetensors writers record; Hugging Face loaders check it.
  w.set_metadata("format", "pt");
  w.set_metadata(kConfigKey, meta.at("model_config").dump());
  if (meta.contains("tokenizer")) w.set_metadata("nanoddp.tokenizer", meta["tokenizer"].get<std::string>());
  const std::string tmp = file + ".tmp";
  w.write(tmp);
  std::filesystem::rename(tmp, file);
}

std::string import_safetensors(const ImportOptions& o) {
  SafetensorsFile f(o.input);
  model::GPTConfig c;
  auto it = f.metadata().find(kConfigKey);
  if (it != f.metadata().end()) {
    c = model::GPTConfig::from_json(nlohmann::json::parse(it->second));
  } else {
    // A file from elsewhere (e.g. nanochat): infer the shape from the tensors.
    const Shape wte = f.shape("transformer.wte.weight");
    c.n_embd = wte[1];
    while (f.contains(fmt::format("transformer.h.{}.attn.c_q.weight", c.n_layer))) c.n_layer++;
    // nanochat's rule: heads of 128 dimensions, rounded up (--head_dim's default).
    c.n_head = o.n_head > 0 ? o.n_head : (c.n_embd + 127) / 128;
    // c_k has n_kv_head * head_dim rows.
    c.n_kv_head = f.shape("transformer.h.0.attn.c_k.weight")[0] / (c.n_embd / c.n_head);
    // wte's rows are the padded vocabulary: the true size cannot be read off the tensors.
    NANODDP_CHECK(o.vocab_size > 0, "{} has no nanoddp metadata: pass --vocab_size (the tokenizer's, before padding "
                  "to {})", o.input, wte[0]);
    c.vocab_size = o.vocab_size;
    c.max_seq_len = o.max_seq_len;
    c.validate();
  }
  model::GPT gpt(c, Device::cpu());  // checks every name and shape while reading
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& p : gpt.parameters()) {
    f.read_into(p.name, p.data);
    tensors.emplace_back(p.name, p.data);
  }
  nlohmann::json meta = {{"step", 0}, {"model_config", c.to_json()}, {"imported_from", o.input}};
  // Absolute, so `nanoddp sample` finds the dataset from any working directory.
  if (!o.data.empty()) meta["data_dir"] = std::filesystem::absolute(o.data).string();
  auto tok = f.metadata().find("nanoddp.tokenizer");
  if (tok != f.metadata().end()) meta["tokenizer"] = tok->second;
  write_model_checkpoint(o.out, 0, tensors, meta);
  return checkpoint_dir(o.out, 0);
}

}  // namespace nanoddp::train

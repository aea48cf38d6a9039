#include "train/run_output.h"

#include <unistd.h>

#include <filesystem>
#include <set>
#include <vector>

#include "comm/consistency.h"
#include "core/files.h"
#include "core/log.h"
#include "core/machine.h"
#include "core/trace.h"
#include "model/generate.h"
#include "nanoddp/build_config.h"
#include "ops/backend.h"
#include "ops/engines.h"
#include "train/progress.h"

namespace nanoddp::train {

std::string arithmetic_name(const model::GPT& model, double loss_scale) {
  const bool cuda = model.device().is_cuda();
  if (model.act_dtype() == DType::F16)
    return fmt::format("fp16 with dynamic loss scaling from {:g} (f16 matmul: {})", loss_scale,
                       cuda ? "cuBLASLt" : ops::cpu_f16_matmul());
  if (model.act_dtype() != DType::BF16) return "f32";
  if (cuda) return "bf16";
  if (!ops::onednn_has_bf16_instructions())  // always so without oneDNN
    return fmt::format("bf16 without {}: its matmuls are widened to f32 for sgemm, slower than f32",
                       NANODDP_HAVE_ONEDNN ? "bf16 instructions" : "oneDNN");
  return "bf16 on " + bf16_matmul_hardware(host_info());
}

void write_environment(const TrainOptions& opts, dist::ProcessGroup& group, Device device,
                       const std::string& arithmetic, const ops::PeakFlops& peak) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::vector<std::string> hosts = dist::all_gather_strings(group, host);
  if (group.rank() != 0) return;
  const HostInfo machine = host_info();
  nlohmann::json env = {{"hosts", std::set<std::string>(hosts.begin(), hosts.end())},
                        {"world size", group.size()},
                        {"backend", group.backend_name()},
                        {"device", device.str()},
                        {"cpu", machine.cpu_model},
                        {"bf16 matmul", ops::cpu_bf16_matmul()},
                        {"threads per rank", ops::cpu_threads()},
                        {"arithmetic", arithmetic},
                        {"mfu peak", peak.flops > 0 ? fmt::format("{:.4g} TFLOP/s ({})", peak.flops / 1e12, peak.what)
                                                    : peak.what}};
  if (device.is_cuda()) env["gpu"] = cuda_device_name(device.index);
  for (const auto& [k, v] : dist::build_fingerprint()) env[k] = v;
  write_file_atomically(opts.output.out + "/environment.json", env.dump(2) + "\n");
}

void write_trace(const TrainOptions& opts, dist::ProcessGroup& group) {
  if (!opts.runtime.trace) return;
  trace::enable(false);
  if (trace::dropped() > 0)
    log::warn("--trace: {} events beyond the first {} were not recorded", trace::dropped(), trace::kMaxEvents);
  const std::vector<std::string> ranks = dist::all_gather_strings(group, trace::take_events_json(group.rank()));
  if (group.rank() != 0) return;
  std::string json = R"({"displayTimeUnit":"ms","otherData":{"tool":"nanoddp --trace"},"traceEvents":[)";
  for (size_t r = 0; r < ranks.size(); r++) json += (r > 0 ? "," : "") + ranks[r];
  json += "]}\n";
  const std::string path = opts.output.out + "/trace.json";
  write_file_atomically(path, json);
  log::print0("trace: {} ({} ranks; open it in https://ui.perfetto.dev or chrome://tracing)", path, ranks.size());
}

void print_model(const model::GPTConfig& c) {
  log::print0("model: depth {} | dim {} | heads {}/{} | vocab {} (padded {}) | {:.2f}M parameters", c.n_layer,
              c.n_embd, c.n_head, c.n_kv_head, c.vocab_size, c.padded_vocab(), c.num_params() / 1e6);
}

void summarize(const std::string& out, int64_t steps, int64_t last_step, double train_seconds, double trained_tokens,
               double last_loss, const std::optional<std::pair<int64_t, EvalResult>>& best_eval) {
  summarize(out, steps, last_step, train_seconds,
            fmt::format("{:.0f} tokens, {:.0f} tokens/s", trained_tokens,
                        train_seconds > 0 ? trained_tokens / train_seconds : 0.0),
            last_loss, best_eval);
}

void summarize(const std::string& out, int64_t steps, int64_t last_step, double train_seconds,
               const std::string& tokens, double last_loss,
               const std::optional<std::pair<int64_t, EvalResult>>& best_eval) {
  if (steps <= 0) return;
  log::print0("done: {} steps in {} ({}) | last loss {:.6f}{} | checkpoints: {} (newest "
              "step {})", steps, format_duration(train_seconds), tokens, last_loss,
              best_eval ? fmt::format(" | best val bpb {:.4f} at step {}", best_eval->second.bpb, best_eval->first)
                        : std::string(),
              std::filesystem::absolute(out + "/checkpoints").lexically_normal().string(), last_step);
}

void print_sample(const TrainOptions& opts, dist::ProcessGroup& group, model::GPT& model,
                  const data::Tokenizer& tokenizer) {
  if (opts.eval.sample_tokens <= 0 || group.rank() != 0) return;
  std::vector<int32_t> prompt{tokenizer.bos_id()};
  auto text = tokenizer.encode(opts.eval.sample_prompt);
  prompt.insert(prompt.end(), text.begin(), text.end());
  model::SampleOptions so;
  so.max_tokens = opts.eval.sample_tokens;
  so.temperature = 0.8f;
  so.top_k = 40;
  so.seed = opts.input.seed;
  // Training documents are separated by BOS, so generating one ends the text.
  so.stop_token = tokenizer.bos_id();
  auto ids = model::generate(model, prompt, so);
  if (!ids.empty() && ids.back() == so.stop_token) ids.pop_back();
  log::print0("sample: {}{}", opts.eval.sample_prompt, tokenizer.decode(ids));
}

}  // namespace nanoddp::train

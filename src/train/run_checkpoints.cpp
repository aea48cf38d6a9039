#include "train/run_checkpoints.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "comm/consistency.h"
#include "core/log.h"
#include "core/options.h"
#include "core/safetensors.h"
#include "data/tokenizer_file.h"
#include "nanoddp/build_config.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/run_folder.h"
#include "train/validate.h"

namespace nanoddp::train {

namespace {

// "1, 2, 3"
std::string join_steps(const std::vector<int64_t>& steps) {
  std::string list;
  for (int64_t s : steps) list += (list.empty() ? "" : ", ") + std::to_string(s);
  return list;
}

// The optimizer state checkpoint `dir` saved from saved_world ranks under --zero saved_zero, resharded
// for this run: every rank's file, or rank 0's alone under --zero 0 (each rank saved the whole state).
void load_resharded(ddp::Optimizer& optimizer, const std::string& dir, int saved_world, int saved_zero) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<const SafetensorsFile*> views;
  for (int r = 0; r < (saved_zero == 0 ? 1 : saved_world); r++) {
    files.push_back(std::make_unique<SafetensorsFile>(dir + "/" + CheckpointFiles::optimizer(r)));
    views.push_back(files.back().get());
  }
  optimizer.load_state_resharded(views);
}

// Weights of one recipe cannot train as the other (different parameters): one line naming both.
void check_same_recipe(const model::GPTConfig& saved, const model::GPTConfig& run, const std::string& what,
                       const std::string& action) {
  NANODDP_CHECK(saved.recipe == run.recipe, "{} holds a --recipe {} model and this run is --recipe {}: to {}, give "
                "--recipe {}", what, model::recipe_name(saved.recipe), model::recipe_name(run.recipe), action,
                model::recipe_name(saved.recipe));
}

// A checkpoint of this run that cannot be resumed (a file unreadable, truncated or incomplete):
// `why` names the file; the message says which earlier checkpoint can be resumed instead. Nothing
// is moved or deleted.
[[noreturn]] void fail_unresumable(const std::string& out, int64_t step, const std::string& why) {
  const auto steps = complete_checkpoint_steps(out);
  const auto before = std::lower_bound(steps.begin(), steps.end(), step);
  if (before == steps.begin())
    NANODDP_FAIL("{}; checkpoint step {} cannot be resumed and there is no earlier one: restore its files, or "
                 "start over (--overwrite moves this run aside)", why, step);
  NANODDP_FAIL("{}; checkpoint step {} cannot be resumed: resume the one before it with --resume {}", why, step,
               *(before - 1));
}

// meta.json of checkpoint `step`, with what restore() reads from it present; a weights-only
// checkpoint (`nanoddp import`) is refused with the flag that uses it.
nlohmann::json read_resumable_meta(const std::string& out, int64_t step) {
  const std::string dir = checkpoint_dir(out, step);
  nlohmann::json meta;
  try {
    meta = read_checkpoint_meta(dir);
  } catch (const Error& e) {
    fail_unresumable(out, step, e.what());
  }
  NANODDP_CHECK(!(meta.is_object() && meta.value("model_only", false)), "checkpoint {} holds weights only (no "
                "optimizer state or data position, e.g. from `nanoddp import`): start a new run from it with "
                "--init_from {}", dir, dir);
  // The data position indexes the loader's order and shards: a negative one would read outside them.
  const auto position = [&](const char* key) {
    const auto& l = meta.at("loader");
    return l.contains(key) && l.at(key).is_number_integer() && l.at(key).get<int64_t>() >= 0;
  };
  const bool complete =
      meta.is_object() && meta.contains("world_size") && meta.at("world_size").is_number_integer() &&
      meta.at("world_size").get<int>() >= 1 && meta.contains("model_config") && meta.contains("loader") &&
      meta.at("loader").is_object() && position("epoch") && position("cursor") &&
      meta.contains("options") && meta.at("options").is_object() &&
      std::ranges::all_of(std::array{"optimizer", "device_batch_size", "total_batch_size", "max_seq_len"},
                          [&](const char* key) { return meta.at("options").contains(key); });
  if (!complete)
    fail_unresumable(out, step, fmt::format("{}/meta.json lacks what a resume needs, or its data position is not "
                                            "two non-negative integers", dir));
  return meta;
}

}  // namespace

RunCheckpoints::RunCheckpoints(const TrainOptions& opts, dist::ProcessGroup& group, const data::DatasetMeta& dataset,
                               const Plan& plan, model::GPT& model, ddp::Optimizer& optimizer)
    : opts_(opts), group_(group), dataset_(dataset), plan_(plan), model_(model), optimizer_(optimizer) {}

void RunCheckpoints::lock() {
  std::string error;
  if (group_.rank() == 0) {
    try {
      lock_ = std::make_unique<RunLock>(opts_.output.out);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  std::vector<double> failed{error.empty() ? 0.0 : 1.0};
  dist::allreduce_scalars(group_, failed, dist::ReduceOp::Max);
  if (!error.empty()) throw Error(error);
  NANODDP_CHECK(failed[0] == 0, "rank 0 could not take --out {} for this run (its message says why)", opts_.output.out);
}

int64_t RunCheckpoints::find_resume_step() {
  // They must agree, or one rank would restore while another starts fresh (a folder that is not
  // shared, a save still in progress on another node).
  int64_t resume = -1;
  std::exception_ptr resume_error;
  std::string found;
  try {
    resume = resume_step();
    found = resume >= 0 ? fmt::format("step {}", resume) : "none";
  } catch (const Error& e) {
    resume_error = std::current_exception();
    found = fmt::format("none ({})", e.what());
  }
  dist::check_consistent(group_, {{"the checkpoint to resume", found}}, "give every rank the same --out, on a "
                         "file system they all see (or copy the checkpoints to every node)");
  if (resume_error) std::rethrow_exception(resume_error);
  return resume;
}

// A launcher restart implies "auto", but only for a run its own job started (run.json's job_id): a
// restart never picks up another run that happens to be in --out.
int64_t RunCheckpoints::resume_step() {
  using Mode = ResumeSpec::Mode;
  ResumeSpec resume = opts_.output.resume;
  const char* restarts = std::getenv("NANODDP_RESTART_COUNT");
  restarted_ = restarts != nullptr && std::atoll(restarts) > 0;
  if (resume.empty() && restarted_) {
    const auto info = read_run_info(opts_.output.out);
    const std::string job = current_job_id();
    if (info && !job.empty() && info->job_id == job) resume.mode = Mode::Auto;
  }
  if (resume.empty()) return -1;
  auto latest = latest_checkpoint(opts_.output.out);
  if (resume.mode == Mode::Auto) return latest ? *latest : -1;
  if (resume.mode == Mode::Latest) {
    NANODDP_CHECK(latest.has_value(), "--resume latest: no complete checkpoint under {}/checkpoints", opts_.output.out);
    return *latest;
  }
  const int64_t step = resume.step;
  if (!std::filesystem::exists(checkpoint_dir(opts_.output.out, step) + "/DONE")) {
    // Say which steps there are, so the user can pick one.
    const std::string have = join_steps(complete_checkpoint_steps(opts_.output.out));
    NANODDP_FAIL("--resume {}: no complete checkpoint at {} (complete checkpoints: {})", step,
                 checkpoint_dir(opts_.output.out, step), have.empty() ? "none" : have);
  }
  return step;
}

void RunCheckpoints::claim(int64_t resume) {
  claim_run_folder(resume);
  // Under the lock, a step_N.tmp without DONE is no other run's save in progress.
  if (group_.rank() == 0)
    for (const std::string& name : remove_interrupted_saves(opts_.output.out))
      log::print0("removed {}/checkpoints/{}: a save that was interrupted", opts_.output.out, name);
  keep_tokenizer();
}

// A resumed run keeps its identity; a fresh one gets a new run id. Every rank checks, then rank 0
// alone changes the folder between two barriers.
void RunCheckpoints::claim_run_folder(int64_t resume) {
  const auto info = read_run_info(opts_.output.out);
  if (resume >= 0) {
    if (info) {
      run_id_ = info->run_id;
    } else {
      // A run of an older version, or imported: it gets an identity now.
      run_id_ = read_checkpoint_meta(checkpoint_dir(opts_.output.out, resume)).value("run_id", new_run_id());
      if (group_.rank() == 0) write_run_info(opts_.output.out, {run_id_, current_job_id()});
    }
    return;
  }
  // A restart of a job whose first attempt died before its first checkpoint starts over in its own folder.
  const bool own = restarted_ && info && !current_job_id().empty() && info->job_id == current_job_id();
  const std::string existing = own ? "" : describe_run(opts_.output.out);
  // With no complete checkpoint there is nothing to continue (a run that failed or was stopped
  // before its first save): only the other two ways are offered.
  NANODDP_CHECK(existing.empty() || opts_.output.overwrite,
                "--out {} holds {}: {}choose another --out, or pass --overwrite "
                "to move it aside (it is never deleted)",
                opts_.output.out, existing,
                latest_checkpoint(opts_.output.out) ? "continue it with --resume latest, " : "");
  group_.barrier()->wait();  // every rank has looked before rank 0 moves anything
  run_id_ = own ? info->run_id : new_run_id();
  if (group_.rank() == 0) {
    if (!existing.empty()) {
      log::print0("--overwrite: moved {} aside to {}", opts_.output.out, move_run_aside(opts_.output.out));
      lock_ = std::make_unique<RunLock>(opts_.output.out);  // the lock file moved with the old folder
    }
    write_run_info(opts_.output.out, {run_id_, current_job_id()});
  }
  group_.barrier()->wait();
}

// A run folder is self-contained: it keeps a copy of a trained tokenizer (OUT/tokenizer/), so
// sample and export work after the dataset folder is gone. Rank 0, once per run.
void RunCheckpoints::keep_tokenizer() {
  namespace fs = std::filesystem;
  if (group_.rank() != 0 || !dataset_.tokenizer.ends_with(".tiktoken")) return;
  const fs::path src = fs::path(opts_.input.data) / dataset_.tokenizer, dest = fs::path(opts_.output.out) / "tokenizer";
  if (!fs::is_regular_file(src) || fs::exists(dest / src.filename())) return;
  fs::create_directories(dest);
  data::copy_tokenizer_file(src.string(), (dest / src.filename()).string());
}

// The model, the tokenizer, the options that shape the optimizer state and the data: each must be
// this run's (or --allow_changed_data for the data).
void RunCheckpoints::check_fits(int64_t step, const std::string& dir, const nlohmann::json& meta,
                                const nlohmann::json& dataset_identity) {
  model::GPTConfig saved_config;
  try {
    saved_config = model::GPTConfig::from_json(meta.at("model_config"));
  } catch (const std::exception& e) {
    fail_unresumable(opts_.output.out, step, fmt::format("{}/meta.json has no valid model_config ({})", dir, e.what()));
  }
  NANODDP_CHECK(saved_config.vocab_size == plan_.config.vocab_size, "checkpoint {} has a vocabulary of {} tokens but "
                "--data {} has {}: resume with the dataset it was trained on", dir, saved_config.vocab_size, opts_.input.data,
                plan_.config.vocab_size);
  check_same_recipe(saved_config, plan_.config, fmt::format("checkpoint {}", dir), "resume");
  NANODDP_CHECK(saved_config == plan_.config, "checkpoint {} holds another model configuration ({}); resume with the "
                "same --depth and model flags", dir, meta.at("model_config").dump());
  // The ids must mean the same text, --allow_changed_data or not: that flag lets a run go on over
  // other rows, but a model of another tokenizer is another model, and the run keeps one tokenizer
  // copy for all of its checkpoints.
  const std::string saved_tokenizer = meta.value("tokenizer", "");
  NANODDP_CHECK(saved_tokenizer.empty() || saved_tokenizer == dataset_.tokenizer, "checkpoint {} was trained with "
                "the tokenizer {} but --data {} uses {}: resume with a dataset of the same tokenizer, or start a new "
                "run (--out)", dir, saved_tokenizer, opts_.input.data, dataset_.tokenizer);
  check_dataset_tokenizer(dir, opts_.input.data);
  // These shape the optimizer state and what the loader's cursor counts; other options (learning
  // rates, evaluation and save cadence, ...) may change across a resume.
  // The world size and --zero may change: the optimizer state is resharded (Note [resharding] in
  // ddp/optimizer.cpp) and the loader's cursor counts global units (Note [data order] in data/loader.h).
  const nlohmann::json& saved_options = meta.at("options");
  const nlohmann::json now_options = options_to_json(opts_);
  for (const char* key : {"optimizer", "device_batch_size", "max_seq_len"}) {
    const auto& saved = saved_options.at(key);
    const auto& now = now_options.at(key);
    NANODDP_CHECK(saved == now, "checkpoint {} was trained with --{} {} but this run has {}; resume with the same "
                  "setting", dir, key, saved.dump(), now.dump());
  }
  check_batch(dir, meta);
  if (opts_.output.allow_changed_data) return;
  // Another seed or dataset would silently train on other rows than the checkpoint's run.
  NANODDP_CHECK(!saved_options.contains("seed") || saved_options.at("seed") == now_options.at("seed"),
                "checkpoint {} was trained with --seed {} but this run has {}: use the same seed, or pass "
                "--allow_changed_data", dir, saved_options.value("seed", nlohmann::json()).dump(), opts_.input.seed);
  NANODDP_CHECK(!meta.contains("dataset") || meta.at("dataset") == dataset_identity, "checkpoint {} was trained on "
                "another dataset ({}) than --data {} ({}): give the same --data, or pass --allow_changed_data", dir,
                meta.contains("dataset") ? meta.at("dataset").dump() : "", opts_.input.data, dataset_identity.dump());
}

// The batch is compared as the tokens a step takes, not as the flag: --total_batch_size -1 (one
// micro-batch per rank, sft's default) means another batch on another world size, and with it
// another schedule and amount of data. RL counts questions (--examples_per_step) instead.
void RunCheckpoints::check_batch(const std::string& dir, const nlohmann::json& meta) {
  const nlohmann::json& saved_options = meta.at("options");
  if (opts_.chat.stage == RunStage::Rl) {
    NANODDP_CHECK(!saved_options.contains("examples_per_step") ||
                      saved_options.at("examples_per_step") == nlohmann::json(opts_.rl.examples_per_step),
                  "checkpoint {} was trained with --examples_per_step {} but this run has {}; resume with the same "
                  "setting", dir, saved_options.value("examples_per_step", nlohmann::json()).dump(),
                  opts_.rl.examples_per_step);
    return;
  }
  const int saved_world = meta.at("world_size");
  const int64_t saved_flag = saved_options.value("total_batch_size", int64_t{-1});
  // Checkpoints from before "tokens_per_step" was saved: the flag, or what -1 meant on their ranks.
  const int64_t saved_tokens = meta.value(
      "tokens_per_step", saved_flag > 0 ? saved_flag
                                        : saved_options.value("device_batch_size", int64_t{0}) *
                                              saved_options.value("max_seq_len", int64_t{0}) * saved_world);
  const int64_t per_micro = opts_.batch.device_batch_size * opts_.model.max_seq_len * group_.size();
  NANODDP_CHECK(saved_tokens == plan_.tokens_per_step, "checkpoint {} was trained with {} tokens per step "
                "(--total_batch_size {} on {} rank(s)) but this run takes {} (--total_batch_size {} on {}): {}",
                dir, saved_tokens, saved_flag, saved_world, plan_.tokens_per_step, opts_.batch.total_batch_size,
                group_.size(),
                saved_tokens % per_micro == 0
                    ? fmt::format("resume with --total_batch_size {}, so that the batch, the schedule and the data "
                                  "stay the run's", saved_tokens)
                    : fmt::format("{} ranks cannot take that batch ({} tokens per micro-step over all ranks does "
                                  "not divide it): resume on {} rank(s), or start a new run (--init_from)",
                                  group_.size(), per_micro, saved_world));
}

// The weights and this rank's optimizer state. Under --zero 1|2 the buckets decide where a rank's
// piece of each AdamW state ends, so other bucket sizes read the pieces as resharding does. Under
// --zero 0 every rank saved the whole state (the same bytes), so resharding reads rank 0's file
// alone. A file that cannot be read (truncated by a full disk, overwritten, a missing rank's file)
// fails naming the file, and says which earlier checkpoint the run can resume instead.
void RunCheckpoints::load_state(int64_t step, const std::string& dir, const nlohmann::json& meta) {
  const nlohmann::json& saved_options = meta.at("options");
  const int saved_world = meta.at("world_size");
  const int saved_zero = saved_options.value("zero", 0);
  const bool same_buckets = saved_options.value("bucket_cap_mb", opts_.optim.bucket_cap_mb) ==
                                opts_.optim.bucket_cap_mb &&
                            saved_options.value("first_bucket_mb", opts_.optim.first_bucket_mb) ==
                                opts_.optim.first_bucket_mb;
  const bool same_sharding = saved_world == group_.size() && saved_zero == static_cast<int>(opts_.optim.zero) &&
                             (saved_zero == 0 || same_buckets);
  bool resharded = false;
  try {
    SafetensorsFile weights(dir + "/model.safetensors");
    for (auto& p : model_.parameters()) weights.read_into(p.name, p.data);
    // As --init_from: weights that are not finite would evaluate and log before any loss check.
    for (const auto& p : model_.parameters())
      NANODDP_CHECK(all_finite(p.data), "{}/model.safetensors: parameter {} holds NaN or infinite values", dir,
                    p.name);
    // The same settings by an older build may still have placed the Muon matrices otherwise
    // (bucket_layout.h): then this rank's file lacks its pieces, and resharding finds them.
    const std::string own_path = dir + "/" + CheckpointFiles::optimizer(group_.rank());
    ddp::NamedTensors own;
    if (same_sharding) {
      const SafetensorsFile file(own_path);
      for (const std::string& name : file.names()) own.emplace(name, file.read(name));
    }
    resharded = !same_sharding || !optimizer_.state_matches(own);
    if (!resharded) {
      optimizer_.load_state(own, own_path);
    } else {
      load_resharded(optimizer_, dir, saved_world, saved_zero);
    }
  } catch (const Error& e) {
    fail_unresumable(opts_.output.out, step, e.what());
  }
  model_.refresh_compute_weights();
  if (resharded)
    log::print0("resharded the optimizer state of {} rank(s) (--zero {}) onto {} (--zero {})", saved_world,
                saved_zero, group_.size(), opts_.optim.zero);
}

RunState RunCheckpoints::restore(int64_t step, const nlohmann::json& dataset_identity, int64_t units_per_epoch) {
  const std::string dir = checkpoint_dir(opts_.output.out, step);
  const nlohmann::json meta = read_resumable_meta(opts_.output.out, step);
  // A cursor past the epoch's end would silently skip to the next epoch (1e15 skipped the rest of
  // this one): the file is damaged, or the data is not the checkpoint's.
  const int64_t cursor = meta.at("loader").at("cursor");
  if (cursor > units_per_epoch)
    fail_unresumable(opts_.output.out, step,
                     fmt::format("{}/meta.json: its data position (cursor {}) lies beyond the {} "
                                 "units of an epoch of this run's data",
                                 dir, cursor, units_per_epoch));
  check_fits(step, dir, meta, dataset_identity);
  load_state(step, dir, meta);
  // Another --dtype may continue a run (the master weights and optimizer state are f32 in every
  // dtype), as a PyTorch run may change its autocast dtype; say so, since the run then no longer
  // follows the checkpoint's bits.
  if (meta.contains("activations") && meta.at("activations") != dtype_flag(model_.act_dtype()))
    log::print0("note: checkpoint {} was trained with --dtype {} and this run continues with --dtype {}", dir,
                meta.at("activations").get<std::string>(), dtype_flag(model_.act_dtype()));
  RunState state;
  // The resumed run reads exactly the rows the interrupted one would have read next.
  state.position = {meta.at("loader").at("epoch"), meta.at("loader").at("cursor")};
  // Keep the last evaluation, so the next checkpoint's meta.json carries it until the next one.
  if (meta.contains("val_bpb") && !meta["val_bpb"].is_null())
    state.eval = EvalResult{meta.value("val_loss", 0.0), meta["val_bpb"], 0};
  // A checkpoint of another dtype has no scale (Note [dynamic loss scaling]).
  if (meta.contains("loss_scale"))
    state.loss_scale = {meta.at("loss_scale").at("scale").get<double>(),
                        meta.at("loss_scale").at("good_steps").get<int64_t>()};
  log::print0("resumed from {} (step {})", dir, step);
  set_aside_later(step);
  return state;
}

// Resuming a step that is not the newest checkpoint abandons the later ones: they are moved into
// OUT/checkpoints/after_step_<step>/ (kept, never deleted), so that --resume latest, a launcher's
// restart and the rotation of --keep_last all see this run's new history only. Rank 0, which alone
// writes checkpoints.
void RunCheckpoints::set_aside_later(int64_t step) {
  if (group_.rank() != 0) return;
  std::string dest;
  const std::vector<int64_t> moved = set_aside_checkpoints_after(opts_.output.out, step, &dest);
  if (moved.empty()) return;
  log::print0("resuming step {} abandons the later checkpoints (step {}): moved to {}, not deleted", step,
              join_steps(moved), dest);
}

std::optional<double> RunCheckpoints::kept_best_bpb() const {
  const std::optional<int64_t> best = best_checkpoint(opts_.output.out);
  if (!best) return std::nullopt;
  const nlohmann::json meta = read_checkpoint_meta(checkpoint_dir(opts_.output.out, *best));
  if (!meta.contains("val_bpb") || !meta.at("val_bpb").is_number()) return std::nullopt;
  return meta.at("val_bpb").get<double>();
}

void RunCheckpoints::save(int64_t step, const RunState& state, const nlohmann::json& dataset_identity, bool best) {
  // A checkpoint is never marked complete with non-finite weights (every rank holds the same weights,
  // so every rank stops here together).
  for (const auto& p : model_.parameters())
    NANODDP_CHECK(all_finite(p.data), "step {}: parameter {} holds NaN or infinite values; not saving a checkpoint. "
                  "Lower the learning rates or resume from an earlier checkpoint", step, p.name);
  CheckpointContents c;
  c.step = step;
  c.best = best;
  for (const auto& p : model_.parameters()) c.model.emplace_back(p.name, p.data);
  c.optimizer = optimizer_.state();
  // data_dir is absolute so that `nanoddp sample` and `export` work from another directory.
  c.meta = {{"step", step},
            {"model_config", plan_.config.to_json()},
            {"options", options_to_json(opts_)},
            {"loader", {{"epoch", state.position.epoch}, {"cursor", state.position.cursor}}},
            {"world_size", group_.size()},
            {"run_id", run_id_},
            {"stage", option_text(opts_.chat.stage)},
            {"source", opts_.output.init_from.empty() ? nlohmann::json() : nlohmann::json(opts_.output.init_from)},
            {"dataset", dataset_identity},
            {"data_dir", std::filesystem::absolute(opts_.input.data).string()},
            {"tokenizer", dataset_.tokenizer},
            {"tokens_per_step", plan_.tokens_per_step},
            {"tokens_seen", step * plan_.tokens_per_step},
            {"nanoddp_version", NANODDP_VERSION},
            {"val_bpb", state.eval ? nlohmann::json(state.eval->bpb) : nlohmann::json()},
            {"val_loss", state.eval ? nlohmann::json(state.eval->loss) : nlohmann::json()}};
  if (state.loss_scale)
    c.meta["loss_scale"] = {{"scale", state.loss_scale->first}, {"good_steps", state.loss_scale->second}};
  c.meta["activations"] = dtype_flag(model_.act_dtype());  // --dtype as resolved (auto: by device)
  Stopwatch save_time;
  save_checkpoint(opts_.output.out, c, group_, opts_.output.keep_last);
  // Under `nanoddp run`, how long a save takes sizes the time the launcher gives a stop that saves
  // (docs/launcher.md, "Stops that save"): every rank reports its own save.
  if (const char* file = std::getenv("NANODDP_SAVE_SECONDS_FILE")) std::ofstream(file) << save_time.seconds() << "\n";
  since_save_ = Stopwatch();
  log::print0("saved checkpoint {}{}", checkpoint_dir(opts_.output.out, step),
              best ? fmt::format(" (the best so far: {}/best)", opts_.output.out) : "");
}

void init_weights_from(model::GPT& model, const model::GPTConfig& config, const std::string& path,
                       const std::string& data) {
  namespace fs = std::filesystem;
  std::string file = path;
  if (fs::is_directory(path)) {
    const std::string dir = resolve_checkpoint(path);
    const nlohmann::json meta = read_checkpoint_meta(dir);
    if (meta.contains("model_config")) check_same_recipe(model::GPTConfig::from_json(meta.at("model_config")), config,
                                                         fmt::format("--init_from {}", dir), "start from it");
    if (meta.contains("model_config"))
      NANODDP_CHECK(model::GPTConfig::from_json(meta.at("model_config")) == config, "--init_from {}: its model "
                    "({}) is not this run's: give the same --depth and model flags and a dataset of its vocabulary",
                    dir, meta.at("model_config").dump());
    check_dataset_tokenizer(dir, data);  // sft and rl take the base run's dataset, maybe prepared again
    file = dir + "/model.safetensors";
  }
  NANODDP_CHECK(fs::is_regular_file(file), "--init_from {}: no such checkpoint, run folder or .safetensors file", path);
  SafetensorsFile weights(file);
  for (auto& p : model.parameters()) weights.read_into(p.name, p.data);
  for (const auto& p : model.parameters())
    NANODDP_CHECK(all_finite(p.data), "--init_from {}: parameter {} holds NaN or infinite values", file, p.name);
  model.refresh_compute_weights();
  log::print0("initialised the weights from {}", file);
}

// nanochat's chat_sft warm-starts its optimizer from the base checkpoint's state (momentum buffers
// and moments; the learning rates are the fine-tune's own). Ours reads every rank's file of that
// checkpoint, resharded as a resume would, so the fine-tune may use another world size or --zero.
// Adam's step count carries over too, as torch's load_state_dict carries each parameter's.
bool init_optimizer_from(ddp::Optimizer& optimizer, const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) return false;  // a .safetensors file holds weights only
  const std::string dir = resolve_checkpoint(path);
  const nlohmann::json meta = read_checkpoint_meta(dir);
  if (!meta.contains("options") || !meta.contains("world_size") ||
      !fs::is_regular_file(dir + "/" + CheckpointFiles::optimizer(0)))
    return false;
  const int saved_world = meta.at("world_size");
  const int saved_zero = meta.at("options").value("zero", 0);
  try {
    load_resharded(optimizer, dir, saved_world, saved_zero);
  } catch (const Error& e) {
    NANODDP_FAIL("--load_optimizer: the optimizer state of {} does not fit this run ({}): give --load_optimizer=false "
                 "to start the optimizer fresh", dir, e.what());
  }
  log::print0("loaded the optimizer state of {} (momentum buffers and moments; this run's learning rates)", dir);
  return true;
}

}  // namespace nanoddp::train

// nanochat's optimizers over the reducer's buckets, replicated or sharded (ZeRO):
//  - AdamW (betas 0.8/0.95, eps 1e-10, no weight decay by default) for the embedding (lr 0.2 s)
//    and the LM head (lr 0.004 s), s = (model_dim / 768)^-0.5; with --optimizer adamw also for
//    every matrix (lr --adamw_matrix_lr).
//  - Muon (lr 0.02) for every matrix in the blocks: Nesterov momentum, Newton-Schulz in bf16,
//    p -= lr sqrt(max(1, rows / cols)) X.
//  - With recipe_2026, nanochat's 2026 optimizer: AdamW groups per parameter kind with their own
//    betas and weight decay, and Muon with Polar Express, NorMuon and cautious weight decay (Note
//    [2026 optimizer] in optimizer.cpp).
// With --zero 0 every rank updates everything, but orthogonalises only the Muon matrices it owns
// and receives the others' (Note [split Newton-Schulz] in optimizer.cpp). With --zero >= 1 a
// rank updates and keeps state only for what it owns (Note [shards] in ddp/bucket_layout.h):
// AdamW slices of each bucket and whole Muon matrices; then an all_gather of each bucket's
// parameters gives every rank the new weights. Parameters under 1024 elements are the exception:
// every rank updates them whole (Note [small parameters]). Optimizer memory per rank is then about 1/W of
// the replicated state.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "ddp/optimizer_kind.h"
#include "ddp/reducer.h"

namespace nanoddp::ddp {

// Tensors by name, as a checkpoint's optimizer file holds them (the caller reads the file).
using NamedTensors = std::map<std::string, Tensor>;

struct OptimizerConfig {
  // Muon (nanochat: Muon + AdamW), AdamW (everywhere) or Sgd (SGD with momentum everywhere,
  // torch.optim.SGD's rule: buf = momentum buf + g (+ weight_decay p first); p -= lr buf).
  OptimizerKind optimizer = OptimizerKind::Muon;
  double embedding_lr = 0.2;       // AdamW, times s
  double unembedding_lr = 0.004;   // AdamW, times s
  double matrix_lr = 0.02;         // Muon
  double adamw_matrix_lr = 0.003;  // AdamW on matrices (--optimizer adamw)
  double weight_decay = 0.0;       // AdamW
  double adam_beta1 = 0.8, adam_beta2 = 0.95, adam_eps = 1e-10;
  int ns_steps = 5;
  bool ns_bf16 = true;              // Newton-Schulz in bf16 (nanochat) or f32
  // --zero 0: each rank orthogonalises the Muon matrices it owns and broadcasts them (false: every
  // rank all of them; the same bits, W times the work). Note [split Newton-Schulz].
  bool split_newton_schulz = true;
  double grad_clip = 0;             // clip the gradients' global L2 norm to this (0 = off)
  double sgd_lr = 0.01, sgd_momentum = 0.9;  // Sgd (the state keeps its buffer where AdamW keeps m)
  // nanochat's 2026 optimizer, for a model of the 2026 recipe (with optimizer "muon"): Note [2026
  // optimizer] in optimizer.cpp. Then weight_decay and the Adam betas above are unused: each AdamW
  // group has nanochat's own, and muon_weight_decay (set each step by set_muon_weight_decay) is
  // Muon's cautious weight decay.
  bool recipe_2026 = false;
  double scalar_lr = 0.5;            // AdamW lr of resid_lambdas (times 0.01) and x0_lambdas
  double smear_lr = 0.2;             // AdamW lr of the smear gate and the smear/backout lambdas
  double muon_weight_decay = 0.0;    // the initial value; the schedule changes it per step
  double normuon_beta2 = 0.9;        // NorMuon's second-moment decay
};

class Optimizer {
 public:
  Optimizer(model::ParameterSet& model, Reducer& reducer, const OptimizerConfig& cfg);

  // One update with every group's lr multiplied by lr_multiplier and Muon's momentum set to
  // `momentum`; then (sharded) gathers the parameters and refreshes the model's compute copies.
  void step(double lr_multiplier, double momentum);

  // Dynamic loss scaling (fp16; torch.cuda.amp.GradScaler's unscale_ and inf check): multiplies the
  // gradients this rank updates by inv_scale and returns whether every rank's are finite. The flag
  // is all-reduced with MAX over the group whatever the sharding, so all ranks skip the same step.
  // Collective: every rank calls it.
  bool unscale_and_check(float inv_scale);

  // The 2026 optimizer's Muon weight decay for the following steps (nanochat schedules it).
  void set_muon_weight_decay(double wd) { muon_weight_decay_ = wd; }

  int64_t steps_taken() const { return steps_taken_; }
  // How many Muon matrices this rank orthogonalised in the last step (Note [split Newton-Schulz]).
  size_t muon_orthogonalised() const { return muon_orthogonalised_; }
  // The gradients' global L2 norm before clipping in the last step (computed only with grad_clip).
  double last_grad_norm() const { return last_grad_norm_; }
  size_t state_bytes() const;
  // This rank's optimizer state, named by parameter and offset, for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Reads `saved` (all of a state() saved by the same world size and sharding; `source` names it
  // in errors, e.g. the file it was read from) into this rank's state.
  void load_state(const NamedTensors& saved, std::string_view source);
  // Whether `saved` holds exactly the pieces this rank's state has (then load_state reads it; else
  // the checkpoint was sharded otherwise and load_state_resharded is needed).
  bool state_matches(const NamedTensors& saved) const;
  // The state saved by any world size and --zero (every rank's file of the checkpoint; under
  // --zero 0 rank 0's alone is enough), resharded for this one: Note [resharding] in optimizer.cpp.
  void load_state_resharded(const std::vector<const SafetensorsFile*>& files);

 private:
  struct AdamPiece {
    int param;
    int64_t offset, numel;  // within the parameter
    float base_lr;
    // AdamW's first and second moments; with the Sgd optimizer m is SGD's momentum buffer (v unused).
    float beta1, beta2, weight_decay;  // the parameter's group's
    Tensor m, v;
    bool replicated = false;  // sharded, yet updated by every rank (Note [small parameters])
  };
  struct MuonMatrix {
    int param;
    Tensor momentum;
    Tensor variance;  // 2026: NorMuon's second moment, [rows] when rows >= cols, else [cols]
  };
  void gather_parameters();
  // Muon's update of every matrix this rank holds (Note [split Newton-Schulz] in optimizer.cpp).
  void muon_step(double lr_multiplier, double momentum);
  // The update direction of each matrix of xs, all of one shape, in place: Newton-Schulz, or the
  // 2026 optimizer's row equilibration, Polar Express and norm snap.
  void orthogonalise(const std::vector<Tensor>& xs) const;
  // The rank that orthogonalises the matrix at `position` of a same-shape group of `group_size`.
  int muon_owner(size_t position, size_t group_size) const;
  // With grad_clip: scales the gradients this rank updates so that the global norm is at most
  // grad_clip (torch.nn.utils.clip_grad_norm_'s rule).
  void clip_gradients();
  // The gradient pieces this rank updates: whole Muon matrices and the AdamW pieces of its shard.
  std::vector<Tensor> owned_gradients();
  double last_grad_norm_ = 0;

  model::ParameterSet& model_;
  Reducer& reducer_;
  OptimizerConfig cfg_;
  std::vector<AdamPiece> adam_;
  std::vector<MuonMatrix> muon_;
  // muon_'s indices grouped by the matrices' shape (in order of first appearance): Newton-Schulz
  // takes a group at once, which a GPU runs as batches (ops::newton_schulz).
  std::vector<std::vector<size_t>> muon_groups_;
  // Optimizer steps taken (every optimizer's: AdamW's bias correction reads it), saved as adamw.step.
  int64_t steps_taken_ = 0;
  size_t muon_orthogonalised_ = 0;
  double muon_weight_decay_ = 0;
};

}  // namespace nanoddp::ddp

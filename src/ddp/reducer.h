// Gradient synchronisation for data parallelism, overlapped with the backward.
//
// The model's parameters and gradients are moved into flat per-bucket buffers (PyTorch's
// gradient_as_bucket_view: the grad tensors the backward writes ARE the bucket memory, so no
// copy in or out). During the last micro-step's backward the model reports each gradient as it
// becomes final (model::GradReadyFn); when a bucket has all of its gradients its collective is
// launched asynchronously, while the backward goes on with earlier layers. Buckets are launched
// strictly in layout order (Note [bucket order] in ddp/bucket_layout.h) so every rank issues
// the same collectives in the same order. finish() waits for all of them before the optimizer.
//
//  --zero 0, 1: allreduce(AVG) of each bucket: every rank gets the full averaged gradient.
//  --zero 2:    reduce_scatter(AVG): each rank gets the averaged gradient of its own shard only
//               (half the traffic of an allreduce), which is all a sharded optimizer reads.
//               Buckets of small parameters stay all-reduced (Note [small parameters] in
//               ddp/bucket_layout.h).
#pragma once

#include <vector>

#include "ddp/bucket_layout.h"
#include "comm/process_group.h"
#include "model/parameter.h"

namespace nanoddp::ddp {

// What Muon updates (nanochat: the blocks' 2-D weights): a parameter of kind Matrix with two
// dimensions. Other Matrix parameters (biases, convolution kernels) take AdamW.
inline bool is_muon_matrix(const model::Parameter& p) {
  return p.kind == model::ParamKind::Matrix && p.data.shape().ndim() == 2;
}

struct ReducerOptions {
  int zero = 0;                       // 0: replicated optimizer; 1: sharded state; 2: + sharded gradients
  bool whole_matrices = false;        // Muon: shard matrices whole (see Note [shards])
  double first_bucket_mb = 1.0;
  double bucket_cap_mb = 25.0;
  // PyTorch DDP's find_unused_parameters: a parameter whose gradient was never reported in the
  // synchronised backward (a branch not taken this step) contributes zero: finish() zeroes its
  // .grad and averages it with the other ranks'. Off: finish() fails naming it, as DDP does.
  bool find_unused_parameters = false;
  // With --zero 1 or 2: parameters of fewer elements than this (whole Muon matrices aside) are
  // all-reduced and updated whole on every rank, as nanochat's distributed AdamW does (Note [small
  // parameters] in ddp/bucket_layout.h). 0: every parameter is sharded.
  int64_t replicate_below_numel = 1024;
};

class Reducer {
 public:
  // Moves every parameter and gradient of `model` into the bucket buffers (values are kept).
  // Collective: every rank checks that all ranks have the same parameters (names, shapes, kinds,
  // order) and options, and throws nanoddp::Error naming the first difference otherwise.
  Reducer(model::ParameterSet& model, dist::ProcessGroup& group, const ReducerOptions& opts);

  // Rank 0's parameters to every rank (after initialisation or loading a checkpoint).
  void broadcast_parameters();
  // The hook for the backward of the micro-step whose gradients are to be synchronised. The
  // gradients then hold the sum of `micro_steps` micro-batch gradients, each of the unscaled mean
  // loss; every bucket is divided by micro_steps before its collective averages it over the ranks,
  // so W ranks with one micro-step equal one rank with W (Note [accumulation order], model/gpt.cpp).
  model::GradReadyFn sync_hook(int micro_steps = 1);
  // Waits for every bucket's collective. Throws if a parameter never reported its gradient (unless
  // find_unused_parameters), or if no sync_hook() preceded it on a group of several ranks.
  void finish();

  const BucketLayout& layout() const { return layout_; }
  bool sharded() const { return opts_.zero >= 1; }
  int zero() const { return opts_.zero; }
  dist::ProcessGroup& group() const { return group_; }
  // Flat f32 buffers of bucket b: [layout().buckets[b].numel].
  const Tensor& params(int b) const { return params_[b]; }
  const Tensor& grads(int b) const { return grads_[b]; }

 private:
  void on_ready(int param);
  void launch(int bucket);

  model::ParameterSet& model_;
  dist::ProcessGroup& group_;
  ReducerOptions opts_;
  BucketLayout layout_;
  std::vector<Tensor> params_, grads_;
  std::vector<int> pending_;     // gradients each bucket still waits for in this backward
  std::vector<char> reported_;   // per parameter: reported in this backward
  int next_launch_ = 0;
  bool armed_ = false;  // between sync_hook() and finish()
  float micro_scale_ = 1.f;  // 1 / micro_steps of the current sync_hook()
  std::vector<dist::WorkPtr> works_;
};

}  // namespace nanoddp::ddp

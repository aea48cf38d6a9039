#include "ddp/reducer.h"

#include "comm/consistency.h"
#include "core/error.h"
#include "core/trace.h"
#include "ops/ops.h"

namespace nanoddp::ddp {

Reducer::Reducer(model::ParameterSet& model, dist::ProcessGroup& group, const ReducerOptions& opts)
    : model_(model), group_(group), opts_(opts) {
  NANODDP_CHECK(opts.zero >= 0 && opts.zero <= 2, "--zero must be 0, 1 or 2 (got {})", opts.zero);
  auto& params = model.parameters();
  NANODDP_CHECK(!params.empty(), "the DDP engine got a model without parameters");
  const Device dev = params[0].data.defined() ? params[0].data.device() : Device::cpu();
  for (const auto& p : params) {
    NANODDP_CHECK(p.data.defined() && p.grad.defined(), "parameter {} has no {} tensor: give every parameter f32 data "
                  "and grad tensors of its shape before building the DDP engine", p.name,
                  p.data.defined() ? "grad" : "data");
    NANODDP_CHECK(p.data.dtype() == DType::F32 && p.grad.dtype() == DType::F32, "parameter {}: data and grad must be "
                  "f32 (master weights; a reduced-precision copy belongs in .compute)", p.name);
    NANODDP_CHECK(p.grad.shape() == p.data.shape(), "parameter {}: grad has shape {} but data {}", p.name,
                  p.grad.shape().str(), p.data.shape().str());
    NANODDP_CHECK(p.data.device() == dev && p.grad.device() == dev, "parameter {} is on {} but {} is on {}: put "
                  "every parameter on one device", p.name, p.data.device().str(), params[0].name, dev.str());
  }
  // Like PyTorch DDP's check of parameter shapes across ranks: a rank with another model would
  // otherwise average unrelated numbers, or wait in a collective of another size.
  if (group.size() > 1) {
    dist::Fields fields{{"the number of parameters", std::to_string(params.size())},
                        {"ReducerOptions::zero", std::to_string(opts.zero)},
                        {"ReducerOptions::whole_matrices", std::to_string(opts.whole_matrices)},
                        {"ReducerOptions::first_bucket_mb", fmt::format("{}", opts.first_bucket_mb)},
                        {"ReducerOptions::bucket_cap_mb", fmt::format("{}", opts.bucket_cap_mb)},
                        {"ReducerOptions::find_unused_parameters", std::to_string(opts.find_unused_parameters)},
                        {"ReducerOptions::replicate_below_numel", std::to_string(opts.replicate_below_numel)}};
    for (size_t i = 0; i < params.size(); i++)
      fields.emplace_back(fmt::format("parameter {}", i), fmt::format("{} {} (kind {})", params[i].name,
                                                                      params[i].data.shape().str(),
                                                                      static_cast<int>(params[i].kind)));
    dist::check_consistent(group, fields, "build the same model, in the same order, with the same options on every "
                           "rank");
  }
  std::vector<ParamInfo> infos;
  for (auto& p : params)
    infos.push_back({p.name, p.data.shape(), opts.whole_matrices && is_muon_matrix(p)});
  LayoutOptions lo;
  lo.world_size = group.size();
  lo.sharded = sharded();
  lo.first_bucket_bytes = static_cast<int64_t>(opts.first_bucket_mb * 1048576);
  lo.bucket_cap_bytes = static_cast<int64_t>(opts.bucket_cap_mb * 1048576);
  lo.replicate_below_numel = opts.replicate_below_numel;
  NANODDP_CHECK(lo.first_bucket_bytes > 0 && lo.bucket_cap_bytes > 0, "bucket sizes must be positive");
  layout_ = make_bucket_layout(infos, lo);

  for (const Bucket& b : layout_.buckets) {
    params_.push_back(Tensor::zeros({b.numel}, DType::F32, dev));
    grads_.push_back(Tensor::zeros({b.numel}, DType::F32, dev));
  }
  // Rebind each parameter to its region of the bucket buffers (gradient_as_bucket_view).
  for (size_t i = 0; i < params.size(); i++) {
    auto& p = params[i];
    const int b = layout_.bucket_of[i];
    const int64_t off = layout_.offset_of[i];
    Tensor data = params_[b].region(off, p.data.shape()), grad = grads_[b].region(off, p.grad.shape());
    copy(data, p.data);
    copy(grad, p.grad);
    const bool aliased = p.compute.defined() && p.compute.shares_storage(p.data);
    p.data = data;
    p.grad = grad;
    if (aliased) p.compute = p.data;
  }
  pending_.assign(layout_.buckets.size(), 0);
  next_launch_ = static_cast<int>(layout_.buckets.size());  // nothing in flight until sync_hook()
}

void Reducer::broadcast_parameters() {
  if (group_.size() == 1) return;
  std::vector<dist::WorkPtr> works;
  for (const Tensor& t : params_) works.push_back(group_.broadcast(t, 0));
  for (auto& w : works) w->wait();
  model_.refresh_compute_weights();
}

model::GradReadyFn Reducer::sync_hook(int micro_steps) {
  NANODDP_CHECK(micro_steps >= 1, "sync_hook: micro_steps must be positive (got {})", micro_steps);
  NANODDP_CHECK(!armed_, "sync_hook() was called twice without finish() between them: call finish() after each "
                "synchronised backward");
  armed_ = true;
  micro_scale_ = 1.f / static_cast<float>(micro_steps);
  for (size_t b = 0; b < layout_.buckets.size(); b++)
    pending_[b] = static_cast<int>(layout_.buckets[b].entries.size());
  reported_.assign(model_.parameters().size(), 0);
  next_launch_ = 0;
  works_.clear();
  return [this](int param) { on_ready(param); };
}

void Reducer::on_ready(int param) {
  const int n = static_cast<int>(model_.parameters().size());
  NANODDP_CHECK(param >= 0 && param < n, "a gradient was reported for parameter {} of a model with {}", param, n);
  NANODDP_CHECK(armed_, "the gradient of {} was reported outside a synchronised backward: pass the hook of "
                "sync_hook() to one backward only, then call finish()", model_.parameters()[param].name);
  NANODDP_CHECK(!reported_[param], "the gradient of {} was reported twice in one backward: report each parameter "
                "once, when its gradient is final (after its last use, for a shared weight)",
                model_.parameters()[param].name);
  reported_[param] = 1;
  const int b = layout_.bucket_of[param];
  pending_[b]--;
  while (next_launch_ < static_cast<int>(layout_.buckets.size()) && pending_[next_launch_] == 0)
    launch(next_launch_++);
}

void Reducer::launch(int b) {
  trace::instant("launch bucket", trace::kCompute, b);
  const Tensor& g = grads_[b];
  if (micro_scale_ != 1.f) ops::scale(g, micro_scale_);  // the mean over this rank's micro-steps
  if (group_.size() == 1) return;  // nothing to average with
  const Bucket& bk = layout_.buckets[b];
  if (opts_.zero == 2 && !bk.replicated) {
    const int r = group_.rank(), w = group_.size();
    Tensor shard = g.region(bk.shard_begin(r, w), {bk.shard_end(r, w) - bk.shard_begin(r, w)});
    works_.push_back(group_.reduce_scatter(shard, g, dist::ReduceOp::Avg));
  } else {
    works_.push_back(group_.allreduce(g, dist::ReduceOp::Avg));
  }
}

void Reducer::finish() {
  const int n = static_cast<int>(layout_.buckets.size());
  NANODDP_CHECK(armed_ || group_.size() == 1, "finish() without sync_hook(): pass reducer.sync_hook(micro_steps) "
                "to the backward of the step's last micro-batch, or the ranks' gradients are never averaged");
  armed_ = false;
  // The parameters never reported in this backward (all in the buckets not yet launched).
  std::vector<int> unreported;
  for (int b = next_launch_; b < n; b++)
    for (const auto& e : layout_.buckets[b].entries)
      if (!reported_[e.param]) unreported.push_back(e.param);
  if (!unreported.empty() && opts_.find_unused_parameters) {
    // The rest, in layout order as on every rank. A parameter never reported contributes zero, as in
    // PyTorch DDP: its .grad may still hold an earlier step's gradient (nothing else zeroes it).
    for (int p : unreported) ops::fill(model_.parameters()[p].grad, 0.f);
    while (next_launch_ < n) launch(next_launch_++);
  } else if (!unreported.empty()) {
    const int first = next_launch_;
    std::string names;
    for (int p : unreported) names += " " + model_.parameters()[p].name;
    next_launch_ = n;
    // The buckets already launched are waited for (on a GPU group this orders the compute stream
    // only; their reductions may still run on the communication stream when this throws).
    for (auto& w : works_) w->wait();
    works_.clear();
    NANODDP_FAIL("no gradient was reported in this backward for some parameters of bucket(s) {} to {}, among:{}: "
                 "report every parameter's gradient, or set ReducerOptions::find_unused_parameters for a model "
                 "that leaves some unused", first, n - 1, names);
  }
  trace::Scope traced("wait for gradients");
  for (auto& w : works_) w->wait();
  works_.clear();
}

}  // namespace nanoddp::ddp

#include "ddp/reducer.h"

#include "core/error.h"
#include "core/trace.h"
#include "ops/ops.h"

namespace nanoddp::ddp {

Reducer::Reducer(model::ParameterSet& model, dist::ProcessGroup& group, const ReducerOptions& opts)
    : model_(model), group_(group), opts_(opts) {
  NANODDP_CHECK(opts.zero >= 0 && opts.zero <= 2, "--zero must be 0, 1 or 2 (got {})", opts.zero);
  auto& params = model.parameters();
  NANODDP_CHECK(!params.empty(), "the DDP engine got a model without parameters");
  std::vector<ParamInfo> infos;
  for (auto& p : params)
    infos.push_back({p.name, p.data.shape(), opts.whole_matrices && p.kind == model::ParamKind::Matrix});
  LayoutOptions lo;
  lo.world_size = group.size();
  lo.sharded = sharded();
  lo.first_bucket_bytes = static_cast<int64_t>(opts.first_bucket_mb * 1048576);
  lo.bucket_cap_bytes = static_cast<int64_t>(opts.bucket_cap_mb * 1048576);
  NANODDP_CHECK(lo.first_bucket_bytes > 0 && lo.bucket_cap_bytes > 0, "bucket sizes must be positive");
  layout_ = make_bucket_layout(infos, lo);

  const Device dev = params[0].data.device();
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
  NANODDP_ASSERT(micro_steps >= 1, "micro_steps must be positive (got {})", micro_steps);
  micro_scale_ = 1.f / static_cast<float>(micro_steps);
  for (size_t b = 0; b < layout_.buckets.size(); b++)
    pending_[b] = static_cast<int>(layout_.buckets[b].entries.size());
  next_launch_ = 0;
  works_.clear();
  return [this](int param) { on_ready(param); };
}

void Reducer::on_ready(int param) {
  const int b = layout_.bucket_of[param];
  NANODDP_ASSERT(pending_[b] > 0, "gradient of {} reported twice", model_.parameters()[param].name);
  pending_[b]--;
  while (next_launch_ < static_cast<int>(layout_.buckets.size()) && pending_[next_launch_] == 0)
    launch(next_launch_++);
}

void Reducer::launch(int b) {
  trace::instant("launch bucket", trace::kCompute, b);
  const Tensor& g = grads_[b];
  if (micro_scale_ != 1.f) ops::scale(g, micro_scale_);  // the mean over this rank's micro-steps
  if (group_.size() == 1) return;  // nothing to average with
  if (opts_.zero == 2) {
    const Bucket& bk = layout_.buckets[b];
    const int r = group_.rank(), w = group_.size();
    Tensor shard = g.region(bk.shard_begin(r, w), {bk.shard_end(r, w) - bk.shard_begin(r, w)});
    works_.push_back(group_.reduce_scatter(shard, g, dist::ReduceOp::Avg));
  } else {
    works_.push_back(group_.allreduce(g, dist::ReduceOp::Avg));
  }
}

void Reducer::finish() {
  if (next_launch_ < static_cast<int>(layout_.buckets.size())) {
    std::string names;
    for (const auto& e : layout_.buckets[next_launch_].entries) names += " " + model_.parameters()[e.param].name;
    NANODDP_ASSERT(false, "bucket {} still waits for {} gradient(s) among{}: every parameter must receive a gradient "
                   "in the synchronised backward", next_launch_, pending_[next_launch_], names);
  }
  trace::Scope traced("wait for gradients");
  for (auto& w : works_) w->wait();
  works_.clear();
}

}  // namespace nanoddp::ddp

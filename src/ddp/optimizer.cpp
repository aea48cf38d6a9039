#include "ddp/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "comm/consistency.h"
#include "core/error.h"
#include "ops/ops.h"

namespace nanoddp::ddp {

namespace {

bool uses_muon(const OptimizerConfig& cfg, const model::Parameter& p) {
  return cfg.optimizer == OptimizerKind::Muon && is_muon_matrix(p);
}

// The sum of squares of each region, all computed before one read-back: on a GPU one host
// synchronisation per optimizer step instead of one per parameter piece (~120 at depth 20).
std::vector<float> sums_of_squares(const std::vector<Tensor>& regions, Device device) {
  const auto n = static_cast<int64_t>(regions.size());
  if (n == 0) return {};
  Tensor sums = Tensor::empty({n}, DType::F32, device);
  for (int64_t i = 0; i < n; i++) ops::sum_squares(sums.region(i, {1}), regions[static_cast<size_t>(i)]);
  const Tensor host = device.is_cpu() ? sums : sums.copy_to(Device::cpu());
  return std::vector<float>(host.data<float>(), host.data<float>() + n);
}

// Note [2026 optimizer]: nanochat's current optimizer (nanochat/optim.py, gpt.py setup_optimizer).
// AdamW groups by parameter kind, each with its own lr, betas and weight decay (eps 1e-10), s the
// model's adamw_lr_scale():
//   lm_head        unembedding_lr s        (0.8, 0.96)   0.01
//   wte            embedding_lr s          (0.8, 0.995)  0.001
//   value_embeds   embedding_lr s / 2      (0.8, 0.995)  0.01
//   resid_lambdas  scalar_lr / 100         (0.8, 0.95)   0.05
//   x0_lambdas     scalar_lr               (0.96, 0.95)  0
//   smear          smear_lr                (0.8, 0.95)   0
// Muon on every block matrix: Nesterov momentum; row equilibration (each row rescaled to the mean
// row norm, ||X||_F / sqrt(rows)); Polar Express; the norm snapped to sqrt(min(rows, cols)), that
// of an exactly semi-orthogonal matrix; NorMuon's per-row (per-column when wide) variance
// reduction; cautious weight decay; lr matrix_lr sqrt(max(1, rows / cols)) as before.
struct AdamGroup {
  double lr, beta1, beta2, weight_decay;
};

AdamGroup adam_group(const OptimizerConfig& cfg, model::ParamKind kind, double s) {
  using K = model::ParamKind;
  if (cfg.optimizer == OptimizerKind::Sgd) return {cfg.sgd_lr, 0, 0, cfg.weight_decay};
  if (!cfg.recipe_2026 || kind == K::Matrix) {
    const double lr = kind == K::Embedding ? cfg.embedding_lr * s
                      : kind == K::LmHead  ? cfg.unembedding_lr * s
                                           : cfg.adamw_matrix_lr;
    return {lr, cfg.adam_beta1, cfg.adam_beta2, cfg.weight_decay};
  }
  switch (kind) {
    case K::LmHead: return {cfg.unembedding_lr * s, 0.8, 0.96, 0.01};
    case K::Embedding: return {cfg.embedding_lr * s, 0.8, 0.995, 0.001};
    case K::ValueEmbedding: return {cfg.embedding_lr * s * 0.5, 0.8, 0.995, 0.01};
    case K::ResidLambda: return {cfg.scalar_lr * 0.01, 0.8, 0.95, 0.05};
    case K::X0Lambda: return {cfg.scalar_lr, 0.96, 0.95, 0.0};
    case K::Smear: return {cfg.smear_lr, 0.8, 0.95, 0.0};
    case K::Matrix: break;
  }
  NANODDP_FAIL("no AdamW group for parameter kind {}", static_cast<int>(kind));
}

// Row equilibration of each x [rows, cols] of xs, in place: row i times ||x||_F / (sqrt(rows)
// max(||row i||, 1e-6)). RMSNorm without eps gives each row's norm as sqrt(cols) / rstd (a zero
// row's rstd is inf, its norm 0; the normalised rows go to scratch y and are not used). The rstd of
// the whole group is read back at once, and the factors, exact with nanochat's clamp (rows of dead
// ReLU^2 units are 0 or tiny, and the clamp decides how far they are blown up), go back as one
// upload. y [rows, cols]; rstd, factors [n * rows].
void equilibrate_rows(const std::vector<Tensor>& xs) {
  if (xs.empty()) return;
  const Device device = xs[0].device();
  const int64_t rows = xs[0].dim(0), cols = xs[0].dim(1), n = static_cast<int64_t>(xs.size());
  Tensor y = Tensor::empty({rows, cols}, DType::F32, device), rstd = Tensor::empty({n * rows}, DType::F32, device);
  for (int64_t i = 0; i < n; i++) ops::rmsnorm_forward(y, rstd.region(i * rows, {rows}), xs[size_t(i)], 0.f);
  const Tensor host = device.is_cpu() ? rstd : rstd.copy_to(Device::cpu());
  Tensor factors = Tensor::empty({n * rows}, DType::F32);
  const float* r = host.data<float>();
  float* f = factors.data<float>();
  std::vector<double> norms(static_cast<size_t>(rows));
  for (int64_t i = 0; i < n; i++) {
    double total = 0;
    for (int64_t k = 0; k < rows; k++) {
      const double rs = r[i * rows + k];
      norms[size_t(k)] = std::isinf(rs) ? 0.0 : std::sqrt(double(cols)) / rs;
      total += norms[size_t(k)] * norms[size_t(k)];
    }
    const double target = std::sqrt(total / double(rows));
    for (int64_t k = 0; k < rows; k++) f[i * rows + k] = static_cast<float>(target / std::max(norms[size_t(k)], 1e-6));
  }
  const Tensor on_device = device.is_cpu() ? factors : factors.copy_to(device);
  for (int64_t i = 0; i < n; i++) ops::scale_rows(xs[size_t(i)], on_device.region(i * rows, {rows}));
}

// Each x of xs times sqrt(min(rows, cols)) / max(||x||_F, 1e-6): nanochat's correction for the
// polar iteration's under-convergence.
void snap_norms(const std::vector<Tensor>& xs) {
  if (xs.empty()) return;
  const std::vector<float> sums = sums_of_squares(xs, xs[0].device());
  const double target = std::sqrt(double(std::min(xs[0].dim(0), xs[0].dim(1))));
  for (size_t i = 0; i < xs.size(); i++)
    ops::scale(xs[i], static_cast<float>(target / std::max(std::sqrt(double(sums[i])), 1e-6)));
}

}  // namespace

Optimizer::Optimizer(model::ParameterSet& model, Reducer& reducer, const OptimizerConfig& cfg)
    : model_(model), reducer_(reducer), cfg_(cfg), muon_weight_decay_(cfg.muon_weight_decay) {
  const double s = model.adamw_lr_scale();
  auto& params = model.parameters();
  NANODDP_CHECK(!params.empty(), "the optimizer got a model without parameters");
  const auto& layout = reducer.layout();
  const int rank = reducer.group().rank(), world = reducer.group().size();
  const Device dev = params[0].data.device();
  // Muon updates whole matrices, so under sharding each must lie in one rank's shard. Checked for
  // every rank's shard, so that all ranks stop here together rather than two of them.
  if (reducer.sharded() && cfg.optimizer == OptimizerKind::Muon)
    for (const Bucket& b : layout.buckets)
      for (const BucketEntry& e : b.entries) {
        if (b.replicated || !uses_muon(cfg, params[e.param])) continue;  // whole on every rank
        const int64_t shard = b.numel / world;  // > 0: the bucket holds this matrix
        NANODDP_CHECK(e.numel == 0 || e.offset / shard == (e.offset + e.numel - 1) / shard,
                      "Muon matrix {} is split across the ranks' shards: build the Reducer with "
                      "ReducerOptions::whole_matrices = true when the optimizer is muon and --zero is 1 or 2",
                      params[e.param].name);
      }
  for (size_t bi = 0; bi < layout.buckets.size(); bi++) {
    const Bucket& b = layout.buckets[bi];
    // The elements of this bucket this rank updates: all of them, or its shard.
    const int64_t lo = reducer.sharded() ? b.shard_begin(rank, world) : 0;
    const int64_t hi = reducer.sharded() ? b.shard_end(rank, world) : b.numel;
    for (const BucketEntry& e : b.entries) {
      const int64_t a = std::max(lo, e.offset), z = std::min(hi, e.offset + e.numel);
      if (a >= z) continue;
      const model::Parameter& p = params[e.param];
      if (uses_muon(cfg, p)) {
        const int64_t rows = p.data.dim(0), cols = p.data.dim(1);
        Tensor variance = cfg.recipe_2026 ? Tensor::zeros({rows >= cols ? rows : cols}, DType::F32, dev) : Tensor();
        muon_.push_back({e.param, Tensor::zeros(p.data.shape(), DType::F32, dev), variance});
        continue;
      }
      const AdamGroup ag = adam_group(cfg, p.kind, s);
      adam_.push_back({e.param, a - e.offset, z - a, static_cast<float>(ag.lr), static_cast<float>(ag.beta1),
                       static_cast<float>(ag.beta2), static_cast<float>(ag.weight_decay),
                       Tensor::zeros({z - a}, DType::F32, dev), Tensor::zeros({z - a}, DType::F32, dev),
                       reducer.sharded() && b.replicated});
    }
  }
  for (size_t i = 0; i < muon_.size(); i++) {
    const Shape& shape = params[muon_[i].param].data.shape();
    auto same = [&](const std::vector<size_t>& g) { return params[muon_[g[0]].param].data.shape() == shape; };
    auto it = std::find_if(muon_groups_.begin(), muon_groups_.end(), same);
    if (it == muon_groups_.end())
      muon_groups_.push_back({i});
    else
      it->push_back(i);
  }
}

std::vector<Tensor> Optimizer::owned_gradients() {
  auto& params = model_.parameters();
  std::vector<Tensor> regions;
  for (const MuonMatrix& mm : muon_) regions.push_back(params[mm.param].grad);
  for (const AdamPiece& a : adam_) regions.push_back(params[a.param].grad.view({params[a.param].grad.numel()})
                                                        .region(a.offset, {a.numel}));
  return regions;
}

bool Optimizer::unscale_and_check(float inv_scale) {
  const std::vector<Tensor> regions = owned_gradients();
  const Device device = model_.parameters()[0].grad.device();
  for (const Tensor& g : regions) ops::scale(g, inv_scale);
  // A sum of squares is finite exactly when every element is (short of overflowing 3e38, which a
  // gradient worth keeping does not reach): one reduction per piece instead of a separate scan.
  std::vector<double> found{0};
  for (float s : sums_of_squares(regions, device))
    if (!std::isfinite(s)) found[0] = 1;
  dist::allreduce_scalars(reducer_.group(), found, dist::ReduceOp::Max);
  return found[0] == 0;
}

void Optimizer::clip_gradients() {
  // Each rank sums the squares of the gradient pieces it updates; sharded (--zero), those are
  // disjoint and the sums are added over the ranks (the small parameters that every rank updates,
  // Note [small parameters], counted by rank 0 alone); replicated, every rank owns them all.
  const Device device = model_.parameters()[0].grad.device();
  const std::vector<Tensor> regions = owned_gradients();
  const std::vector<float> sums = sums_of_squares(regions, device);  // Muon's, then AdamW's
  const bool first_rank = reducer_.group().rank() == 0;
  std::vector<double> sum{0};
  for (size_t i = 0; i < sums.size(); i++)
    if (i < muon_.size() || first_rank || !adam_[i - muon_.size()].replicated) sum[0] += static_cast<double>(sums[i]);
  if (reducer_.sharded()) dist::allreduce_scalars(reducer_.group(), sum, dist::ReduceOp::Sum);
  last_grad_norm_ = std::sqrt(sum[0]);
  // clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
  const double coef = cfg_.grad_clip / (last_grad_norm_ + 1e-6);
  if (coef < 1)
    for (const Tensor& g : regions) ops::scale(g, static_cast<float>(coef));
}

// Note [split Newton-Schulz]: under --zero 0 every rank holds every Muon matrix's gradient and
// momentum, and orthogonalising them all on every rank repeats the optimizer's largest cost W
// times. So, as nanochat's DistMuon does, each rank orthogonalises only the matrices it owns: in
// each group of same-shape matrices, a contiguous run of ceil(n / W), in order (rank r the r-th);
// then each matrix's direction is broadcast from its owner, and every rank applies every update.
// Each matrix's Newton-Schulz arithmetic is its own (the grouping changes no result) and a
// broadcast moves bytes, so the weights are bit for bit those of the replicated computation, and
// the momentum (updated on every rank) stays the same replicated state in checkpoints.
int Optimizer::muon_owner(size_t position, size_t group_size) const {
  const dist::ProcessGroup& g = reducer_.group();
  // Sharded, it holds only what it owns; alone or unsplit, it computes everything.
  if (reducer_.sharded() || g.size() == 1 || !cfg_.split_newton_schulz) return g.rank();
  const size_t per_rank = (group_size + size_t(g.size()) - 1) / size_t(g.size());
  return static_cast<int>(position / per_rank);
}

void Optimizer::muon_step(double lr_multiplier, double momentum) {
  auto& params = model_.parameters();
  dist::ProcessGroup& g = reducer_.group();
  const bool split = !reducer_.sharded() && g.size() > 1 && cfg_.split_newton_schulz;
  std::vector<dist::WorkPtr> broadcasts;
  muon_orthogonalised_ = 0;
  // A group of same-shape matrices at a time (Note [split Newton-Schulz] for who computes which).
  for (const std::vector<size_t>& group : muon_groups_) {
    std::vector<Tensor> directions;
    for (size_t k = 0; k < group.size(); k++) {
      model::Parameter& p = params[muon_[group[k]].param];
      ops::muon_momentum(p.grad, muon_[group[k]].momentum, static_cast<float>(momentum));  // grad <- Nesterov direction
      if (muon_owner(k, group.size()) == g.rank()) directions.push_back(p.grad);
    }
    orthogonalise(directions);
    muon_orthogonalised_ += directions.size();
    if (split)
      for (size_t k = 0; k < group.size(); k++)
        broadcasts.push_back(g.broadcast(params[muon_[group[k]].param].grad, muon_owner(k, group.size())));
  }
  for (auto& w : broadcasts) w->wait();
  for (const MuonMatrix& mm : muon_) {
    model::Parameter& p = params[mm.param];
    const double aspect = std::sqrt(std::max(1.0, double(p.data.dim(0)) / double(p.data.dim(1))));
    const double lr = cfg_.matrix_lr * lr_multiplier * aspect;
    if (cfg_.recipe_2026)
      ops::normuon_update(p.data, p.grad, mm.variance, static_cast<float>(lr), static_cast<float>(muon_weight_decay_),
                          static_cast<float>(cfg_.normuon_beta2));
    else
      ops::axpy(p.data, p.grad, static_cast<float>(-lr));
  }
}

void Optimizer::orthogonalise(const std::vector<Tensor>& xs) const {
  if (xs.empty()) return;
  if (!cfg_.recipe_2026) {
    ops::newton_schulz(xs, cfg_.ns_steps, cfg_.ns_bf16);
    return;
  }
  equilibrate_rows(xs);
  ops::polar_express(xs, cfg_.ns_steps, cfg_.ns_bf16);
  snap_norms(xs);
}

void Optimizer::step(double lr_multiplier, double momentum) {
  auto& params = model_.parameters();
  if (cfg_.grad_clip > 0) clip_gradients();
  muon_step(lr_multiplier, momentum);
  steps_taken_++;
  for (AdamPiece& a : adam_) {
    model::Parameter& p = params[a.param];
    if (cfg_.optimizer == OptimizerKind::Sgd) {
      const Tensor pd = p.data.view({p.data.numel()}).region(a.offset, {a.numel});
      const Tensor pg = p.grad.view({p.grad.numel()}).region(a.offset, {a.numel});
      if (cfg_.weight_decay != 0) ops::axpy(pg, pd, static_cast<float>(cfg_.weight_decay));
      // buf = momentum buf + g (the first step's buf is g, as torch's clone(g), since buf starts at 0).
      ops::scale(a.m, static_cast<float>(cfg_.sgd_momentum));
      ops::axpy(a.m, pg, 1.f);
      ops::axpy(pd, a.m, static_cast<float>(-a.base_lr * lr_multiplier));
      continue;
    }
    ops::AdamWStep s{static_cast<float>(a.base_lr * lr_multiplier), a.beta1, a.beta2,
                     static_cast<float>(cfg_.adam_eps), a.weight_decay, steps_taken_};
    const Tensor pd = p.data.view({p.data.numel()}), pg = p.grad.view({p.grad.numel()});
    ops::adamw_update(pd.region(a.offset, {a.numel}), pg.region(a.offset, {a.numel}), a.m, a.v, s);
  }
  gather_parameters();
  model_.refresh_compute_weights();
}

void Optimizer::gather_parameters() {
  dist::ProcessGroup& g = reducer_.group();
  if (!reducer_.sharded() || g.size() == 1) return;
  std::vector<dist::WorkPtr> works;
  for (size_t b = 0; b < reducer_.layout().buckets.size(); b++) {
    const Bucket& bk = reducer_.layout().buckets[b];
    if (bk.replicated) continue;  // every rank updated all of it
    const Tensor& flat = reducer_.params(static_cast<int>(b));
    const int64_t lo = bk.shard_begin(g.rank(), g.size()), hi = bk.shard_end(g.rank(), g.size());
    works.push_back(g.all_gather(flat, flat.region(lo, {hi - lo})));
  }
  for (auto& w : works) w->wait();
}

size_t Optimizer::state_bytes() const {
  size_t n = 0;
  for (const auto& a : adam_) n += a.m.nbytes() + a.v.nbytes();
  for (const auto& m : muon_) n += m.momentum.nbytes() + m.variance.nbytes();
  return n;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const auto& params = model_.parameters();
  for (const auto& a : adam_) {
    const std::string key = fmt::format("{}@{}", params[a.param].name, a.offset);
    out.emplace_back("adamw.m." + key, a.m);
    out.emplace_back("adamw.v." + key, a.v);
  }
  for (const auto& m : muon_) {
    out.emplace_back("muon.momentum." + params[m.param].name, m.momentum);
    if (m.variance.defined()) out.emplace_back("muon.variance." + params[m.param].name, m.variance);
  }
  Tensor step = Tensor::empty({1}, DType::I64);
  step.data<int64_t>()[0] = steps_taken_;  // under AdamW's name: the checkpoint format predates SGD
  out.emplace_back("adamw.step", step);
  return out;
}

namespace {

// adamw.step of a saved state: an int64 scalar, or an error naming `source` (a damaged or foreign
// file must not reach data<int64_t>() unchecked).
int64_t saved_steps(const NamedTensors& saved, std::string_view source) {
  const auto it = saved.find("adamw.step");
  NANODDP_CHECK(it != saved.end(), "optimizer state {} has no 'adamw.step'", source);
  const Tensor& t = it->second;
  NANODDP_CHECK(t.dtype() == DType::I64 && t.numel() == 1, "optimizer state {}: 'adamw.step' is {} {} where one "
                "int64 was expected: the file is damaged or was not written by nanoddp", source, dtype_name(t.dtype()),
                t.shape().str());
  return t.copy_to(Device::cpu()).data<int64_t>()[0];
}

}  // namespace

bool Optimizer::state_matches(const NamedTensors& saved) const {
  const auto expected = state();
  if (saved.size() != expected.size()) return false;
  for (const auto& [name, t] : expected) {
    const auto it = saved.find(name);
    if (it == saved.end() || (name != "adamw.step" && it->second.shape() != t.shape())) return false;
  }
  return true;
}

void Optimizer::load_state(const NamedTensors& saved, std::string_view source) {
  auto expected = state();
  NANODDP_CHECK(saved.size() == expected.size(), "optimizer state {} holds {} tensors where this run expects {}: it "
                "was saved with other sharding settings", source, saved.size(), expected.size());
  for (auto& [name, t] : expected) {
    const auto it = saved.find(name);
    NANODDP_CHECK(it != saved.end(), "optimizer state {} has no '{}': it was saved by a run with another world "
                  "size, --zero or --optimizer; resume with the same settings", source, name);
    if (name == "adamw.step") continue;
    const Tensor& src = it->second;
    NANODDP_CHECK(src.dtype() == t.dtype() && src.shape() == t.shape(), "optimizer state {}: '{}' is {} {} where {} "
                  "{} was expected", source, name, dtype_name(src.dtype()), src.shape().str(), dtype_name(t.dtype()),
                  t.shape().str());
    copy(t, src);
  }
  steps_taken_ = saved_steps(saved, source);
}

}  // namespace nanoddp::ddp

namespace nanoddp::ddp {

// Note [resharding]: the state's names do not depend on the sharding: "adamw.m.<param>@<offset>"
// is the piece of <param>'s moment starting at element <offset> of that parameter, and
// "muon.momentum.<param>" is a whole matrix. So the pieces of every rank's file, laid side by
// side, give each parameter's full state whatever world size and --zero wrote them, and any
// other sharding takes its own pieces out of that.
void Optimizer::load_state_resharded(const std::vector<const SafetensorsFile*>& files) {
  const auto& params = model_.parameters();
  // Which file holds each piece, and where the piece starts in its parameter.
  struct Piece {
    const SafetensorsFile* file;
    std::string name;
    int64_t offset, numel;
  };
  std::map<std::string, std::vector<Piece>> adam_m, adam_v;  // by parameter name
  std::map<std::string, Piece> muon, variance;
  int64_t step = -1;
  std::set<std::string> seen;  // --zero 0: every rank's file holds the whole state, under the same names
  for (const SafetensorsFile* f : files) {
    for (const std::string& name : f->names()) {
      if (!seen.insert(name).second) continue;
      if (name == "adamw.step") {
        step = saved_steps({{name, f->read(name)}}, f->path());
        continue;
      }
      const bool m = name.rfind("adamw.m.", 0) == 0, v = name.rfind("adamw.v.", 0) == 0;
      if (m || v) {
        const size_t at = name.rfind('@');
        int64_t offset = -1;
        const char* end = name.data() + name.size();
        const bool numeric = at != std::string::npos && std::from_chars(name.data() + at + 1, end, offset).ptr == end;
        NANODDP_CHECK(numeric && offset >= 0, "optimizer state {}: unexpected tensor '{}'", f->path(), name);
        const std::string param = name.substr(8, at - 8);
        (m ? adam_m : adam_v)[param].push_back({f, name, offset, f->shape(name).numel()});
      } else if (name.rfind("muon.momentum.", 0) == 0) {
        muon[name.substr(14)] = {f, name, 0, f->shape(name).numel()};
      } else if (name.rfind("muon.variance.", 0) == 0) {
        variance[name.substr(14)] = {f, name, 0, f->shape(name).numel()};
      } else {
        NANODDP_FAIL("optimizer state {}: unexpected tensor '{}'", f->path(), name);
      }
    }
  }
  NANODDP_CHECK(step >= 0, "optimizer state {}: no adamw.step", files.empty() ? "" : files[0]->path());
  // Fills dst (this rank's piece [offset, offset + numel) of `param`) from the saved pieces.
  auto fill = [&](const std::vector<Piece>& pieces, const std::string& param, int64_t offset, const Tensor& dst) {
    int64_t covered = 0;
    for (const Piece& pc : pieces) {
      const int64_t a = std::max(offset, pc.offset), z = std::min(offset + dst.numel(), pc.offset + pc.numel);
      if (a >= z) continue;
      const Tensor src = pc.file->read(pc.name);
      NANODDP_CHECK(src.dtype() == dst.dtype(), "optimizer state {}: tensor '{}' is {} where {} was expected: the "
                    "file is damaged or was not written by nanoddp", pc.file->path(), pc.name,
                    dtype_name(src.dtype()), dtype_name(dst.dtype()));
      copy(dst.region(a - offset, {z - a}), src.region(a - pc.offset, {z - a}));
      covered += z - a;
    }
    NANODDP_CHECK(covered == dst.numel(), "the checkpoint's optimizer state covers {} of {} elements of {}'s AdamW "
                  "state: are all optim_rank*.safetensors files there?", covered, dst.numel(), param);
  };
  for (AdamPiece& a : adam_) {
    const std::string& name = params[a.param].name;
    NANODDP_CHECK(adam_m.count(name) && adam_v.count(name), "the checkpoint has no AdamW state for {}: it was "
                  "saved with another --optimizer", name);
    fill(adam_m[name], name, a.offset, a.m);
    fill(adam_v[name], name, a.offset, a.v);
  }
  for (MuonMatrix& mm : muon_) {
    const std::string& name = params[mm.param].name;
    auto it = muon.find(name);
    NANODDP_CHECK(it != muon.end(), "the checkpoint has no Muon momentum for {}: it was saved with another "
                  "--optimizer", name);
    it->second.file->read_into(it->second.name, mm.momentum);
    if (!mm.variance.defined()) continue;
    auto v = variance.find(name);
    NANODDP_CHECK(v != variance.end(), "the checkpoint has no NorMuon variance for {}: it was saved by a run of "
                  "the classic recipe; resume with the same --recipe", name);
    v->second.file->read_into(v->second.name, mm.variance);
  }
  steps_taken_ = step;
}

}  // namespace nanoddp::ddp

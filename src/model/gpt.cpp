// GPT construction, parameters, initialisation, and the training / evaluation entry points.
// The sublayers live in block.cpp, the LM head and loss in head.cpp, inference in inference.cpp.
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/rng.h"
#include "core/timer.h"
#include "core/trace.h"
#include "model/workspace.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace nanoddp::model {

namespace {

// Rotary tables: angle(t, i) = t / base^(2i / head_dim) in f32, cos and sin rounded to bf16 as
// nanochat stores them, kept in f32.
void build_rotary(const GPTConfig& c, Tensor& cos_out, Tensor& sin_out, Device device) {
  const int64_t rows = c.rotary_rows(), half = c.head_dim() / 2;
  Tensor cos = Tensor::empty({rows, half}, DType::F32), sin = Tensor::empty({rows, half}, DType::F32);
  for (int64_t i = 0; i < half; i++) {
    const float inv_freq = 1.f / std::pow(c.rope_base, static_cast<float>(2 * i) / static_cast<float>(c.head_dim()));
    for (int64_t t = 0; t < rows; t++) {
      const float angle = static_cast<float>(t) * inv_freq;
      cos.data<float>()[t * half + i] = round_to_bf16(std::cos(angle));
      sin.data<float>()[t * half + i] = round_to_bf16(std::sin(angle));
    }
  }
  cos_out = device.is_cpu() ? cos : cos.copy_to(device);
  sin_out = device.is_cpu() ? sin : sin.copy_to(device);
}

int64_t count_targets(const Tensor& targets) {
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); i++) n += targets.data<int32_t>()[i] >= 0;
  return n;
}

}  // namespace

GPT::GPT(const GPTConfig& config, Device device, DType act_dtype)
    : config_(config), device_(device), act_dtype_(act_dtype) {
  config_.validate();
  NANODDP_CHECK(act_dtype == DType::F32 || act_dtype == DType::BF16 || act_dtype == DType::F16,
                "activations are f32, bf16 or f16, not {}", dtype_name(act_dtype));
  const int64_t c = config_.n_embd, ckv = config_.kv_dim(), vp = config_.padded_vocab();
  auto add = [&](std::string name, ParamKind kind, Shape shape) {
    Parameter p{std::move(name), kind, Tensor::zeros(shape, DType::F32, device),
                Tensor::zeros(shape, DType::F32, device), Tensor()};
    p.compute = act_dtype == DType::F32 ? p.data : Tensor::zeros(shape, act_dtype, device);
    params_.push_back(std::move(p));
    return static_cast<int>(params_.size()) - 1;
  };
  // nanochat's named_parameters() order: the GPT's own scalars come before its submodules.
  const int64_t layers = config_.n_layer;
  if (config_.is_2026()) {
    scalars_.resid = add("resid_lambdas", ParamKind::ResidLambda, {layers});
    scalars_.x0 = add("x0_lambdas", ParamKind::X0Lambda, {layers});
    scalars_.smear_lambda = add("smear_lambda", ParamKind::Smear, {1});
    scalars_.backout = add("backout_lambda", ParamKind::Smear, {1});
  }
  wte_ = add("transformer.wte.weight", ParamKind::Embedding, {vp, c});
  for (int64_t l = 0; l < layers; l++) {
    const std::string h = fmt::format("transformer.h.{}.", l);
    BlockWeights b{};
    b.c_q = add(h + "attn.c_q.weight", ParamKind::Matrix, {c, c});
    b.c_k = add(h + "attn.c_k.weight", ParamKind::Matrix, {ckv, c});
    b.c_v = add(h + "attn.c_v.weight", ParamKind::Matrix, {ckv, c});
    b.attn_proj = add(h + "attn.c_proj.weight", ParamKind::Matrix, {c, c});
    if (config_.has_value_embedding(l))
      b.ve_gate = add(h + "attn.ve_gate.weight", ParamKind::Matrix, {config_.n_kv_head, GPTConfig::kValueGateChannels});
    b.c_fc = add(h + "mlp.c_fc.weight", ParamKind::Matrix, {4 * c, c});
    b.mlp_proj = add(h + "mlp.c_proj.weight", ParamKind::Matrix, {c, 4 * c});
    blocks_.push_back(b);
  }
  lm_head_ = add("lm_head.weight", ParamKind::LmHead, {vp, c});
  if (config_.is_2026()) {
    scalars_.smear_gate = add("smear_gate.weight", ParamKind::Smear, {1, GPTConfig::kSmearGateChannels});
    for (int64_t l = 0; l < layers; l++)
      if (config_.has_value_embedding(l))
        blocks_[l].value_embed = add(fmt::format("value_embeds.{}.weight", l), ParamKind::ValueEmbedding, {vp, ckv});
  }
  build_rotary(config_, rope_cos_, rope_sin_, device);
}

GPT::~GPT() = default;

Parameter& GPT::parameter(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return p;
  NANODDP_FAIL("the model has no parameter named '{}'", name);
}

void GPT::init_weights(uint64_t seed) {
  if (config_.is_2026()) {
    init_weights_2026(seed);
    return;
  }
  for (auto& p : params_) {
    const bool zero = p.name == "lm_head.weight" || p.name.ends_with("c_proj.weight");
    float std = 0.f;
    if (p.kind == ParamKind::Embedding) {
      std = 1.f;
    } else if (!zero) {
      const double fan_out = p.data.dim(0), fan_in = p.data.dim(1);
      std = static_cast<float>(1.0 / std::sqrt(fan_in) * std::min(1.0, std::sqrt(fan_out / fan_in)));
    }
    Tensor host = Tensor::empty(p.data.shape(), DType::F32);
    Rng rng(seed, stream_id(p.name));
    float* w = host.data<float>();
    for (int64_t i = 0; i < host.numel(); i++) w[i] = zero ? 0.f : std * rng.normal();
    copy(p.data, host);
  }
  refresh_compute_weights();
}

double GPT::adamw_lr_scale() const { return std::pow(static_cast<double>(config_.n_embd) / 768.0, -0.5); }

void GPT::refresh_compute_weights() {
  if (act_dtype_ == DType::F32) return;
  for (auto& p : params_) ops::cast(p.compute, p.data);
}

void GPT::zero_grad() {
  for (auto& p : params_) ops::fill(p.grad, 0.f);
}

Workspace& GPT::workspace(std::unique_ptr<Workspace>& slot, int64_t batch, int64_t seq) {
  NANODDP_CHECK(seq <= config_.max_seq_len, "sequence length {} exceeds the model's max_seq_len {}", seq,
                config_.max_seq_len);
  if (slot && slot->batch == batch && slot->seq == seq) return *slot;
  slot.reset();  // free the old shapes first: their blocks go back to the cache for the new ones
  auto ws = std::make_unique<Workspace>();
  const int64_t n = batch * seq, c = config_.n_embd, h = config_.n_head, hkv = config_.n_kv_head,
                d = config_.head_dim();
  auto act = [&](Shape s) { return Tensor::empty(s, act_dtype_, device_); };
  auto f32 = [&](Shape s) { return Tensor::empty(s, DType::F32, device_); };
  ws->batch = batch;
  ws->seq = seq;
  ws->tokens = n;
  ws->ids = Tensor::empty({n}, DType::I32, device_);
  ws->targets = Tensor::empty({n}, DType::I32, device_);
  ws->emb = act({n, c});
  ws->rstd_e = f32({n});
  ws->x = act({n, c});
  for (int64_t l = 0; l < config_.n_layer; l++) {
    LayerActs a;
    a.xn1 = act({n, c});
    a.rstd1 = f32({n});
    a.qn = act({batch, seq, h, d});
    a.rstd_q = f32({n * h});
    a.kn = act({batch, seq, hkv, d});
    a.rstd_k = f32({n * hkv});
    a.v = act({batch, seq, hkv, d});
    a.att = act({batch, seq, h, d});
    a.lse = f32({batch, h, seq});
    a.xn2 = act({n, c});
    a.rstd2 = f32({n});
    a.h = act({n, 4 * c});
    ws->layers.push_back(std::move(a));
  }
  ws->xf = act({n, c});
  ws->rstd_f = f32({n});
  // LM-head chunk: at most 32M logits (128 MB in f32) at a time on the CPU, where a chunk that
  // stays near the caches pays. On a GPU 256M (512 MB in bf16): every chunk's weight-gradient GEMM
  // reads and writes the whole f32 [V, C] gradient once (beta = 1), so at vocab 65,536 and dim
  // 1280, 512-row chunks would move 671 MB per 512 rows (64 chunks, ~43 GB per 32K-token
  // micro-step, memory-bound); 4,096-row chunks move an eighth of that, and each GEMM's k of 4,096
  // keeps it compute-bound. Chunking changes only the order in which the weight gradient adds its
  // rows.
  // Chunks are whole multiples of 16 rows where there is more than one, as FP8 GEMMs need (set_fp8).
  const int64_t head_budget = device_.is_cpu() ? int64_t{1} << 25 : int64_t{1} << 28;
  ws->head_rows = std::max<int64_t>(1, std::min<int64_t>(n, head_budget / config_.padded_vocab()));
  if (ws->head_rows < n) ws->head_rows = std::max<int64_t>(16, ws->head_rows / 16 * 16);
  ws->logits = act({ws->head_rows, config_.padded_vocab()});
  ws->losses = f32({n});
  ws->dx = act({n, c});
  ws->dxn = act({n, c});
  ws->datt = act({batch, seq, h, d});
  ws->dq = act({batch, seq, h, d});
  ws->dk = act({batch, seq, hkv, d});
  ws->dv = act({batch, seq, hkv, d});
  ws->dh = act({n, 4 * c});
  ws->a = act({n, 4 * c});
  if (config_.is_2026()) {
    for (int64_t l = 0; l < config_.n_layer; l++) {
      ws->layers[l].xin = act({n, c});
      if (config_.has_value_embedding(l)) ws->layers[l].gate = f32({n, hkv});
    }
    ws->x0 = act({n, c});
    ws->smear_gate = f32({n});
    ws->dsmear = f32({n});
    ws->xmid = act({n, c});
    ws->dx0 = act({n, c});
    ws->dmid = act({n, c});
    ws->dscalars = f32({2 * config_.n_layer + 2});
  }
  slot = std::move(ws);
  return *slot;
}

void GPT::load_batch(Workspace& ws, const Tensor& inputs, const Tensor* targets) {
  copy(ws.ids, inputs.view({ws.tokens}));
  if (targets != nullptr) copy(ws.targets, targets->view({ws.tokens}));
}

void GPT::forward_trunk(Workspace& ws, KVCache* cache) {
  embed_forward(ws);
  const bool r2026 = config_.is_2026();
  if (r2026) smear_forward(ws, cache);
  for (int l = 0; l < static_cast<int>(config_.n_layer); l++) {
    if (r2026) mix_forward(ws, l);
    attention_forward(ws, l, cache);
    mlp_forward(ws, l);
    if (r2026 && l == config_.backout_layer()) ops::cast(ws.xmid, ws.x);
  }
  if (r2026) backout_forward(ws);
}

// Note [accumulation order]
// Gradient accumulation must equal data parallelism: W ranks with one micro-batch each, averaged
// by an all-reduce, should train like one rank accumulating the same W micro-batches. Two ranks
// compute (g1 + g2) / 2 per element: one addition, one division. Accumulating straight into .grad
// (GEMM beta = 1, the chunked LM head, the embedding scatter-add) would instead start the second
// micro-step's partial sums from g1, (g1 + a) + b rather than g1 + (a + b), and where a kernel
// splits its reduction depends on the CPU (oneDNN blocks differently on AMX than on Zen 5). AdamW
// then turns such last-bit differences of near-zero gradient elements into full-size updates
// (m / sqrt(v) is about their sign), which is how a 2-rank run drifted 1.8e-5 from its 1-rank twin
// in six steps on one CPU kind and not on the other. So:
//  - a micro-step's gradient is computed whole (into a scratch when accumulating) and added to
//    .grad once, as PyTorch's autograd adds a fresh gradient;
//  - every micro-step uses the unscaled mean loss (the same gradient a rank computes), and the
//    reducer divides the sum by the number of micro-steps (ddp::Reducer::sync_hook).
// Two ranks then equal one rank with two micro-steps bit for bit on any CPU: both compute g1 + g2
// and halve it exactly. With three or more, the collective sums in its own order, which the tests
// bound from the summation error. The cost: one extra pass over the gradients per accumulated
// micro-step, one over the buckets per step, and a scratch the size of the largest parameter.
Tensor GPT::micro_grad(const Parameter& p, bool accumulate) {
  if (!accumulate) return p.grad;
  if (!grad_scratch_.defined()) {
    int64_t largest = 0;
    for (const auto& q : params_) largest = std::max(largest, q.grad.numel());
    grad_scratch_ = Tensor::empty({largest}, DType::F32, device_);
  }
  return grad_scratch_.region(0, p.grad.shape());
}

void GPT::add_micro_grad(Parameter& p, bool accumulate) {
  if (accumulate) ops::axpy(p.grad, grad_scratch_.region(0, p.grad.shape()), 1.f);
}

double GPT::forward_backward(const Tensor& inputs, const Tensor& targets, float loss_scale, bool accumulate,
                             const GradReadyFn& on_grad_ready) {
  NANODDP_ASSERT(inputs.ndim() == 2 && inputs.shape() == targets.shape() && inputs.dtype() == DType::I32);
  Workspace& ws = workspace(train_ws_, inputs.dim(0), inputs.dim(1));
  const int64_t valid = forward_backward_deferred(ws.losses, inputs, targets, loss_scale, accumulate, on_grad_ready);
  const double loss_sum = sum_losses(ws, nullptr);
  return valid > 0 ? loss_sum / static_cast<double>(valid) : 0.0;
}

int64_t GPT::forward_backward_deferred(const Tensor& losses, const Tensor& inputs, const Tensor& targets,
                                       float loss_scale, bool accumulate, const GradReadyFn& on_grad_ready) {
  NANODDP_ASSERT(inputs.ndim() == 2 && inputs.shape() == targets.shape() && inputs.dtype() == DType::I32);
  NANODDP_ASSERT(losses.dtype() == DType::F32 && losses.numel() == inputs.numel() && losses.device() == device_);
  NANODDP_CHECK(std::isfinite(loss_scale), "forward_backward: the loss scale must be finite (got {})", loss_scale);
  Workspace& ws = workspace(train_ws_, inputs.dim(0), inputs.dim(1));
  NANODDP_CHECK(!fp8_ || ws.tokens % 16 == 0,
                "FP8 training needs the tokens of a micro-step (device batch x sequence length, here {}) to be a "
                "multiple of 16 (the FP8 GEMMs' rule): change --device_batch_size or --max_seq_len, or drop --fp8",
                ws.tokens);
  // This micro-step's GEMMs in FP8 (Note [fp8 layers] in block.cpp), and no evaluation's after it.
  struct Fp8Step {
    bool& flag;
    ~Fp8Step() { flag = false; }
  } fp8_step{fp8_step_};
  fp8_step_ = fp8_;
  load_batch(ws, inputs, &targets);
  const int64_t valid = count_targets(targets);
  // d(loss_scale * mean loss) / d(per-token loss). With no valid target every row is ignored and
  // gets a zero gradient whatever the scale.
  const float grad_scale = valid > 0 ? loss_scale / static_cast<float>(valid) : loss_scale;
  GradReadyFn ready = on_grad_ready ? on_grad_ready : [](int) {};

  Stopwatch forward;
  const double trace_start = trace::now_us();
  forward_trunk(ws);
  if (phase_timing_) ops::backend(device_).synchronize();
  last_forward_seconds_ = forward.seconds();
  const double trace_mid = trace::now_us();
  trace::record("forward", trace::kCompute, trace_start, trace_mid);
  head_forward_backward(ws, losses, grad_scale, accumulate, true);
  ready(lm_head_);
  const bool r2026 = config_.is_2026();
  if (r2026) backout_backward(ws);
  for (int l = static_cast<int>(config_.n_layer) - 1; l >= 0; l--) {
    if (r2026 && l == config_.backout_layer()) ops::axpy(ws.dx, ws.dmid, 1.f);
    mlp_backward(ws, l, accumulate, ready);
    attention_backward(ws, l, accumulate, ready);
    if (r2026) mix_backward(ws, l);
  }
  if (r2026) {
    smear_backward(ws, accumulate, ready);  // ws.dx becomes the gradient of norm(wte[ids])
    finish_scalar_grads(ws, accumulate, ready);
  }
  // x = norm(wte[ids]): through the norm, then scatter into the embedding rows.
  ops::rmsnorm_backward(ws.dxn, ws.dx, ws.emb, ws.rstd_e, false);
  const Tensor dwte = micro_grad(params_[wte_], accumulate);
  ops::fill(dwte, 0.f);
  ops::embedding_backward(dwte, ws.dxn, ws.ids);
  add_micro_grad(params_[wte_], accumulate);
  ready(wte_);
  trace::record("backward", trace::kCompute, trace_mid, trace::now_us());
  return valid;
}

Tensor GPT::forward_losses(const Tensor& inputs, const Tensor& targets) {
  NANODDP_ASSERT(inputs.ndim() == 2 && inputs.shape() == targets.shape() && inputs.dtype() == DType::I32);
  Workspace& ws = workspace(train_ws_, inputs.dim(0), inputs.dim(1));
  load_batch(ws, inputs, &targets);
  forward_trunk(ws);
  Tensor losses = Tensor::empty({ws.tokens}, DType::F32);
  head_forward_backward(ws, ws.losses, 0.f, false, false);
  sum_losses(ws, &losses);
  return losses;
}

}  // namespace nanoddp::model

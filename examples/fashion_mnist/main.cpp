// The DDP guide's first example, with nanoddp as the library: an MLP (784 -> 256 -> ReLU -> 10) on
// Fashion-MNIST, cross-entropy, Adam, a DistributedSampler per rank, rank 0 printing and saving a
// checkpoint that --resume continues from.
// Runs alone, under `nanoddp run --nproc_per_node N`, torchrun-style variables, mpirun or srun:
//   build/examples/fashion_mnist --epochs 2
//   build/nanoddp run --standalone --nproc_per_node 2 build/examples/fashion_mnist --epochs 2
// What a model of one's own needs (docs/library.md): a model::ParameterSet, a backward that calls
// the Reducer's hook for each parameter as its gradient is complete, Reducer::finish, Optimizer::step.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <zlib.h>

#include <nanoddp/checkpoint.h>
#include <nanoddp/ddp.h>
#include <nanoddp/distributed.h>
#include <nanoddp/distributed_sampler.h>
#include <nanoddp/ops.h>
#include <nanoddp/optimizer.h>
#include <nanoddp/tensor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace {

using namespace nanoddp;

// The idx files of Debian's dataset-fashion-mnist (gzip): images u8 [n, 28, 28], labels u8 [n].
struct Split {
  std::vector<float> images;  // [n, 784], scaled to [0, 1] as torchvision's ToTensor does
  std::vector<int32_t> labels;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

std::vector<uint8_t> read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  NANODDP_CHECK(f != nullptr, "cannot open {}: install Debian's dataset-fashion-mnist (scripts/setup.sh does) or "
                "give --data the folder that holds the idx .gz files", path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) out.insert(out.end(), buf, buf + n);
  gzclose(f);
  return out;
}

uint32_t big_endian(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | uint32_t(b[at + 3]);
}

Split read_split(const std::string& dir, const std::string& prefix) {
  const std::string ipath = dir + "/" + prefix + "-images-idx3-ubyte.gz", lpath = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  const auto img = read_gzip(ipath), lab = read_gzip(lpath);
  NANODDP_CHECK(img.size() >= 16 && big_endian(img, 0) == 2051, "{} is not an idx image file", ipath);
  NANODDP_CHECK(lab.size() >= 8 && big_endian(lab, 0) == 2049, "{} is not an idx label file", lpath);
  const size_t n = big_endian(img, 4), rows = big_endian(img, 8), cols = big_endian(img, 12);
  NANODDP_CHECK(rows == 28 && cols == 28 && img.size() == 16 + n * 784 && big_endian(lab, 4) == n &&
                lab.size() == 8 + n, "{} and {} do not hold the same number of 28x28 images and labels", ipath, lpath);
  Split s;
  s.images.resize(n * 784);
  for (size_t i = 0; i < n * 784; i++) s.images[i] = img[16 + i] / 255.f;
  s.labels.assign(lab.begin() + 8, lab.end());
  return s;
}

// The guide's model. Parameters are f32 on the CPU; the Reducer rebinds data and grad to views of
// its buckets, so every step reads them through params_.
class Mlp final : public model::ParameterSet {
 public:
  static constexpr int64_t kIn = 784, kHidden = 256, kOut = 10;
  explicit Mlp(uint64_t seed) {
    // torch.nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
    auto make = [&](const char* name, Shape shape, int64_t fan_in, uint64_t stream) {
      Tensor t = Tensor::empty(shape, DType::F32);
      Rng rng(seed, stream);
      const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
      for (int64_t i = 0; i < t.numel(); i++) t.data<float>()[i] = (2 * rng.uniform() - 1) * bound;
      params_.push_back({name, model::ParamKind::Matrix, t, Tensor::zeros(shape, DType::F32), t});
    };
    make("fc1.weight", {kHidden, kIn}, kIn, 1);
    make("fc1.bias", {kHidden}, kIn, 2);
    make("fc2.weight", {kOut, kHidden}, kHidden, 3);
    make("fc2.bias", {kOut}, kHidden, 4);
  }
  std::vector<model::Parameter>& parameters() override { return params_; }
  // data and compute are the same f32 tensor; the Reducer's rebinding must keep them so.
  void refresh_compute_weights() override {
    for (auto& p : params_) p.compute = p.data;
  }

  // logits [b, 10] of x [b, 784].
  Tensor forward(const Tensor& x, Tensor* hidden_out = nullptr) {
    const int64_t b = x.dim(0);
    Tensor h = Tensor::empty({b, kHidden}, DType::F32), y = Tensor::empty({b, kOut}, DType::F32);
    ops::matmul(h, x, false, params_[0].data, true);
    for (int64_t i = 0; i < b; i++)
      for (int64_t j = 0; j < kHidden; j++) {
        float& v = h.data<float>()[i * kHidden + j];
        v = std::max(0.f, v + params_[1].data.data<float>()[j]);
      }
    ops::matmul(y, h, false, params_[2].data, true);
    for (int64_t i = 0; i < b; i++)
      for (int64_t j = 0; j < kOut; j++) y.data<float>()[i * kOut + j] += params_[3].data.data<float>()[j];
    if (hidden_out) *hidden_out = h;
    return y;
  }

  // Mean cross-entropy over the batch; its gradient written into each .grad, and `ready(i)` called
  // as parameter i's gradient is complete (last layer first): the Reducer's hook.
  double forward_backward(const Tensor& x, const std::vector<int32_t>& labels, const model::GradReadyFn& ready) {
    const int64_t b = x.dim(0);
    Tensor h;
    Tensor y = forward(x, &h);
    double loss = 0;
    Tensor dy = Tensor::empty({b, kOut}, DType::F32);
    for (int64_t i = 0; i < b; i++) {
      const float* z = y.data<float>() + i * kOut;
      const float mx = *std::max_element(z, z + kOut);
      double sum = 0;
      for (int64_t j = 0; j < kOut; j++) sum += std::exp(double(z[j] - mx));
      loss += std::log(sum) + mx - z[labels[i]];
      for (int64_t j = 0; j < kOut; j++)
        dy.data<float>()[i * kOut + j] = static_cast<float>((std::exp(double(z[j] - mx)) / sum - (j == labels[i])) / b);
    }
    // fc2: dW2 = dy^T h, db2 = sum dy, dh = dy W2 (then through the ReLU).
    ops::matmul(params_[2].grad, dy, true, h, false);
    ready(2);
    column_sums(params_[3].grad, dy);
    ready(3);
    Tensor dh = Tensor::empty({b, kHidden}, DType::F32);
    ops::matmul(dh, dy, false, params_[2].data, false);
    for (int64_t i = 0; i < b * kHidden; i++)
      if (h.data<float>()[i] <= 0.f) dh.data<float>()[i] = 0.f;
    ops::matmul(params_[0].grad, dh, true, x, false);
    ready(0);
    column_sums(params_[1].grad, dh);
    ready(1);
    return loss / static_cast<double>(b);
  }

 private:
  static void column_sums(const Tensor& out, const Tensor& m) {
    const int64_t rows = m.dim(0), cols = m.dim(1);
    float* o = out.data<float>();
    std::fill(o, o + cols, 0.f);
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) o[j] += m.data<float>()[i * cols + j];
  }
  std::vector<model::Parameter> params_;
};

Tensor gather_images(const Split& s, const std::vector<int64_t>& idx) {
  Tensor x = Tensor::empty({static_cast<int64_t>(idx.size()), Mlp::kIn}, DType::F32);
  for (size_t i = 0; i < idx.size(); i++)
    std::copy_n(s.images.begin() + idx[i] * Mlp::kIn, Mlp::kIn, x.data<float>() + static_cast<int64_t>(i) * Mlp::kIn);
  return x;
}

// The checkpoint, as docs/library.md's "Checkpoints for your own model" writes it: rank 0 saves the
// weights (the epochs done in the metadata) and, beside them, the optimizer state, which is the
// same on every rank (replicated, zero 0). Then every rank waits, so none reads a half-written file.
std::string optimizer_path(const std::string& weights) {
  return std::filesystem::path(weights).replace_extension(".optimizer.safetensors").string();
}

void save_checkpoint(const std::string& path, int epochs_done, Mlp& model, const ddp::Optimizer& optimizer,
                     dist::ProcessGroup& group) {
  if (group.rank() == 0) {
    SafetensorsWriter w;
    for (const auto& p : model.parameters()) w.add(p.name, p.data);
    w.set_metadata("epochs_done", std::to_string(epochs_done));
    w.write(path);
    SafetensorsWriter state;
    for (const auto& [name, t] : optimizer.state()) state.add(name, t);
    state.write(optimizer_path(path));
  }
  group.barrier()->wait();
}

// Every rank reads the same files into the model (through parameters(): the Reducer has moved
// them into its buckets) and the optimizer; returns the epochs done.
int load_checkpoint(const std::string& path, Mlp& model, ddp::Optimizer& optimizer) {
  SafetensorsFile weights(path);
  const auto done = weights.metadata().find("epochs_done");
  NANODDP_CHECK(done != weights.metadata().end(), "{} has no epochs_done: give --resume a file this example's --out "
                "wrote", path);
  for (auto& p : model.parameters()) weights.read_into(p.name, p.data);
  model.refresh_compute_weights();
  const SafetensorsFile file(optimizer_path(path));
  ddp::NamedTensors state;
  for (const std::string& name : file.names()) state.emplace(name, file.read(name));
  NANODDP_CHECK(optimizer.state_matches(state), "{} does not hold this optimizer's state", file.path());
  optimizer.load_state(state, file.path());
  return std::stoi(done->second);
}

struct Args {
  int epochs = 2;
  int64_t batch_size = 64;  // per rank, as in the guide
  double lr = 1e-3;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out = "fashion_mnist.safetensors";
  uint64_t seed = 0;
  int threads = 1;
  std::string backend = "auto";
  std::string resume;  // a checkpoint --out wrote: continue after its epochs
};

int run(const Args& a) {
  NANODDP_CHECK(a.epochs >= 1, "--epochs must be at least 1 (got {})", a.epochs);
  NANODDP_CHECK(a.batch_size >= 1, "--batch_size must be at least 1 (got {})", a.batch_size);
  NANODDP_CHECK(std::isfinite(a.lr) && a.lr > 0, "--lr must be positive (got {})", a.lr);
  ops::set_cpu_threads(a.threads);
  const Split train = read_split(a.data, "train"), test = read_split(a.data, "t10k");
  // The process group from whatever launched us (or a single rank).
  const dist::DistEnv env = dist::discover_environment();
  dist::DistOptions d;
  d.backend = parse_option<dist::BackendKind>(a.backend, "--backend");
  auto ctx = dist::init_distributed(d, Device::cpu(), env);
  dist::ProcessGroup& group = *ctx->group;

  Mlp model(a.seed);
  ddp::Reducer reducer(model, group, ddp::ReducerOptions{});
  reducer.broadcast_parameters();  // every rank starts from rank 0's weights
  ddp::OptimizerConfig oc;
  oc.optimizer = ddp::OptimizerKind::AdamW;  // Adam: AdamW without weight decay, torch.optim.Adam's betas and eps
  oc.adamw_matrix_lr = a.lr;
  oc.adam_beta1 = 0.9;
  oc.adam_beta2 = 0.999;
  oc.adam_eps = 1e-8;
  ddp::Optimizer optimizer(model, reducer, oc);
  const int first_epoch = a.resume.empty() ? 0 : load_checkpoint(a.resume, model, optimizer);
  NANODDP_CHECK(first_epoch < a.epochs, "{} has {} epochs done: give --epochs more than that", a.resume, first_epoch);

  data::DistributedSampler sampler(train.size(), group.size(), group.rank(), true, a.seed, false);
  double train_seconds = 0, samples = 0;  // training steps only (for bench/fashion_mnist_bench.sh)
  for (int epoch = first_epoch; epoch < a.epochs; epoch++) {
    const auto epoch_start = std::chrono::steady_clock::now();
    sampler.set_epoch(epoch);
    const auto idx = sampler.indices();
    std::vector<double> loss{0, 0};  // sum of batch losses, batches
    for (size_t first = 0; first < idx.size(); first += static_cast<size_t>(a.batch_size)) {
      const std::vector<int64_t> batch(idx.begin() + static_cast<std::ptrdiff_t>(first),
                                       idx.begin() + static_cast<std::ptrdiff_t>(std::min(idx.size(), first + a.batch_size)));
      std::vector<int32_t> labels;
      for (int64_t i : batch) labels.push_back(train.labels[static_cast<size_t>(i)]);
      loss[0] += model.forward_backward(gather_images(train, batch), labels, reducer.sync_hook());
      loss[1] += 1;
      reducer.finish();
      optimizer.step(1.0, 0.0);
    }
    train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    samples += static_cast<double>(idx.size()) * group.size();
    dist::allreduce_scalars(group, loss, dist::ReduceOp::Sum);
    // Test accuracy, test images strided by rank and the counts summed.
    std::vector<double> correct{0, 0};
    for (int64_t i = group.rank(); i < test.size(); i += group.size()) {
      const Tensor y = model.forward(gather_images(test, {i}));
      const float* z = y.data<float>();
      correct[0] += (std::max_element(z, z + Mlp::kOut) - z) == test.labels[static_cast<size_t>(i)] ? 1 : 0;
      correct[1] += 1;
    }
    dist::allreduce_scalars(group, correct, dist::ReduceOp::Sum);
    log::print0("epoch {} | train loss {:.4f} | test accuracy {:.4f}", epoch + 1, loss[0] / loss[1],
                correct[0] / correct[1]);
    if (epoch + 1 == a.epochs) {
      save_checkpoint(a.out, a.epochs, model, optimizer, group);
      log::print0("{}", nlohmann::json{{"test_accuracy", correct[0] / correct[1]}, {"train_loss", loss[0] / loss[1]},
                                       {"epochs", a.epochs}, {"world_size", group.size()}, {"saved", a.out},
                                       {"samples_per_s", samples / train_seconds}}
                            .dump());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Fashion-MNIST MLP, data-parallel with nanoddp's DDP engine"};
  app.add_option("--epochs", a.epochs, "Passes over the training set")->capture_default_str();
  app.add_option("--batch_size,--batch-size", a.batch_size, "Images per step on each rank")->capture_default_str();
  app.add_option("--lr", a.lr, "Adam learning rate")->capture_default_str();
  app.add_option("--data", a.data, "Folder with the idx .gz files")->capture_default_str();
  app.add_option("--out", a.out, "Where rank 0 saves the weights (safetensors)")->capture_default_str();
  app.add_option("--seed", a.seed, "Seed of the weights and the shuffle")->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads per rank")->capture_default_str();
  app.add_option("--backend", a.backend, "auto, gloo or mpi")->capture_default_str();
  app.add_option("--resume", a.resume, "Continue from a checkpoint --out wrote (its optimizer state beside it)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return 1;
  }
}

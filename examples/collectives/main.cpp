// The DDP guide's manual collectives through nanoddp's process-group API, run under any launcher:
//   build/nanoddp run --standalone --nproc_per_node 2 build/examples/collectives
// Each rank contributes rank + 1; the program prints, on every rank:
//   all_reduce SUM then divide by the world size (a mean, as DDP averages gradients by hand),
//   broadcast from rank 0, and all_gather of every rank's value.
#include <fmt/format.h>
#include <nanoddp/distributed.h>
#include <nanoddp/tensor.h>

#include <cstdio>

int main() {
  using namespace nanoddp;
  try {
    auto ctx = dist::init_distributed(dist::DistOptions{}, Device::cpu(), dist::discover_environment());
    dist::ProcessGroup& g = *ctx->group;
    const int rank = g.rank(), world = g.size();

    Tensor t = Tensor::empty({1}, DType::F32);
    t.data<float>()[0] = static_cast<float>(rank + 1);
    g.allreduce(t, dist::ReduceOp::Sum)->wait();
    const float mean = t.data<float>()[0] / static_cast<float>(world);

    Tensor b = Tensor::empty({1}, DType::F32);
    b.data<float>()[0] = rank == 0 ? 42.f : -1.f;  // only rank 0's value survives
    g.broadcast(b, 0)->wait();

    Tensor mine = Tensor::empty({1}, DType::F32), all = Tensor::empty({world}, DType::F32);
    mine.data<float>()[0] = static_cast<float>(rank + 1);
    g.all_gather(all, mine)->wait();
    std::string gathered;
    for (int r = 0; r < world; r++) gathered += fmt::format("{}{:g}", r ? "," : "", all.data<float>()[r]);

    g.barrier()->wait();
    std::printf("rank %d/%d: all_reduce sum %g, mean %g | broadcast %g | all_gather [%s]\n", rank, world,
                static_cast<double>(t.data<float>()[0]), static_cast<double>(mean),
                static_cast<double>(b.data<float>()[0]), gathered.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives: error: %s\n", e.what());
    return 1;
  }
}

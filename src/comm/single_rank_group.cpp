// The group of one rank: reductions over one rank are the identity, reduce_scatter and all_gather
// are copies (skipped when in place), and nothing waits. Used for world size 1 so that training
// code runs the same path with or without a launcher, without sockets.
#include "comm/collective.h"
#include "comm/process_group.h"
#include "comm/work.h"

namespace nanoddp::dist {

namespace {

class SingleRankGroup final : public ProcessGroup {
 public:
  explicit SingleRankGroup(Device device) : ProcessGroup(0, 1), device_(device) {}

  std::string backend_name() const override { return "single"; }
  Device device() const override { return device_; }

 protected:
  const CollectiveSupport& support() const override {
    static const CollectiveSupport any_dtype{TensorPlace::GroupDevice};
    return any_dtype;
  }
  WorkPtr run_allreduce(const Tensor&, Reduction) override { return done(); }
  WorkPtr run_reduce_scatter(const Tensor& out, const Tensor& in, Reduction, bool in_place) override {
    if (!in_place) copy(out, in);
    return done();
  }
  WorkPtr run_all_gather(const Tensor& out, const Tensor& in, bool in_place) override {
    if (!in_place) copy(out, in);
    return done();
  }
  WorkPtr run_broadcast(const Tensor&, int) override { return done(); }
  WorkPtr run_barrier() override { return done(); }

 private:
  static WorkPtr done() { return std::make_shared<CompletedWork>(); }

  Device device_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_rank_group(Device device) {
  return std::make_unique<SingleRankGroup>(device);
}

}  // namespace nanoddp::dist

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

  WorkPtr allreduce(const Tensor& t, ReduceOp) override {
    check_device(t);
    return done();
  }

  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp) override {
    check_device(out);
    check_device(in);
    check_reduce_scatter_shapes(out, in, 1);
    copy_unless_same(out, in);
    return done();
  }

  WorkPtr all_gather(const Tensor& out, const Tensor& in) override {
    check_device(out);
    check_device(in);
    check_all_gather_shapes(out, in, 1);
    copy_unless_same(out, in);
    return done();
  }

  WorkPtr broadcast(const Tensor& t, int root) override {
    check_device(t);
    check_root(root, 1);
    return done();
  }

  WorkPtr barrier() override { return done(); }

 private:
  static WorkPtr done() { return std::make_shared<CompletedWork>(); }

  void check_device(const Tensor& t) const {
    NANODDP_CHECK(!t.defined() || t.device() == device_, "collective on a {} tensor in a process group on {}",
                  t.device().str(), device_.str());
  }

  static void copy_unless_same(const Tensor& out, const Tensor& in) {
    if (out.numel() > 0 && out.raw() != in.raw()) copy(out, in);
  }

  Device device_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_rank_group(Device device) {
  return std::make_unique<SingleRankGroup>(device);
}

}  // namespace nanoddp::dist

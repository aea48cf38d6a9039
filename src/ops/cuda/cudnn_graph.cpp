#include "ops/cuda/cudnn_graph.h"

#include <fmt/format.h>

#include <algorithm>

namespace nanoddp::cuda::cudnn {

Api::Api(const CudnnLibrary& lib)
    : error_string(reinterpret_cast<decltype(error_string)>(lib.fn.get_error_string)),
      last_error(reinterpret_cast<decltype(last_error)>(lib.fn.get_last_error_string)),
      create_handle(reinterpret_cast<decltype(create_handle)>(lib.fn.create)),
      set_stream(reinterpret_cast<decltype(set_stream)>(lib.fn.set_stream)),
      create(reinterpret_cast<decltype(create)>(lib.fn.backend_create)),
      destroy(reinterpret_cast<decltype(destroy)>(lib.fn.backend_destroy)),
      set(reinterpret_cast<decltype(set)>(lib.fn.backend_set)),
      get(reinterpret_cast<decltype(get)>(lib.fn.backend_get)),
      finalize(reinterpret_cast<decltype(finalize)>(lib.fn.backend_finalize)),
      execute(reinterpret_cast<decltype(execute)>(lib.fn.backend_execute)),
      version(lib.version) {}

void Api::check(cudnnStatus_t st, const char* what) const {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char last[512] = {0};
  last_error(last, sizeof(last));
  throw BuildError{fmt::format("{}: {}{}{}", what, error_string(st), last[0] ? ": " : "", last)};
}

Descriptor::Descriptor(const Api& api, cudnnBackendDescriptorType_t type) : api_(&api) {
  api.check(api.create(type, &d_), "cudnnBackendCreateDescriptor");
}

Descriptor::~Descriptor() {
  if (d_ != nullptr) api_->destroy(d_);
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                     const void* values) {
  api_->check(api_->set(d_, name, type, count, values), "cudnnBackendSetAttribute");
}

void Descriptor::set_desc(cudnnBackendAttributeName_t name, const Descriptor& d) {
  cudnnBackendDescriptor_t raw = d.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

void Descriptor::finalize() { api_->check(api_->finalize(d_), "cudnnBackendFinalize"); }

Dims packed_strides(const Dims& dims) {
  Dims s{};
  int64_t step = 1;
  for (int i = 3; i >= 0; i--) {
    s[i] = step;
    step *= dims[i];
  }
  return s;
}

// ---- tensors ----------------------------------------------------------------------------------------

void Graph::add_tensor(int64_t uid, cudnnDataType_t t, const Dims& dims, const Dims& strides, bool is_virtual,
                       bool by_value) {
  Descriptor d(*api_, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set_type(CUDNN_ATTR_TENSOR_DATA_TYPE, t);
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  d.set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
  d.set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
  d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  d.finalize();
  tensors_.emplace(uid, std::move(d));
}

void Graph::io(int64_t uid, cudnnDataType_t t, const Dims& dims, const Dims& strides) {
  add_tensor(uid, t, dims, strides, false, false);
}

void Graph::scalar(int64_t uid) { add_tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

int64_t Graph::virt(cudnnDataType_t t, const Dims& dims, const Dims& strides) {
  const int64_t uid = next_virtual_++;
  add_tensor(uid, t, dims, strides, true, false);
  return uid;
}

const Descriptor& Graph::tensor(int64_t uid) const {
  auto it = tensors_.find(uid);
  if (it == tensors_.end()) throw BuildError{fmt::format("tensor {} used before it was declared", uid)};
  return it->second;
}

// ---- operations -------------------------------------------------------------------------------------

void Graph::matmul(int64_t a, int64_t b, int64_t c) {
  Descriptor m(*api_, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  m.set_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
  m.finalize();
  Descriptor op(*api_, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensor(a));
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensor(b));
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensor(c));
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, m);
  op.finalize();
  helpers_.push_back(std::move(m));
  ops_.push_back(std::move(op));
}

void Graph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t y, cudnnDataType_t prec, int64_t t,
                      int64_t axis) {
  Descriptor pw(*api_, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw.set_type(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
  if (axis >= 0) pw.set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize();
  Descriptor op(*api_, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensor(x));
  if (b >= 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensor(b));
  if (t >= 0) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensor(t));
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensor(y));
  op.finalize();
  helpers_.push_back(std::move(pw));
  ops_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t how, int64_t x, int64_t y) {
  Descriptor r(*api_, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
  r.set_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
  r.finalize();
  Descriptor op(*api_, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensor(x));
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensor(y));
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
  op.finalize();
  helpers_.push_back(std::move(r));
  ops_.push_back(std::move(op));
}

void Graph::reshape(int64_t x, int64_t y) {
  Descriptor op(*api_, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensor(x));
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensor(y));
  op.finalize();
  ops_.push_back(std::move(op));
}

// ---- engine and plan --------------------------------------------------------------------------------

// One engine configuration of the heuristics: its plan when it finalizes, with the engine's index
// and numerical notes for engine(). False (and `why`) when it does not or is not deterministic.
bool Graph::try_config(cudnnHandle_t handle, Descriptor& cfg, bool deterministic, std::string& why) {
  try {
    Descriptor engine(*api_, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t raw = engine.get();
    int64_t n = 0, index = -1;
    api_->check(api_->get(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw),
                "engine of a configuration");
    api_->get(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nnotes = 0;
    api_->get(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
              CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nnotes, notes);
    const bool nondet = std::find(notes, notes + nnotes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) != notes + nnotes;
    if (deterministic && nondet) {
      why = fmt::format("engine {} is not deterministic", index);
      return false;
    }
    Descriptor plan(*api_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
    plan.finalize();
    api_->check(api_->get(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &workspace_),
                "workspace size");
    engine_ = fmt::format("engine {}{}", index, nondet ? " (says: nondeterministic)" : "");
    plan_.push_back(std::move(plan));
    return true;
  } catch (const BuildError& e) {
    why = e.what;
    return false;
  }
}

void Graph::finalize_without_handle() {
  Descriptor graph(*api_, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (auto& op : ops_) ops.push_back(op.get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data());
  graph.finalize();
}

void Graph::build(cudnnHandle_t handle, bool deterministic) {
  Descriptor graph(*api_, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (auto& op : ops_) ops.push_back(op.get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph.finalize();
  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Descriptor heur(*api_, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    heur.finalize();
    int64_t count = 0;
    api_->check(api_->get(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                "number of engine configurations");
    std::vector<Descriptor> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; i++) {
      cfgs.emplace_back(*api_, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    api_->check(api_->get(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                          raw.data()),
                "engine configurations");
    for (int64_t i = 0; i < got; i++) {
      std::string why;
      if (try_config(handle, cfgs[static_cast<size_t>(i)], deterministic, why)) {
        keep_.push_back(std::move(graph));
        for (auto& c : cfgs) keep_.push_back(std::move(c));
        keep_.push_back(std::move(heur));
        return;
      }
      if (tried.size() < 600) tried += fmt::format("; {}", why);
    }
  }
  throw BuildError{fmt::format("no engine of cuDNN {} runs this graph{}", api_->version, tried)};
}

void Graph::execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                    void* workspace) const {
  Descriptor pack(*api_, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  api_->check(api_->execute(handle, plan_.at(0).get(), pack.get()), "cudnnBackendExecute");
}

}  // namespace nanoddp::cuda::cudnn

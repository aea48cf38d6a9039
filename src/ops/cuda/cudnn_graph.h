// A thin layer over cuDNN 9's graph backend API (cudnn_graph.h): descriptors that destroy
// themselves, tensors named by a unique id, the four kinds of operation the attention graphs use
// (matmul, pointwise, reduction, reshape), and a graph that finds an engine through cuDNN's
// heuristics, keeps the finalized execution plan and runs it with a variant pack of pointers.
//
// The backend API is a set of typed attributes on opaque descriptors; a graph is built once per
// shape (milliseconds) and executed many times (microseconds of host work). Any failed call while
// building throws BuildError with cuDNN's own message; the caller turns it into its reason to fall
// back, so a graph cuDNN does not take never stops training.
#pragma once

#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/cuda/cudnn_library.h"

namespace nanoddp::cuda::cudnn {

struct BuildError {
  std::string what;
};

// cuDNN's entry points with their types (the library is opened at run time: cudnn_library.h).
struct Api {
  explicit Api(const CudnnLibrary& lib);
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnGetLastErrorString) last_error;
  decltype(&cudnnCreate) create_handle;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnBackendCreateDescriptor) create;
  decltype(&cudnnBackendDestroyDescriptor) destroy;
  decltype(&cudnnBackendSetAttribute) set;
  decltype(&cudnnBackendGetAttribute) get;
  decltype(&cudnnBackendFinalize) finalize;
  decltype(&cudnnBackendExecute) execute;
  size_t version;

  // Throws BuildError("<what>: <status> (<cuDNN's last message>)") unless st is success.
  void check(cudnnStatus_t st, const char* what) const;
};

// One backend descriptor, owned.
class Descriptor {
 public:
  Descriptor(const Api& api, cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : api_(o.api_), d_(o.d_) { o.d_ = nullptr; }
  Descriptor& operator=(Descriptor&&) = delete;
  Descriptor(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void set_desc(cudnnBackendAttributeName_t name, const Descriptor& d);
  void set_i64(cudnnBackendAttributeName_t name, int64_t v) { set(name, CUDNN_TYPE_INT64, 1, &v); }
  void set_type(cudnnBackendAttributeName_t name, cudnnDataType_t t) { set(name, CUDNN_TYPE_DATA_TYPE, 1, &t); }
  void finalize();

 private:
  const Api* api_;
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// Row-major strides of dims (the layout of every virtual tensor).
Dims packed_strides(const Dims& dims);

// A graph of operations on tensors named by uid. Tensors the caller passes pointers for are
// "io"; "virtual" ones live only inside the fused kernel; "scalars" are f32 values passed by value
// (a host pointer in the variant pack).
class Graph {
 public:
  explicit Graph(const Api& api) : api_(&api) {}

  void io(int64_t uid, cudnnDataType_t t, const Dims& dims, const Dims& strides);
  void scalar(int64_t uid);
  // A new virtual tensor; returns its uid (from 1000 up, clear of the io uids).
  int64_t virt(cudnnDataType_t t, const Dims& dims, const Dims& strides);
  int64_t virt(cudnnDataType_t t, const Dims& dims) { return virt(t, dims, packed_strides(dims)); }

  void matmul(int64_t a, int64_t b, int64_t c);
  // y = mode(x[, b][, t]); `prec` is the arithmetic's type, `axis` GEN_INDEX's dimension.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t y, cudnnDataType_t prec = CUDNN_DATA_FLOAT,
                 int64_t t = -1, int64_t axis = -1);
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  void reshape(int64_t x, int64_t y);

  // Finalizes the operation graph and takes the first engine configuration of the heuristics
  // (mode A, then the fallback list) whose plan finalizes, skipping engines that say they are not
  // deterministic when `deterministic`. Throws BuildError when none does.
  void build(cudnnHandle_t handle, bool deterministic);

  // The operation graph finalized with no handle (where this cuDNN allows it), to check how the
  // operations connect without a GPU. Throws BuildError.
  void finalize_without_handle();

  // Runs the plan: `uids` and `ptrs` side by side (every io tensor and scalar), workspace of
  // workspace_bytes() or more.
  void execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
               void* workspace) const;

  int64_t workspace_bytes() const { return workspace_; }
  const std::string& engine() const { return engine_; }  // "engine 8 (tensor cores, ...)"

 private:
  const Descriptor& tensor(int64_t uid) const;
  void add_tensor(int64_t uid, cudnnDataType_t t, const Dims& dims, const Dims& strides, bool is_virtual,
                  bool by_value);
  bool try_config(cudnnHandle_t handle, Descriptor& cfg, bool deterministic, std::string& why);

  const Api* api_;
  std::map<int64_t, Descriptor> tensors_;
  std::vector<Descriptor> ops_;      // operations, in order
  std::vector<Descriptor> helpers_;  // their pointwise, matmul and reduction descriptors
  std::vector<Descriptor> keep_;     // the operation graph, heuristics and engine configurations
  std::vector<Descriptor> plan_;     // the execution plan, once built (0 or 1)
  int64_t next_virtual_ = 1000, workspace_ = 0;
  std::string engine_;
};

}  // namespace nanoddp::cuda::cudnn

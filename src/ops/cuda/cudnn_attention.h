// cuDNN's fused attention (the flash-attention engines of cuDNN 9), forward and backward, as a
// second route beside our own kernels (attention.cuh), and the switch between the routes.
//
// The switch is NANODDP_CUDA_ATTENTION, read once when a GPU's backend starts:
//   auto (or unset)          cuDNN where it loads and takes the call, our flash kernels elsewhere
//   cudnn                    cuDNN, with a deterministic backward; an error if cuDNN is absent or
//                            builds no plan for a call it should take
//   cudnn_nondeterministic   the same with cuDNN's faster backward, whose dQ is summed with atomic
//                            adds (two runs can differ in the last bits; PyTorch's default)
//   flash                    our flash kernels only (mma.sync)
//   hopper                   our Hopper kernels (wgmma and TMA, attention_hopper.cuh), forward and
//                            backward; an error on a GPU other than compute capability 9.0
//                            or in a build without sm_90a code. Not the default until a GPU has
//                            measured it against flash and cuDNN.
//   reference                the reference kernels only (for debugging the others)
// Calls cuDNN's attention does not take run on our kernels under every route: f32, a decoding
// step (fewer queries than keys), a sliding window, head_dim not a multiple of 8 or above 128, rows
// not 16-byte aligned.
//
// The graphs (a plan per shape, cached) and the workspace (one buffer, grown to the largest plan
// and kept) belong to one CudnnAttention per GPU, created with the backend.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "core/dtype.h"
#include "ops/cuda/attention.cuh"

namespace nanoddp::cuda {

enum class AttentionRoute { kAuto, kCudnn, kCudnnNondeterministic, kFlash, kHopper, kReference };

// NANODDP_CUDA_ATTENTION's value (null: unset); throws Error naming the accepted values otherwise.
AttentionRoute parse_attention_route(const char* value);

// What `nanoddp env` shows: the route and, where it may use cuDNN, whether cuDNN loaded.
std::string describe_attention_route(AttentionRoute r);

// Whether the routes that may use cuDNN try it for this call (the list above); `ptrs` are every
// tensor's address.
bool cudnn_attention_takes(DType t, const AttentionShape& s, const void* const* ptrs, int nptrs);

// Builds the operations of both graphs for `s` without a GPU, a handle or an engine, so that what
// cuDNN's backend checks of each operation (types, shapes, attributes) is checked on any machine with
// the library: empty when every operation (and, where this cuDNN allows it without a handle, the
// operation graph) finalizes, else cuDNN's message. For tests.
std::string cudnn_attention_graph_problem(DType t, const AttentionShape& s, bool deterministic);

class CudnnAttention {
 public:
  CudnnAttention(int device, bool deterministic);
  ~CudnnAttention();

  // Run the call on cuDNN (on `stream`), or return false with `why` when cuDNN cannot: the library
  // is absent, or no engine takes the graph (remembered per shape, so it is tried once).
  bool forward(DType t, void* out, float* lse, const void* q, const void* k, const void* v, const AttentionShape& s,
               float scale, cudaStream_t stream, std::string& why);
  bool backward(DType t, void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k, const void* v,
                const void* out, const float* lse, const AttentionShape& s, float scale, cudaStream_t stream,
                std::string& why);

  // For tests and benchmarks: plans built so far, workspace bytes held, the last plan's engine.
  int plans() const;
  size_t workspace_bytes() const;
  std::string last_engine() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanoddp::cuda

// Causal attention with grouped-query heads (see ops.h for the layouts): q, out [B, Tq, Hq, D],
// k, v [B, Tk, Hkv, D] of one element type, lse f32 [B, Hq, Tq]. Query t sits at position
// p = kv_len - Tq + t and sees keys 0 ..= p, or with a sliding window keys max(0, p - window) ..= p.
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

struct AttentionShape {
  int64_t batch, tq, tk, hq, hkv, d, kv_len;
  int64_t window = 0;  // 0: full causal; else 0 < window < kv_len - 1 (Note [attention window] in ops.cpp)
};

// Which kernels run: the tensor-core flash kernels (bf16 or f16, head_dim a multiple of 8 from 64
// to 128, 16-byte aligned rows) or the reference kernels (any shape and type; also forced by `reference_only`).
bool attention_uses_flash(DType t, const AttentionShape& s, const void* const* ptrs, int nptrs, bool reference_only);

// The most dynamic shared memory one block of the reference kernels takes: a row of scores per
// query (forward, dq) or a group's rows per key (dk/dv), so it grows with the sequence. The caller
// compares it with the device's limit (a launch past it fails with a bare "invalid argument").
size_t reference_attention_smem_bytes(const AttentionShape& s, bool backward);

cudaError_t launch_attention_forward(DType t, void* out, float* lse, const void* q, const void* k, const void* v,
                                     const AttentionShape& s, float scale, bool reference_only, cudaStream_t stream);

// Device scratch of the backward: delta = rowsum(dout * out), f32 [B, Hq, T].
size_t attention_backward_scratch_bytes(const AttentionShape& s);

// Training form (Tq == Tk == kv_len); dq, dk, dv are overwritten. Deterministic: no atomics.
// hopper: the calls the flash backward takes run on the Hopper kernels (attention_hopper.cuh; the
// caller has checked that the device runs them).
cudaError_t launch_attention_backward(DType t, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                      const void* k, const void* v, const void* out, const float* lse,
                                      const AttentionShape& s, float scale, void* scratch, bool reference_only,
                                      cudaStream_t stream, bool hopper = false);

}  // namespace nanoddp::cuda

// Embedding lookup and its deterministic scatter-add.
//
// Note [deterministic embedding backward]: dtable[id] must receive the sum of the dout rows of
// every position holding id, in the same order on every run (atomics would add in arrival order).
//  1. A stable radix sort of (id, position) pairs groups each id's positions in increasing order.
//  2. The sorted entries are cut into chunks of kChunk. A warp per (chunk, 256-channel slice)
//     walks its chunk in order, summing each run of equal ids in registers. A run strictly inside
//     the chunk belongs to no other chunk: the warp adds it to dtable directly. The chunk's first
//     and last runs may continue into neighbouring chunks: their sums go to head/tail slots.
//  3. A warp per (chunk, slice) finishes each run that starts in its chunk and was left in a slot:
//     its slot, plus the head slots of the following chunks while the run goes on, then one add
//     to dtable. Every run is finished by exactly one warp, in a fixed order.
// Frequent tokens (a few thousand repeats in a batch) cost one partial per chunk, not one serial
// step per repeat, so no warp walks a long run alone.
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/embedding.cuh"
#include "ops/cuda/error_record.cuh"

namespace nanoddp::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kChunk = 64;              // sorted entries per chunk
constexpr int kPerLane = 8;             // channels per lane in the backward
constexpr int kSlice = 32 * kPerLane;   // channels per warp in the backward
constexpr int kGroup = 4;               // entries whose loads are issued together

// ---- forward: a warp per row ----------------------------------------------------------------
template <typename T, int V>
__global__ void embedding_forward_kernel(T* out, const T* table, const int32_t* ids, int64_t n, int64_t vocab,
                                         int64_t c, ErrorSink err) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= n) return;
  const int32_t id = ids[row];
  const bool ok = id >= 0 && id < vocab;
  if (!ok && lane == 0) report_error(err, kTokenIdOutOfRange, row, id, vocab);
  T* dst = out + row * c;
  for (int64_t i = int64_t(lane) * V; i < c; i += 32 * V) {
    Pack<T, V> p;
    if (ok) {
      p = load_pack<T, V>(table + int64_t(id) * c + i);
    } else {
#pragma unroll
      for (int j = 0; j < V; j++) p.v[j] = from_f32<T>(0.f);
    }
    store_pack<T, V>(dst + i, p);
  }
}

// ---- backward --------------------------------------------------------------------------------
// Out-of-range ids, negative ones included (as u32), sort last: the last key tells whether any is.
__global__ void check_sorted_ids_kernel(const uint32_t* keys, const int32_t* pos, int64_t n, int64_t vocab,
                                        ErrorSink err) {
  if (threadIdx.x == 0 && keys[n - 1] >= static_cast<uint64_t>(vocab))
    report_error(err, kTokenIdOutOfRange, pos[n - 1], static_cast<int32_t>(keys[n - 1]), vocab);
}

__global__ void iota_kernel(int32_t* x, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = static_cast<int32_t>(i);
}

// The scratch buffers, carved from one allocation.
struct Scratch {
  uint32_t* keys;      // sorted ids [n]
  int32_t* pos_in;     // 0 .. n-1 [n]
  int32_t* pos;        // positions in sorted order [n]
  float* head;         // [chunks, c]: sum of each chunk's first run within the chunk
  float* tail;         // [chunks, c]: sum of its last run, when that is another run
  void* sort_tmp;
  size_t sort_tmp_bytes;
};

size_t round_up(size_t x) { return (x + 255) / 256 * 256; }

size_t sort_tmp_bytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                  static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<int>(n));
  return bytes;
}

Scratch carve(void* base, int64_t n, int64_t c) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  char* p = static_cast<char*>(base);
  Scratch s;
  s.keys = reinterpret_cast<uint32_t*>(p);
  p += round_up(n * sizeof(uint32_t));
  s.pos_in = reinterpret_cast<int32_t*>(p);
  p += round_up(n * sizeof(int32_t));
  s.pos = reinterpret_cast<int32_t*>(p);
  p += round_up(n * sizeof(int32_t));
  s.head = reinterpret_cast<float*>(p);
  p += round_up(chunks * c * sizeof(float));
  s.tail = reinterpret_cast<float*>(p);
  p += round_up(chunks * c * sizeof(float));
  s.sort_tmp = p;
  s.sort_tmp_bytes = sort_tmp_bytes(n);
  return s;
}

// Adds a lane's run sum to the row of `id` (skipped for ids outside the vocabulary).
__device__ __forceinline__ void add_row(float* dtable, uint32_t id, int64_t vocab, int64_t c, int64_t c0, int lane,
                                        const float (&acc)[kPerLane]) {
  if (id >= static_cast<uint64_t>(vocab)) return;
#pragma unroll
  for (int k = 0; k < kPerLane; k++) {
    const int64_t ch = c0 + lane + 32 * k;
    if (ch < c) dtable[int64_t(id) * c + ch] += acc[k];
  }
}

__device__ __forceinline__ void store_slot(float* slot, int64_t c, int64_t c0, int lane,
                                           const float (&acc)[kPerLane]) {
#pragma unroll
  for (int k = 0; k < kPerLane; k++) {
    const int64_t ch = c0 + lane + 32 * k;
    if (ch < c) slot[ch] = acc[k];
  }
}

// Step 2 of the Note: a warp per (chunk, channel slice).
template <typename T>
__global__ void chunk_runs_kernel(float* dtable, const T* dout, const uint32_t* keys, const int32_t* pos, int64_t n,
                                  int64_t vocab, int64_t c, float* head, float* tail) {
  const int lane = threadIdx.x & 31;
  const int64_t chunk = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunk >= chunks) return;
  const int64_t c0 = int64_t(blockIdx.y) * kSlice, e0 = chunk * kChunk, e1 = min(n, e0 + kChunk);
  float acc[kPerLane] = {};
  uint32_t cur = keys[e0];
  bool first_run = true;
  for (int64_t g = e0; g < e1; g += kGroup) {
    // Issue the loads of kGroup entries before summing them in order.
    uint32_t id[kGroup];
    float val[kGroup][kPerLane];
#pragma unroll
    for (int u = 0; u < kGroup; u++) {
      const bool in = g + u < e1;
      id[u] = in ? keys[g + u] : cur;
      const int64_t row = in ? int64_t(pos[g + u]) * c : 0;
#pragma unroll
      for (int k = 0; k < kPerLane; k++) {
        const int64_t ch = c0 + lane + 32 * k;
        val[u][k] = in && ch < c ? to_f32(dout[row + ch]) : 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < kGroup; u++) {
      if (g + u >= e1) break;
      if (id[u] != cur) {  // a run ends inside the chunk
        if (first_run)
          store_slot(head + chunk * c, c, c0, lane, acc);
        else
          add_row(dtable, cur, vocab, c, c0, lane, acc);
#pragma unroll
        for (int k = 0; k < kPerLane; k++) acc[k] = 0.f;
        cur = id[u];
        first_run = false;
      }
#pragma unroll
      for (int k = 0; k < kPerLane; k++) acc[k] += val[u][k];
    }
  }
  store_slot((first_run ? head : tail) + chunk * c, c, c0, lane, acc);
}

// Step 3 of the Note: finishes the runs that start in this chunk and were left in a slot.
__global__ void finish_runs_kernel(float* dtable, const uint32_t* keys, int64_t n, int64_t vocab, int64_t c,
                                   const float* head, const float* tail) {
  const int lane = threadIdx.x & 31;
  const int64_t chunk = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunk >= chunks) return;
  const int64_t c0 = int64_t(blockIdx.y) * kSlice, e0 = chunk * kChunk, e1 = min(n, e0 + kChunk);
  // Adds the heads of the chunks after `chunk` that the run of `id` continues into, then the sum.
  auto finish = [&](uint32_t id, const float* slot) {
    float acc[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; k++) {
      const int64_t ch = c0 + lane + 32 * k;
      acc[k] = ch < c ? slot[ch] : 0.f;
    }
    for (int64_t q = chunk + 1; q < chunks && keys[q * kChunk] == id; q++) {
#pragma unroll
      for (int k = 0; k < kPerLane; k++) {
        const int64_t ch = c0 + lane + 32 * k;
        if (ch < c) acc[k] += head[q * c + ch];
      }
    }
    add_row(dtable, id, vocab, c, c0, lane, acc);
  };
  const uint32_t first = keys[e0], last = keys[e1 - 1];
  const bool first_starts_here = e0 == 0 || keys[e0 - 1] != first;
  // The first and last runs are one run when the chunk holds a single id.
  const bool single_run = first == last;
  if (first_starts_here) finish(first, head + chunk * c);
  if (!single_run) finish(last, tail + chunk * c);
}

template <typename T>
cudaError_t embedding_forward_typed(void* out, const void* table, const int32_t* ids, int64_t n, int64_t vocab,
                                    int64_t c, ErrorSink err, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  constexpr int V = kVec16<T>;
  if (c % V == 0 && aligned(out, 16) && aligned(table, 16))
    embedding_forward_kernel<T, V><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(table), ids, n, vocab, c, err);
  else
    embedding_forward_kernel<T, 1><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(table), ids, n, vocab, c, err);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_embedding_forward(DType t, void* out, const void* table, const int32_t* ids, int64_t n,
                                     int64_t vocab, int64_t c, ErrorSink err, cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  return with_dtype(t, [&](auto* tag) {
    return embedding_forward_typed<std::remove_pointer_t<decltype(tag)>>(out, table, ids, n, vocab, c, err, stream);
  });
}

size_t embedding_backward_scratch_bytes(int64_t n, int64_t c) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  return 3 * round_up(n * sizeof(int32_t)) + 2 * round_up(chunks * c * sizeof(float)) + round_up(sort_tmp_bytes(n));
}

cudaError_t launch_embedding_backward(DType dout_t, float* dtable, const void* dout, const int32_t* ids, int64_t n,
                                      int64_t vocab, int64_t c, void* scratch, size_t scratch_bytes, ErrorSink err,
                                      cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  if (scratch_bytes < embedding_backward_scratch_bytes(n, c)) return cudaErrorInvalidValue;
  Scratch s = carve(scratch, n, c);
  iota_kernel<<<grid_for(n, 256), 256, 0, stream>>>(s.pos_in, n);
  // The i32 ids sorted as u32: out-of-range negative ids become huge and sort last.
  cudaError_t e = cub::DeviceRadixSort::SortPairs(s.sort_tmp, s.sort_tmp_bytes, reinterpret_cast<const uint32_t*>(ids),
                                                  s.keys, s.pos_in, s.pos, static_cast<int>(n), 0, 32, stream);
  if (e != cudaSuccess) return e;
  check_sorted_ids_kernel<<<1, 32, 0, stream>>>(s.keys, s.pos, n, vocab, err);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const dim3 grid(static_cast<unsigned>((chunks + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>((c + kSlice - 1) / kSlice));
  with_dtype(dout_t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    chunk_runs_kernel<T><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(dtable, static_cast<const T*>(dout), s.keys, s.pos,
                                                                    n, vocab, c, s.head, s.tail);
  });
  finish_runs_kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(dtable, s.keys, n, vocab, c, s.head, s.tail);
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda

// effir's tensor-core tiles (schedule/cuda/tensor_core.py): the device
// functions a matrix product's kernel calls, one warp per 16 x 16 tile of
// C = A B over the product's whole depth, when effir.compile(precision=...)
// asks for TF32 or bfloat16 (precision.py [RULE COMPILE-PRECISION]).
//
// A(i, k) is a[i * a_i + k * a_k] and B(k, j) is b[k * b_k + j * b_j]: any
// layout, at any address, since each step's tiles are staged through the
// warp's own aligned shared memory; rows and columns at or past m and n, and
// depths at or past `depth`, read as zero. Each operand is rounded as the
// hardware rounds it (TF32: cvt.rna; bfloat16: round to nearest even), the
// products accumulate in float32 on the tensor cores (WMMA), and the tile
// is written to c(i, j) = c[i * c_i + j] (the kernel's shared memory).
// All 32 lanes of the warp call it together; it synchronises the warp
// before it stages and after it writes.
#include <cuda_bf16.h>
#include <mma.h>

#define EFFIR_MMA_MAX_WARPS 4  // warps per block the schedule launches, at most

__device__ __forceinline__ int effir_mma_lane() {
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31;
}

__device__ __forceinline__ int effir_mma_warp() {
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) >> 5;
}

// The accumulated tile, staged (aligned, as store_matrix_sync needs), then
// written to the kernel's c.
template <typename Accumulator>
__device__ __forceinline__ void effir_mma_store(float* c, long long c_i, Accumulator& acc,
                                                float* stage, int lane) {
  nvcuda::wmma::store_matrix_sync(stage, acc, 16, nvcuda::wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 256; e += 32) c[(e / 16) * c_i + e % 16] = stage[e];
  __syncwarp();
}

extern "C" __device__ int effir_mma_tf32(float* c, float* c_next_row, const float* a, long long a_i,
                                         long long a_k, const float* b, long long b_k,
                                         long long b_j, int m, int n, int depth) {
  using namespace nvcuda;
  __shared__ __align__(32) float stage_a[EFFIR_MMA_MAX_WARPS][16 * 8];
  __shared__ __align__(32) float stage_b[EFFIR_MMA_MAX_WARPS][8 * 16];
  __shared__ __align__(32) float stage_c[EFFIR_MMA_MAX_WARPS][16 * 16];
  int lane = effir_mma_lane(), warp = effir_mma_warp();
  float* sa = stage_a[warp];
  float* sb = stage_b[warp];
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < depth; k0 += 8) {
    __syncwarp();
    for (int e = lane; e < 128; e += 32) {
      int i = e / 8, k = e % 8;    // A's 16 x 8 tile, row-major
      int kb = e / 16, j = e % 16;  // B's 8 x 16 tile, row-major
      sa[e] = (i < m && k0 + k < depth) ? a[i * a_i + (k0 + k) * a_k] : 0.0f;
      sb[e] = (j < n && k0 + kb < depth) ? b[(k0 + kb) * b_k + j * b_j] : 0.0f;
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, sa, 8);
    wmma::load_matrix_sync(fb, sb, 16);
    for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
    for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  __syncwarp();
  effir_mma_store(c, c_next_row - c, acc, stage_c[warp], lane);
  return 0;
}

extern "C" __device__ int effir_mma_bf16(float* c, float* c_next_row, const float* a, long long a_i,
                                         long long a_k, const float* b, long long b_k,
                                         long long b_j, int m, int n, int depth) {
  using namespace nvcuda;
  __shared__ __align__(32) __nv_bfloat16 stage_a[EFFIR_MMA_MAX_WARPS][16 * 16];
  __shared__ __align__(32) __nv_bfloat16 stage_b[EFFIR_MMA_MAX_WARPS][16 * 16];
  __shared__ __align__(32) float stage_c[EFFIR_MMA_MAX_WARPS][16 * 16];
  int lane = effir_mma_lane(), warp = effir_mma_warp();
  __nv_bfloat16* sa = stage_a[warp];
  __nv_bfloat16* sb = stage_b[warp];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < depth; k0 += 16) {
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      int r = e / 16, s = e % 16;  // A's tile (i = r, k = s), B's (k = r, j = s): row-major
      float x = (r < m && k0 + s < depth) ? a[r * a_i + (k0 + s) * a_k] : 0.0f;
      float y = (s < n && k0 + r < depth) ? b[(k0 + r) * b_k + s * b_j] : 0.0f;
      sa[e] = __float2bfloat16_rn(x);
      sb[e] = __float2bfloat16_rn(y);
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, sa, 16);
    wmma::load_matrix_sync(fb, sb, 16);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  __syncwarp();
  effir_mma_store(c, c_next_row - c, acc, stage_c[warp], lane);
  return 0;
}

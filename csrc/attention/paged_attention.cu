// SPDX-License-Identifier: Apache-2.0
//
// paged_attention on CUDA (sm_80+): causal attention of query rows over the
// paged KV cache [num_blocks, H_kv, block_size, 2*D] (K in [..., :D], V in
// [..., D:]), any H_q / H_kv ratio, any block size, D in {64, 128, 256},
// fp16 / bf16 in, fp32 softmax statistics and accumulation, output rounded
// once.
//
// ---- Design -----------------------------------------------------------------
// Two kernels per call, decode_split and a prefill kernel (no host sync: the
// host cannot know which rows are decode rows). Code by role under
// attention/cuda/: traits.cuh (tile sizes), kv_tile_loader.cuh (Q and K/V
// tiles), online_softmax.cuh, mainloop_m16.cuh (the prologue and mainloop
// decode_split and prefill_m64 share), decode_split.cuh, prefill_m64.cuh,
// prefill_m128.cuh (kernels and epilogues), plan.cuh (splits, prefill
// choice); this file launches them and is the torch entry.
//
// * A "row" is one (query token, q head) pair. A CTA works on one (sequence
//   b, kv head h) and a set of rows that all read the same K/V (the G =
//   H_q / H_kv heads of h): GQA reuse, each K/V tile is read once for G heads.
//   Rows are numbered r = i * G + g over the sequence's q_len tokens i.
// * K/V tiles of 64 tokens stream through shared memory with cp.async (16-byte
//   vectors, double buffered, tokens past the CTA's range zero-filled so the
//   NaN of unowned slots never enters the math). Each token's block comes
//   from the block table (block_size any >= 1), read a tile ahead (one
//   entry per lane, handed by shuffle to the 8 lanes that copy the token:
//   no wait at copy time; the first two tiles' entries are read together
//   with seq_lens). S = Q K^T and
//   O += P V run on mma.sync m16n8k16 (ldmatrix / ldmatrix.trans from XOR-
//   swizzled tiles, no bank conflicts), online softmax in fp32 in the exp2
//   domain (scale * log2 e folded into S), P rounded to the input dtype for
//   the P V mma (as FlashAttention-2).
// * decode_split (grid B x H_kv x splits): rows of q_len == 1
//   sequences only (other CTAs exit at once), G <= 16 rows in one m16 tile.
//   The context is split into `splits` ranges of split_tokens (flash-
//   decoding; chosen on the host from max_seq_len and the SM count so that
//   small batches fill the GPU); inside a CTA the 4 warps take 16-token
//   quarters of each tile with their own (m, l, acc), merged in shared memory
//   at the end. Each warp copies its own quarter, so the warps pipeline
//   apart with __syncwarp, no CTA barrier per tile. A
//   sequence that fills one split: the CTA writes out. Several: each writes
//   an fp32 partial (acc, m, l), counts itself on a per-(b, h) counter,
//   and the last to finish merges all splits in split order
//   (deterministic), writes out and stores the counter's 0 back (persistent
//   counters, no memset per call: cuda/split_counters.h): one launch, no
//   combine kernel, no memset node.
// * prefill_m64 (grid B x H_kv x row tiles, launched only when
//   max_query_len > 1): FlashAttention-2 tiles, 64 rows per CTA (16 per
//   warp), every warp against all 64 tokens of a tile, KV range [0, causal
//   limit of the tile's last row); the causal / tail mask is applied only on
//   tiles that cross a warp's first-row limit. Row tiles run longest first.
//   Rows of q_len == 1 sequences are skipped when the decode kernel takes
//   them (G <= 16); with G > 16 the prefill kernel handles decode rows too.
//   D = 128 from 1024 query tokens (scale > 0) runs prefill_m128 instead
//   (paged_attention_prefill_m128.cu: 128 rows per CTA, 32 per warp, same
//   rows, masks and clamps; prefill_m128_by_default in plan.cuh). On a
//   compute capability 9.0 device of a build with sm_90a, D 64 / 128
//   (scale > 0) with a grid of at least one CTA per SM runs prefill_wgmma
//   instead of either (sm90a/attention_prefill_wgmma.cu: FlashAttention-3-
//   style warp-specialized wgmma kernel; prefill_wgmma_by_default).
//   VLLM_MYOPS_ATTENTION_CUDA_PREFILL=m64|m128|wgmma forces one (m128: D
//   64 / 128; wgmma: as above, whatever the grid).
// * Q stays in registers for D <= 128, is re-read from shared memory per tile
//   for D = 256 (register budget: the D = 256 accumulator alone is 128 fp32
//   registers per thread); prefill D = 256 uses 32-token tiles, S in
//   16-token halves.
// * Registers (ptxas, 128 threads, no spills; sm_90a / sm_80): decode D
//   64/128/256: 122/168/255 / 120/168/252 (__launch_bounds__ asks for 4 /
//   3 / 1 CTAs per SM); prefill_m64 162/243/229 / 162/247/229 (3 CTAs per
//   SM asked at D = 64). Shared memory: decode 34/68/136 KB, prefill_m64
//   40/80/96 KB -> decode D = 64: 4 CTAs per SM (registers), D = 128: 3
//   (shared memory and registers). Decode D = 256 needs > 99 KB of shared
//   memory, so it does not launch on sm_86/sm_89 (fine on sm_80 / sm_90).
// Inputs the CPU op rejects by reading the index tensors (it checks them on
// the host) cannot be checked here without a device->host copy; the kernels
// clamp them so that they never read or write out of bounds (block ids
// outside [0, num_blocks) read zeros, q_len is clamped to seq_len and T,
// seq_len to the block table's width); the values are then unspecified.
// max_query_len / max_seq_len only size the grids: larger than the true
// maxima is correct (CTAs exit), a smaller max_query_len leaves rows of the
// longest sequences unwritten (the CPU op raises).
//
// ---- Bytes model ------------------------------------------------------------
// Decode row of context L: K and V of L tokens x H_kv heads x D x 2 bytes,
// read once per kv head for all G q heads: 4 * L * H_kv * D bytes (256 KB per
// sequence per 1k tokens at H_kv = 8, D = 128), plus partials
// H_q * splits * (D + 2) * 4 bytes written and read once (1-6% at 1k context,
// < 1% from 8k). The floor is these bytes at the achievable HBM bandwidth;
// decode is bound by them, and at small batches by latency. Hence:
// * A tile's block-table entries are read a tile ahead (and the first two
//   tiles' with seq_lens): read by each copy, a tile's copies wait on table
//   reads in turn, L2 round trips before any compute.
// * The splits of a sequence merge in its last CTA, in one pass, and the
//   counters reset themselves: no combine kernel, no memset node (at batch
//   1 each extra launch or node is on the latency-bound critical path).
// * Small batches take enough splits to fill one wave (1 x 1k: 16 splits,
//   128 CTAs; 1 x 8k: 43 splits of 3 tiles, 344 CTAs); large ones few
//   (32 x 8k: 3 splits, 768 CTAs, fill 0.97 on 396 slots).
// * A copy instruction moves 4 whole cache lines (see the kernel), so the
//   L1/LSU pipeline is not the limit if it takes a cycle per line.
// * CTAs per SM: D = 128: 3 (68 KB of shared memory each caps it whatever
//   the registers), 12 warps, ~96 KB in flight per SM (one 8 KB quarter
//   tile ahead per warp), above the ~40 KB that HBM bandwidth x latency
//   needs; D = 64: 4 (~64 KB in flight).
// Prefill is compute bound: mma.sync m16n8k16, FlashAttention-2 tiles
// (128-row tiles, prefill_m128, for D = 128 at long prompts); wgmma on
// sm_90a (prefill_wgmma) where its grid fills the GPU.
// Design: docs/attention/design.md; measurements: docs/attention/log/.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/attention_args.h"
#include "attention/cuda/decode_split.cuh"
#include "attention/cuda/params.cuh"
#include "attention/cuda/plan.cuh"
#include "attention/cuda/prefill_m64.cuh"
#include "attention/cuda/traits.cuh"
#include "cuda/launch.cuh"
#include "cuda/split_counters.h"
#include "ops.h"

namespace vllm_myops {
namespace {

using namespace attention_cuda;

// ---- Launchers
// ---------------------------------------------------------------

template <typename T, int D>
void prepare_decode_split() {
  cuda::allow_dynamic_smem<decode_split_kernel<T, D>>(
      M16Traits<D, true>::kSmemBytes);
}

template <typename T, int D>
void prepare_prefill_m64() {
  cuda::allow_dynamic_smem<prefill_m64_kernel<T, D>>(
      M16Traits<D, false>::kSmemBytes);
}

// Resident decode CTAs per SM (asked once per instantiation; the process
// drives one kind of GPU).
template <typename T, int D>
int decode_ctas_per_sm() {
  static const int ctas = cuda::resident_blocks<decode_split_kernel<T, D>>(
      kThreads, M16Traits<D, true>::kSmemBytes);
  return ctas;
}

template <typename T, int D>
void run_attention(const Params& base, const attention::AttentionShape& sh,
                   int64_t max_query_len, int64_t max_seq_len,
                   const at::Tensor& query) {
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  Params p = base;
  const int64_t g = sh.num_heads / sh.num_kv_heads;
  const bool decode_kernel = g <= kDecodeMaxGroup;
  p.skip_decode_rows = decode_kernel;
  at::Tensor part_o, part_ml;
  if (decode_kernel) {
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int64_t slots = int64_t(sms) * decode_ctas_per_sm<T, D>();
    int splits =
        choose_splits(sh.num_seqs * sh.num_kv_heads, max_seq_len, slots);
    const int64_t tiles =
        std::max<int64_t>(1, (max_seq_len + kDecodeTileN - 1) / kDecodeTileN);
    const int64_t per = (tiles + splits - 1) / splits;
    splits = int((tiles + per - 1) / per);  // none empty
    p.splits = splits;
    p.split_tokens = int(per * kDecodeTileN);
    if (splits > 1) {
      part_o = at::empty({sh.num_seqs * sh.num_heads * splits * D},
                         query.options().dtype(at::kFloat));
      part_ml = at::empty({sh.num_seqs * sh.num_heads * splits * 2},
                          query.options().dtype(at::kFloat));
      p.part_o = part_o.data_ptr<float>();
      p.part_ml = reinterpret_cast<float2*>(part_ml.data_ptr<float>());
      // Zero before the launch and left zero by it: no memset (node).
      p.counters = cuda::split_counters(stream, sh.num_seqs * sh.num_kv_heads);
    }
    prepare_decode_split<T, D>();
    const dim3 grid(unsigned(sh.num_seqs), unsigned(sh.num_kv_heads),
                    unsigned(splits));
    decode_split_kernel<T, D>
        <<<grid, kThreads, M16Traits<D, true>::kSmemBytes, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (max_query_len > 1 || !decode_kernel) {
    // Parsed first: an unknown value is refused at any head dim.
    // prefill_m128 folds the scale into its exponent after the row max:
    // scale > 0 only.
    const PrefillPath path = prefill_path();
    // auto takes prefill_wgmma where its grid fills the GPU; forced wgmma
    // where it cannot run falls back to auto's other choice.
    const bool wgmma =
        prefill_wgmma_supports(D) && p.scale_log2 > 0.f &&
        (path == PrefillPath::kWgmma ||
         (path == PrefillPath::kAuto &&
          prefill_wgmma_by_default(
              D, sh.num_seqs, sh.num_kv_heads, max_query_len, g,
              at::cuda::getCurrentDeviceProperties()->multiProcessorCount))) &&
        cuda::sm90a_kernels_run_here();
    const bool want_m128 = path == PrefillPath::kM128 ||
                           (path != PrefillPath::kM64 &&
                            prefill_m128_by_default(D, max_query_len));
    const bool m128 =
        !wgmma && want_m128 && prefill_m128_supports(D) && p.scale_log2 > 0.f;
    const int rows = wgmma  ? kPrefillWgmmaRows
                     : m128 ? kPrefillM128Rows
                            : kPrefillM64Rows;
    const int64_t row_tiles = (max_query_len * g + rows - 1) / rows;
    TORCH_CHECK(row_tiles <= 65535, "paged_attention: max_query_len * ",
                "num_heads / num_kv_heads must be <= ", 65535 * rows,
                " on CUDA, got ", max_query_len * g);
#if defined(VLLM_MYOPS_WITH_SM90A)
    if constexpr (prefill_wgmma_supports(D)) {
      if (wgmma) {
        launch_prefill_wgmma<T, D>(p, sh.num_seqs, sh.num_kv_heads, row_tiles,
                                   stream);
        return;
      }
    }
#endif
    if constexpr (prefill_m128_supports(D)) {
      if (m128) {
        launch_prefill_m128<T, D>(p, sh.num_seqs, sh.num_kv_heads, row_tiles,
                                  stream);
        return;
      }
    }
    prepare_prefill_m64<T, D>();
    const dim3 grid(unsigned(sh.num_seqs), unsigned(sh.num_kv_heads),
                    unsigned(row_tiles));
    prefill_m64_kernel<T, D>
        <<<grid, kThreads, M16Traits<D, false>::kSmemBytes, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// ---- Torch entry
// -------------------------------------------------------------

template <typename T>
void dispatch_head_dim(const Params& p, const attention::AttentionShape& sh,
                       int64_t max_query_len, int64_t max_seq_len,
                       const at::Tensor& query) {
  switch (sh.head_dim) {
    case 64:
      run_attention<T, 64>(p, sh, max_query_len, max_seq_len, query);
      break;
    case 128:
      run_attention<T, 128>(p, sh, max_query_len, max_seq_len, query);
      break;
    default:
      run_attention<T, 256>(p, sh, max_query_len, max_seq_len, query);
      break;
  }
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

}  // namespace
}  // namespace vllm_myops

using namespace vllm_myops;

void paged_attention_cuda(at::Tensor& out, const at::Tensor& query,
                          const at::Tensor& kv_cache,
                          const at::Tensor& query_start_loc,
                          const at::Tensor& seq_lens,
                          const at::Tensor& block_table, double scale,
                          int64_t max_query_len, int64_t max_seq_len) {
  const attention::AttentionShape sh = attention::check_attention_args(
      out, query, kv_cache, query_start_loc, seq_lens, block_table, scale,
      max_query_len, max_seq_len);
  TORCH_CHECK(sh.head_dim == 64 || sh.head_dim == 128 || sh.head_dim == 256,
              "paged_attention: head_dim must be 64, 128 or 256 on CUDA, got ",
              sh.head_dim);
  if (sh.num_seqs == 0 || sh.num_tokens == 0 || max_query_len == 0) return;
  const c10::cuda::CUDAGuard device_guard(out.device());
  // 32-bit positions and rows in the kernels.
  TORCH_CHECK(sh.num_tokens < (int64_t{1} << 31) &&
                  sh.num_blocks < (int64_t{1} << 31) &&
                  sh.max_blocks_per_seq * sh.block_size < (int64_t{1} << 31) &&
                  max_seq_len < (int64_t{1} << 31),
              "paged_attention: num_tokens, num_blocks, the block table's "
              "token capacity and max_seq_len must be < 2^31 on CUDA");
  TORCH_CHECK(sh.num_kv_heads <= 65535, "paged_attention: num_kv_heads must ",
              "be <= 65535 on CUDA, got ", sh.num_kv_heads);
  TORCH_CHECK(aligned(kv_cache.data_ptr(), 16),
              "paged_attention: kv_cache must be 16-byte aligned on CUDA");

  // Q rows are read as 16-byte vectors, out rows written as 4-byte pairs;
  // views that do not allow it go through a copy.
  const int64_t es = query.element_size();
  const at::Tensor q = aligned(query.data_ptr(), 16) &&
                               query.stride(0) * es % 16 == 0 &&
                               query.stride(1) * es % 16 == 0
                           ? query
                           : query.clone(at::MemoryFormat::Contiguous);
  const bool out_direct = aligned(out.data_ptr(), 4) &&
                          out.stride(0) % 2 == 0 && out.stride(1) % 2 == 0;
  at::Tensor o = out_direct ? out : out.clone(at::MemoryFormat::Contiguous);

  Params p{};
  p.out = o.data_ptr();
  p.out_s0 = o.stride(0);
  p.out_s1 = o.stride(1);
  p.query = q.data_ptr();
  p.q_s0 = q.stride(0);
  p.q_s1 = q.stride(1);
  p.cache = kv_cache.data_ptr();
  p.qsl = query_start_loc.data_ptr<int32_t>();
  p.seq_lens = seq_lens.data_ptr<int32_t>();
  p.table = block_table.data_ptr<int32_t>();
  p.table_s0 = block_table.stride(0);
  p.max_blocks_per_seq = int(sh.max_blocks_per_seq);
  p.num_tokens = int(sh.num_tokens);
  p.num_blocks = int(sh.num_blocks);
  p.block_size = int(sh.block_size);
  if (sh.block_size >= 2) {
    p.block_div = vllm_myops::cuda::FastDivmod::make(uint32_t(sh.block_size));
  }
  p.num_kv_heads = int(sh.num_kv_heads);
  p.group = int(sh.num_heads / sh.num_kv_heads);
  p.scale_log2 = float(scale * 1.4426950408889634);
  p.splits = 1;
  p.split_tokens = kDecodeTileN;

  if (query.scalar_type() == at::kHalf) {
    dispatch_head_dim<__half>(p, sh, max_query_len, max_seq_len, q);
  } else {
    dispatch_head_dim<__nv_bfloat16>(p, sh, max_query_len, max_seq_len, q);
  }
  if (!out_direct) out.copy_(o);
}

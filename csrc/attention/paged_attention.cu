// SPDX-License-Identifier: Apache-2.0
//
// paged_attention on CUDA (sm_80+): causal attention of query rows over the
// paged KV cache [num_blocks, H_kv, block_size, 2*D] (K in [..., :D], V in
// [..., D:]), any H_q / H_kv ratio, any block size, D in {64, 128, 256},
// fp16 / bf16 in, fp32 softmax statistics and accumulation, output rounded
// once.
//
// ---- Design
// ------------------------------------------------------------------ One kernel
// template, two modes, two launches per call (no host sync: the host cannot
// know which rows are decode rows):
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
// * Decode mode (kDecode, grid B x H_kv x splits): rows of q_len == 1
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
//   counters, no memset per call: decode_split_counters.h): one launch, no
//   combine kernel, no memset node.
// * Prefill mode (grid B x H_kv x row tiles, launched only when
//   max_query_len > 1): FlashAttention-2 tiles, 64 rows per CTA (16 per
//   warp), every warp against all 64 tokens of a tile, KV range [0, causal
//   limit of the tile's last row); the causal / tail mask is applied only on
//   tiles that cross a warp's first-row limit. Row tiles run longest first.
//   Rows of q_len == 1 sequences are skipped when the decode kernel takes
//   them (G <= 16); with G > 16 the prefill kernel handles decode rows too.
//   This is prefill "v1"; D = 128 from 1024 query tokens (scale > 0) runs
//   v2 instead (paged_attention_prefill_v2.cu: 128 rows per CTA, 32 per
//   warp, same rows, masks and clamps; prefill_v2_by_default below), and
//   VLLM_MYOPS_ATTENTION_CUDA_PREFILL=v1|v2 forces one (v2: D 64 / 128).
// * Q stays in registers for D <= 128, is re-read from shared memory per tile
//   for D = 256 (register budget: the D = 256 accumulator alone is 128 fp32
//   registers per thread); prefill D = 256 uses 32-token tiles, S in
//   16-token halves.
// * Registers (ptxas, 128 threads, no spills; sm_90a / sm_80): decode D
//   64/128/256: 122/168/255 / 120/168/252 (__launch_bounds__ asks for 4 /
//   3 / 1 CTAs per SM); prefill 168/243/229 / 163/247/229. Shared memory:
//   decode 34/68/136 KB, prefill 40/80/96 KB -> decode D = 64: 4 CTAs per
//   SM (registers), D = 128: 3 (shared memory and registers). Decode D =
//   256 needs > 99 KB of shared memory, so it does not launch on
//   sm_86/sm_89 (fine on sm_80 / sm_90).
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
// Prefill is compute bound: mma.sync m16n8k16 (no wgmma), FlashAttention-2
// tiles; 128-row tiles (v2) for D = 128 at long prompts.
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
#include "attention/decode_split_counters.h"
#include "attention/paged_attention_common.cuh"
#include "core/env_choice.h"
#include "cuda/mma_utils.cuh"
#include "cuda/launch.cuh"
#include "ops.h"

namespace vllm_myops {
namespace {

using namespace tc;
using namespace attention_cuda;

// ---- Tunables ---------------------------------------------------------------
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kDecodeTileN = 64;     // decode KV tile (16 tokens per warp)
constexpr int kStages = 2;           // tiles in flight (cp.async groups)
constexpr int kPrefillRows = 64;     // rows per prefill CTA (16 per warp)
constexpr int kDecodeMaxGroup = 16;  // G the decode kernel takes (one m16)
constexpr int kMaxSplits = 64;

template <int D, bool kDecode>
struct Config {
  static constexpr int kRows = kDecode ? 16 : kPrefillRows;
  // KV tokens per tile. Prefill D = 256 takes 32: its S fragment for 64
  // tokens (32 registers) beside the 128-register accumulator spills.
  static constexpr int kTileN = kDecode ? kDecodeTileN : (D == 256 ? 32 : 64);
  static constexpr int kWarpTokens = kDecode ? kTileN / kWarps : kTileN;
  // Tokens of S held at once: prefill D = 256 walks its 32-token tile in
  // halves (sm_80 spilled 16 bytes at 32; sm_90a did not).
  static constexpr int kSubN = (D == 256 && !kDecode) ? 16 : kWarpTokens;
  static constexpr int kNB = kSubN / 8;    // n8 blocks of S per warp
  static constexpr int kDB = D / 8;        // n8 blocks of O
  static constexpr int kKS = D / 16;       // k16 steps of Q K^T
  static constexpr int kChunksKV = D / 4;  // 16-byte chunks per token (K, V)
  static constexpr int kChunksQ = D / 8;
  static constexpr bool kQInRegs = D <= 128;
  static constexpr int kKvStageBytes = kTileN * kChunksKV * 16;
  static constexpr int kQBytes = kRows * kChunksQ * 16;
  // Decode: the warps' (acc, m, l) merge reuses the K/V stages.
  static constexpr int kMergeBytes = kWarps * 16 * (D + 2) * 4;
  static_assert(!kDecode || kMergeBytes <= kStages * kKvStageBytes);
  static constexpr int kSmemBytes = kStages * kKvStageBytes + kQBytes;
  // Resident CTAs per SM the registers must allow at decode D = 64 / 128
  // (<= 128 / 168 registers). Unbounded, the one-pass merge and the
  // shuffled copies took sm_90a to 120 / 192 registers; D = 128 keeps the
  // 3 CTAs its shared memory allows, D = 64 drops from 5 to 4 (at 96
  // registers, the old count, it spilled): 16 warps and ~64 KB in flight
  // per SM, still above the ~40 KB the bandwidth needs.
  static constexpr int kMinCtas = !kDecode ? 1 : D == 64 ? 4 : D == 128 ? 3 : 1;
};

template <typename T, int D, bool kDecode>
__global__ void __launch_bounds__(kThreads, (Config<D, kDecode>::kMinCtas))
    paged_attention_kernel(const Params p) {
  using C = Config<D, kDecode>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int b = blockIdx.x;
  const int h = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // K/V copies: warp w copies tokens [w, w + 1) * kTileN / 4 of each tile,
  // 8 lanes per token, lane j of a token taking chunks j, j + 8, ...: one
  // copy instruction reads 4 tokens x 128 contiguous bytes, 4 whole cache
  // lines (16 tokens x 32 bytes would be 16 lines; if the L1/LSU pipeline
  // takes a cycle per line, an assumption, that is ~256 cycles per 8 KB
  // quarter, 32 bytes/cycle/SM, too close to the ~18 the HBM bandwidth
  // needs with ldmatrix on the same pipeline).
  // Lane i reads the block-table entry of the warp's token i % kCopyToks a
  // tile ahead (table_ahead, a register) and the copies take it by shuffle,
  // so a tile's copies never wait on a table read. (Read per copy, the
  // table reads of a tile are serial round trips.)
  // Decode: a warp computes on the same tokens it copied, so the warps
  // pipeline apart (__syncwarp, no CTA barrier per tile); prefill warps read
  // the whole tile (__syncthreads).
  constexpr int kCopyToks = C::kTileN / kWarps;
  constexpr int kLanesPerTok = 8;
  constexpr int kToksPerCopy = 32 / kLanesPerTok;
  constexpr int kTokGroups = kCopyToks / kToksPerCopy;
  constexpr int kChunkSteps = C::kChunksKV / kLanesPerTok;
  static_assert(kTokGroups * kToksPerCopy == kCopyToks &&
                kChunkSteps * kLanesPerTok == C::kChunksKV);
  static_assert(!kDecode || kCopyToks == C::kWarpTokens);
  const int entry_tok = warp * kCopyToks + lane % kCopyToks;
  const int copy_lane = lane % kLanesPerTok;
  const int copy_sub = lane / kLanesPerTok;
  const int* table = p.table + int64_t(b) * p.table_s0;
  // Token pos's (physical block, offset); phys -1 at or past `bound`.
  auto table_entry = [&](int pos, int bound, int& phys, int& off) {
    attention_cuda::table_entry(p, table, pos, bound, phys, off);
  };
  // The first two tiles' entries are read before the sequence's lengths:
  // their positions depend only on the split (decode; prefill starts at 0)
  // and the table's width bounds them, so the table read and the qsl /
  // seq_lens reads make one round trip, not two in a row (at batch 1 the
  // kernel is a latency chain). Entries past the CTA's range are dropped
  // once kv_end is known.
  const int kv_begin0 = kDecode ? int(blockIdx.z) * p.split_tokens : 0;
  const int table_tokens = p.max_blocks_per_seq * p.block_size;
  int phys0, off0, next_phys, next_off;  // tile 0; tile t + 1 in the loop
  table_entry(kv_begin0 + entry_tok, table_tokens, phys0, off0);
  table_entry(kv_begin0 + C::kTileN + entry_tok, table_tokens, next_phys,
              next_off);

  const SeqInfo s = seq_info(p, b);
  const int G = p.group;

  // Rows [row0, row0 + kRows) of the sequence's q_len * G rows; KV range
  // [kv_begin, kv_end).
  int row0, rows_total, kv_begin, kv_end;
  if constexpr (kDecode) {
    if (s.q_len != 1) return;
    row0 = 0;
    rows_total = G;
    kv_begin = kv_begin0;
    if (kv_begin >= s.seq_len) return;
    kv_end = blockIdx.z == p.splits - 1
                 ? s.seq_len
                 : min(s.seq_len, kv_begin + p.split_tokens);
  } else {
    if (s.q_len == 0 || (p.skip_decode_rows && s.q_len == 1)) return;
    const int tile = gridDim.z - 1 - blockIdx.z;  // longest first
    row0 = tile * C::kRows;
    rows_total = s.q_len * G;
    if (row0 >= rows_total) return;
    const int last_row = min(row0 + C::kRows, rows_total) - 1;
    kv_begin = kv_begin0;
    kv_end = s.seq_len - s.q_len + last_row / G + 1;
  }
  const int ctx0 = s.seq_len - s.q_len;
  if (kv_begin + entry_tok >= kv_end) phys0 = -1;  // zero fill
  if (kv_begin + C::kTileN + entry_tok >= kv_end) next_phys = -1;

  unsigned char* kv_smem = smem;
  unsigned char* q_smem = smem + kStages * C::kKvStageBytes;
  const uint32_t kv_base = smem_addr(kv_smem);
  const uint32_t q_base = smem_addr(q_smem);

  // ---- Q tile -> shared memory (rows past rows_total zero-filled) ----
  {
    const T* q = static_cast<const T*>(p.query);
    for (int idx = tid; idx < C::kRows * C::kChunksQ; idx += kThreads) {
      const int r = idx / C::kChunksQ, c = idx % C::kChunksQ;
      const int rg = row0 + r;
      const bool valid = rg < rows_total;
      const T* src = q;
      if (valid) {
        const int i = rg / G, g = rg - (rg / G) * G;
        src = q + int64_t(s.q0 + i) * p.q_s0 + int64_t(h * G + g) * p.q_s1 +
              c * 8;
      }
      cp_async_16(q_base + swizzled<C::kChunksQ>(r, c), src, valid);
    }
  }

  const T* cache = static_cast<const T*>(p.cache);
  // This thread's two rows in its warp's m16 tile: lane / 4 and lane / 4 + 8.
  const int warp_row0 = kDecode ? 0 : warp * 16;
  const int warp_tok0 = kDecode ? warp * C::kWarpTokens : 0;
  auto table_ahead = [&](int t, int& phys, int& off) {
    table_entry(kv_begin + t * C::kTileN + entry_tok, kv_end, phys, off);
  };
  auto load_tile = [&](int stage, int phys, int off) {
    const uint32_t dst0 = kv_base + stage * C::kKvStageBytes;
#pragma unroll
    for (int gi = 0; gi < kTokGroups; ++gi) {
      // Token tok of the warp's range; lane `held` holds its table entry.
      const int held = gi * kToksPerCopy + copy_sub;
      const int tok = warp * kCopyToks + held;
      const int tphys = __shfl_sync(0xffffffffu, phys, held);
      const int toff = __shfl_sync(0xffffffffu, off, held);
      // Zero fill past kv_end (phys = -1) and for block ids outside
      // [0, num_blocks); src stays a valid address then (nothing is read).
      const bool valid = tphys >= 0 && tphys < p.num_blocks;
      const T* src =
          cache + copy_lane * 8 +
          (valid
               ? ((int64_t(tphys) * p.num_kv_heads + h) * p.block_size + toff) *
                     (2 * D)
               : int64_t(0));
#pragma unroll
      for (int it = 0; it < kChunkSteps; ++it) {
        const int c = it * kLanesPerTok + copy_lane;
        cp_async_16(dst0 + swizzled<C::kChunksKV>(tok, c),
                    src + it * kLanesPerTok * 8, valid);
      }
    }
  };

  const int n_tiles = (kv_end - kv_begin + C::kTileN - 1) / C::kTileN;
  load_tile(0, phys0, off0);
  cp_async_commit();  // group 0: Q and tile 0

  int lim[2];  // last KV position (inclusive) each row may see
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int rg = row0 + warp_row0 + lane / 4 + hr * 8;
    lim[hr] = (kDecode || rg >= rows_total) ? kv_end - 1 : ctx0 + rg / G;
  }
  const int warp_min_lim = __shfl_sync(0xffffffffu, lim[0], 0);

  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  float acc[C::kDB][4];
#pragma unroll
  for (int j = 0; j < C::kDB; ++j)
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  uint32_t qf[C::kQInRegs ? C::kKS : 1][4];

  // ldmatrix lane addresses (see mma_utils.cuh): A (Q) rows lane % 16,
  // chunk + lane / 16; B (K) tokens (lane % 8) + (lane / 16) * 8, chunk +
  // (lane / 8) % 2; B (V, transposed) tokens lane % 16, chunk + lane / 16.
  const int a_row = warp_row0 + (lane % 16);
  const int a_chunk = lane / 16;
  const int k_tok = warp_tok0 + (lane % 8) + (lane / 16) * 8;
  const int k_chunk = (lane / 8) % 2;
  const int v_tok = warp_tok0 + (lane % 16);
  const int v_chunk = C::kChunksQ + lane / 16;  // V half of the token row

  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) {
      load_tile((t + 1) % kStages, next_phys, next_off);
      if (t + 2 < n_tiles) table_ahead(t + 2, next_phys, next_off);
    }
    cp_async_commit();
    cp_async_wait<1>();
    // Decode: the warp's own copies, but Q (group 0) came from all threads.
    if (!kDecode || t == 0) {
      __syncthreads();
    } else {
      __syncwarp();
    }
    const uint32_t stage = kv_base + (t % kStages) * C::kKvStageBytes;

    if constexpr (C::kQInRegs) {
      if (t == 0) {
#pragma unroll
        for (int ks = 0; ks < C::kKS; ++ks)
          ldsm_x4(qf[ks],
                  q_base + swizzled<C::kChunksQ>(a_row, ks * 2 + a_chunk));
      }
    }

#pragma unroll 1
    for (int sub = 0; sub < C::kWarpTokens / C::kSubN; ++sub) {
      const int sub_tok = sub * C::kSubN;
      // ---- S = Q K^T (16 rows x kSubN per warp) ----
      float sc[C::kNB][4];
#pragma unroll
      for (int j = 0; j < C::kNB; ++j)
        sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < C::kKS; ++ks) {
        uint32_t a[4];
        if constexpr (C::kQInRegs) {
          a[0] = qf[ks][0], a[1] = qf[ks][1], a[2] = qf[ks][2],
          a[3] = qf[ks][3];
        } else {
          ldsm_x4(a, q_base + swizzled<C::kChunksQ>(a_row, ks * 2 + a_chunk));
        }
#pragma unroll
        for (int j2 = 0; j2 < C::kNB / 2; ++j2) {
          uint32_t kf[4];
          ldsm_x4(kf, stage + swizzled<C::kChunksKV>(k_tok + sub_tok + j2 * 16,
                                                     ks * 2 + k_chunk));
          mma_16816<T>(sc[2 * j2], a, kf[0], kf[1]);
          mma_16816<T>(sc[2 * j2 + 1], a, kf[2], kf[3]);
        }
      }

      // ---- scale, mask, online softmax (exp2 domain) ----
      const int pos0 = kv_begin + t * C::kTileN + warp_tok0 + sub_tok;
      const bool masked = pos0 + C::kSubN - 1 > warp_min_lim;
#pragma unroll
      for (int j = 0; j < C::kNB; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = sc[j][e] * p.scale_log2;
          if (masked) {
            const int pos = pos0 + j * 8 + (lane % 4) * 2 + (e & 1);
            if (pos > lim[e / 2]) v = -INFINITY;
          }
          sc[j][e] = v;
        }
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < C::kNB; ++j)
          mx = fmaxf(mx, fmaxf(sc[j][2 * hr], sc[j][2 * hr + 1]));
        mx = quad_max(mx);
        const float m_new = fmaxf(m[hr], mx);
        // A row with nothing seen yet keeps m = -inf: subtract 0 then, so
        // exp2(-inf) = 0 and never exp2(-inf + inf).
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = fast_exp2(m[hr] - m_use);
        m[hr] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < C::kNB; ++j) {
          sc[j][2 * hr] = fast_exp2(sc[j][2 * hr] - m_use);
          sc[j][2 * hr + 1] = fast_exp2(sc[j][2 * hr + 1] - m_use);
          sum += sc[j][2 * hr] + sc[j][2 * hr + 1];
        }
        l[hr] = l[hr] * alpha +
                sum;  // this thread's columns; quad-summed at the end
#pragma unroll
        for (int j = 0; j < C::kDB; ++j) {
          acc[j][2 * hr] *= alpha;
          acc[j][2 * hr + 1] *= alpha;
        }
      }

      // ---- O += P V ----
#pragma unroll
      for (int kk = 0; kk < C::kSubN / 16; ++kk) {
        uint32_t pa[4];
        pa[0] = pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
        pa[1] = pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
        pa[2] = pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
        pa[3] = pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
        for (int j2 = 0; j2 < C::kDB / 2; ++j2) {
          uint32_t vf[4];
          ldsm_x4_trans(
              vf, stage + swizzled<C::kChunksKV>(v_tok + sub_tok + kk * 16,
                                                 v_chunk + j2 * 2));
          mma_16816<T>(acc[2 * j2], pa, vf[0], vf[1]);
          mma_16816<T>(acc[2 * j2 + 1], pa, vf[2], vf[3]);
        }
      }
    }  // sub
    // The stage is refilled next iteration (decode: by this warp only).
    if constexpr (kDecode) {
      __syncwarp();
    } else {
      __syncthreads();
    }
  }
  cp_async_wait<0>();

  l[0] = quad_sum(l[0]);
  l[1] = quad_sum(l[1]);

  if constexpr (!kDecode) {
    // ---- prefill epilogue: normalise, round once, 4-byte stores ----
    T* out = static_cast<T*>(p.out);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int rg = row0 + warp_row0 + lane / 4 + hr * 8;
      if (rg >= rows_total) continue;
      const int i = rg / G, g = rg - (rg / G) * G;
      T* o = out + int64_t(s.q0 + i) * p.out_s0 +
             int64_t(h * G + g) * p.out_s1 + (lane % 4) * 2;
      const float inv = l[hr] > 0.f ? 1.f / l[hr] : 0.f;
#pragma unroll
      for (int j = 0; j < C::kDB; ++j) {
        *reinterpret_cast<uint32_t*>(o + j * 8) =
            pack2<T>(acc[j][2 * hr] * inv, acc[j][2 * hr + 1] * inv);
      }
    }
  } else {
    // ---- decode epilogue: merge the 4 warps' token quarters ----
    // Layout: o[warp][row][D] fp32, then m[warp][row], l[warp][row].
    float* red_o = reinterpret_cast<float*>(kv_smem);
    float* red_m = red_o + kWarps * 16 * D;
    float* red_l = red_m + kWarps * 16;
    __syncthreads();  // the warps ran apart: all past their last ldmatrix
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = lane / 4 + hr * 8;
      float* o = red_o + (warp * 16 + r) * D + (lane % 4) * 2;
#pragma unroll
      for (int j = 0; j < C::kDB; ++j) {
        *reinterpret_cast<float2*>(o + j * 8) =
            make_float2(acc[j][2 * hr], acc[j][2 * hr + 1]);
      }
      if (lane % 4 == 0) {
        red_m[warp * 16 + r] = m[hr];
        red_l[warp * 16 + r] = l[hr];
      }
    }
    __syncthreads();
    T* out = static_cast<T*>(p.out);
    const int hq0 = h * G;
    const int64_t part_row0 = (int64_t(b) * p.num_kv_heads * G + hq0);
    // Splits this sequence fills (>= 1: kv_begin < seq_len above); one
    // writes the output itself.
    const int n =
        min(p.splits, (s.seq_len + p.split_tokens - 1) / p.split_tokens);
    for (int idx = tid; idx < G * D; idx += kThreads) {
      const int r = idx / D, d = idx % D;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_m[w * 16 + r]);
      float o = 0.f, sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float mw = red_m[w * 16 + r];
        const float c = mw == -INFINITY ? 0.f : fast_exp2(mw - mx);
        o += red_o[(w * 16 + r) * D + d] * c;
        sum += red_l[w * 16 + r] * c;
      }
      if (n == 1) {
        out[int64_t(s.q0) * p.out_s0 + int64_t(hq0 + r) * p.out_s1 + d] =
            from_float<T>(sum > 0.f ? o / sum : 0.f);
      } else {
        const int64_t prow = (part_row0 + r) * p.splits + blockIdx.z;
        p.part_o[prow * D + d] = o;
        if (d == 0) p.part_ml[prow] = make_float2(mx, sum);
      }
    }
    if (n == 1) return;

    // ---- fused combine: the last split of (b, h) to finish merges all ----
    // Release: this CTA's partials are visible device-wide before its count
    // (the threadFenceReduction pattern); the last CTA reads them through L2
    // (__ldcg) and sums in split order, so the result does not depend on
    // which CTA came last. The last one also stores the counter's 0 back:
    // every split of (b, h) has counted by then, and the next launch that
    // uses the counter starts after this one ends (decode_split_counters.h).
    __shared__ int last_split;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      int* counter = p.counters + int64_t(b) * p.num_kv_heads + h;
      last_split = atomicAdd(counter, 1) == n - 1;
      if (last_split) *counter = 0;
    }
    __syncthreads();
    if (!last_split) return;
    __threadfence();
    // One pass, one float4 of one row per thread: each thread walks the
    // row's splits in split order with a running max (online softmax), so
    // the (m, l) and partial loads of up to 16 splits are in flight at once
    // (unrolled; they do not depend on the sums) and no thread waits on a
    // barrier or on another thread's coefficients: one L2 round trip per 16
    // splits. (Before: the (m, l) loads, a barrier, G threads walking all
    // splits' exponentials in turn, a barrier, then the partial loads.)
    // Same fixed order every launch: deterministic. D = 64 takes 8 splits
    // per batch: 16 raised its registers from 96 to 128 (5 -> 4 CTAs/SM).
    constexpr int kQuads = D / 4;
    constexpr int kBatch = D == 64 ? 8 : 16;
    for (int idx = tid; idx < G * kQuads; idx += kThreads) {
      const int r = idx / kQuads, d = (idx % kQuads) * 4;
      const int64_t prow = (part_row0 + r) * p.splits;
      const float4* src =
          reinterpret_cast<const float4*>(p.part_o + prow * D + d);
      float mx = -INFINITY, sum = 0.f;
      float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int k0 = 0; k0 < n; k0 += kBatch) {
#pragma unroll
        for (int kk = 0; kk < kBatch; ++kk) {
          // Past the last split: split n - 1 reloaded at weight 0, so the
          // batch's loads have no branch between them.
          const int k = k0 + kk;
          const int kc = min(k, n - 1);
          const float2 ml = __ldcg(p.part_ml + prow + kc);
          const float4 v = __ldcg(src + kc * kQuads);
          const float mk = k < n ? ml.x : -INFINITY;
          const float m_new = fmaxf(mx, mk);
          // Splits with nothing seen (m = -inf) weigh 0, never exp2(nan).
          const float c_old = mx == -INFINITY ? 0.f : fast_exp2(mx - m_new);
          const float c_k = mk == -INFINITY ? 0.f : fast_exp2(mk - m_new);
          mx = m_new;
          sum = sum * c_old + ml.y * c_k;
          o.x = o.x * c_old + v.x * c_k;
          o.y = o.y * c_old + v.y * c_k;
          o.z = o.z * c_old + v.z * c_k;
          o.w = o.w * c_old + v.w * c_k;
        }
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      uint32_t* dst = reinterpret_cast<uint32_t*>(
          out + int64_t(s.q0) * p.out_s0 + int64_t(hq0 + r) * p.out_s1 + d);
      dst[0] = pack2<T>(o.x * inv, o.y * inv);
      dst[1] = pack2<T>(o.z * inv, o.w * inv);
    }
  }
}

// ---- Host side
// ------------------------------------------------------------------

template <typename T, int D, bool kDecode>
void prepare_kernel() {
  cuda::allow_dynamic_smem<paged_attention_kernel<T, D, kDecode>>(
      Config<D, kDecode>::kSmemBytes);
}

// Resident decode CTAs per SM (asked once per instantiation; the process
// drives one kind of GPU).
template <typename T, int D>
int decode_ctas_per_sm() {
  static const int ctas = [] {
    prepare_kernel<T, D, true>();
    int n = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, paged_attention_kernel<T, D, true>, kThreads,
        Config<D, true>::kSmemBytes));
    return std::max(n, 1);
  }();
  return ctas;
}

// Splits of the decode context for base = B * H_kv CTAs on `slots` resident
// CTA slots, each split >= one tile, at most kMaxSplits. If every split of
// one tile fits in one wave, take them all (a small batch is latency bound:
// the shortest chain per CTA; 1 x 3 kv heads x 512 tokens is 24 CTAs, not
// 9). Otherwise the fewest splits within 5% of the best slot-wave fill
// (ctas / (waves * slots)). (Within 2%, 32 x 8k at 396 slots took 26 splits
// for 0.989 over 3 splits' 0.970: 9x the partial traffic for 2% of fill.)
int choose_splits(int64_t base, int64_t max_seq_len, int64_t slots) {
  const int64_t tiles =
      std::max<int64_t>(1, (max_seq_len + kDecodeTileN - 1) / kDecodeTileN);
  const int max_splits = int(std::min<int64_t>(tiles, kMaxSplits));
  if (base * max_splits <= slots) return max_splits;
  double fill[kMaxSplits + 1] = {};
  double best = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    const int64_t per = (tiles + s - 1) / s;
    if ((tiles + per - 1) / per != s) continue;  // same as fewer splits
    const int64_t ctas = base * s;
    fill[s] = double(ctas) / double((ctas + slots - 1) / slots * slots);
    best = std::max(best, fill[s]);
  }
  for (int s = 1; s <= max_splits; ++s) {
    if (fill[s] >= best - 0.05) return s;
  }
  return 1;
}

// The prefill kernel: v1 (64 rows per CTA, 16 per warp, the kernel above)
// or v2 (128 rows per CTA, 32 per warp: paged_attention_prefill_v2.cu,
// D 64 / 128 only; D = 256 always runs v1). Forced per process by
// VLLM_MYOPS_ATTENTION_CUDA_PREFILL=v1|v2 (read once); unset or "auto"
// chooses by head dim and query length (prefill_v2_by_default). v2 needs
// scale > 0; other scales run v1 too.
enum class PrefillPath { kAuto, kV1, kV2 };

PrefillPath prefill_path() {
  static const PrefillPath path =
      env::choice("VLLM_MYOPS_ATTENTION_CUDA_PREFILL", PrefillPath::kAuto,
                  {{"v1", PrefillPath::kV1}, {"v2", PrefillPath::kV2}});
  return path;
}

// "auto": v2 for D = 128 from 1024 query tokens. v2 launches half the CTAs
// of v1: it pays where there are rows enough to fill the GPU (D = 128,
// long prompts), not for short prompts (too few CTAs) nor for D = 64.
// Measurements: docs/attention/log/.
constexpr int64_t kPrefillV2MinQueryLen = 1024;
constexpr bool prefill_v2_by_default(int d, int64_t max_query_len) {
  return d == 128 && max_query_len >= kPrefillV2MinQueryLen;
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
      p.counters = attention::decode_split_counters(
          stream, sh.num_seqs * sh.num_kv_heads);
    }
    prepare_kernel<T, D, true>();
    const dim3 grid(unsigned(sh.num_seqs), unsigned(sh.num_kv_heads),
                    unsigned(splits));
    paged_attention_kernel<T, D, true>
        <<<grid, kThreads, Config<D, true>::kSmemBytes, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (max_query_len > 1 || !decode_kernel) {
    // Parsed first: an unknown value is refused at any head dim. v2 folds
    // the scale into its exponent after the row max: scale > 0 only.
    const PrefillPath path = prefill_path();
    const bool want_v2 =
        path == PrefillPath::kV2 ||
        (path == PrefillPath::kAuto && prefill_v2_by_default(D, max_query_len));
    const bool v2 = want_v2 && prefill_v2_supports(D) && p.scale_log2 > 0.f;
    const int rows = v2 ? kPrefillV2Rows : kPrefillRows;
    const int64_t row_tiles = (max_query_len * g + rows - 1) / rows;
    TORCH_CHECK(row_tiles <= 65535, "paged_attention: max_query_len * ",
                "num_heads / num_kv_heads must be <= ", 65535 * rows,
                " on CUDA, got ", max_query_len * g);
    if constexpr (prefill_v2_supports(D)) {
      if (v2) {
        launch_prefill_v2<T, D>(p, sh.num_seqs, sh.num_kv_heads, row_tiles,
                                stream);
        return;
      }
    }
    prepare_kernel<T, D, false>();
    const dim3 grid(unsigned(sh.num_seqs), unsigned(sh.num_kv_heads),
                    unsigned(row_tiles));
    paged_attention_kernel<T, D, false>
        <<<grid, kThreads, Config<D, false>::kSmemBytes, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

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

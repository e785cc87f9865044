// SPDX-License-Identifier: Apache-2.0
//
// prefill_wgmma (sm_90a): tile sizes, shared-memory layout, register budgets
// and the compile-time proofs that the loader's placement of Q, K and V, the
// wgmma descriptors and the register fragments agree.
//
// Shared memory (1024-byte aligned, every tile a whole number of 128-byte
// swizzle atoms): [Q][stage 0] .. [stage kStages - 1][barriers].
// * A "panel" is 64 columns (128 bytes) of a set of rows in the 128-byte
//   swizzle: 16-byte chunk c of row r at r * 128 + ((c ^ (r % 8)) * 16)
//   (sm90::sw128_chunk_offset). A row of D elements spans D / 64 panels,
//   stored one after the other.
// * Q: kRows query rows x D, K-major (the A operand of S = Q K^T).
// * A stage holds one K/V tile of kTileN tokens: K panels, then V panels,
//   each kTileN token rows. K rows are K-major for the B operand of S (k =
//   head dim along the row); the same placement makes V MN-major for the B
//   operand of O += P V (k = token selects the row, n = head dim runs along
//   it), which the wgmma reads with its transpose-B bit. Both are the
//   cache's own rows (K and V of a token are its 4 D contiguous bytes), so
//   a token's 16-byte chunks go to panels in order: chunk c -> panel c / 8,
//   chunk c % 8 of the token's row.
#pragma once

#include <cstdint>

#include "cuda/sm90_utils.cuh"

namespace vllm_myops::attention_cuda {

template <int D>
struct PrefillWgmmaTraits {
  static_assert(D == 64 || D == 128, "prefill_wgmma: head dim 64 or 128");
  static constexpr int kConsumerWgs = 2;  // warpgroups of 64 query rows
  static constexpr int kWgRows = 64;      // the wgmma M
  static constexpr int kRows = kConsumerWgs * kWgRows;  // rows per CTA
  static constexpr int kThreads = 128 * (1 + kConsumerWgs);
  // Named barriers (hardware ids; 0 is __syncthreads): the epilogue's, one
  // per consumer warpgroup (128 threads).
  static constexpr int kStoreBarrier0 = 1;
  static_assert(kStoreBarrier0 + kConsumerWgs <= 16, "16 named barriers");
  static constexpr int kProducerWarps = 4;  // warpgroup 0
  static constexpr int kTileN = 128;        // tokens per K/V tile (S's N)
  static constexpr int kKS = D / 16;        // k16 steps of Q K^T
  static constexpr int kPS = kTileN / 16;   // k16 steps of P V
  static constexpr int kSAcc = kTileN / 2;  // S accumulators per thread
  static constexpr int kOAcc = D / 2;       // O accumulators per thread
  // O += P V per k16 step: one wgmma of N = D (its leading offset steps from
  // the first 64 head-dim columns' panel to the second at D = 128), or,
  // with kPvInstN = 64, one per 64-column panel (no leading offset used).
  // The accumulators are the same registers either way (d[4 j + r] of an
  // N = 128 instruction is d[4 (j % 8) + r] of the panel j / 8 one).
  static constexpr int kPvInstN = D;
  static constexpr int kPvInsts = D / kPvInstN;

  static constexpr int kPanelChunks = 8;  // 16-byte chunks per panel row
  static constexpr int kDPanels = D / 64;
  static constexpr int kTokenChunks = 4 * D / 16;  // K and V of a token
  static constexpr int kKvPanelBytes = kTileN * sm90::kSwizzleRowBytes;
  static constexpr int kKBytes = kDPanels * kKvPanelBytes;
  static constexpr int kStageBytes = 2 * kKBytes;  // K panels, V panels
  static constexpr int kQPanelBytes = kRows * sm90::kSwizzleRowBytes;
  static constexpr int kQBytes = kDPanels * kQPanelBytes;
  // D = 128: 2 stages of 64 KB beside Q's 32 KB (FA3's depth at this tile);
  // D = 64: 3 of 32 KB.
  static constexpr int kStages = D == 128 ? 2 : 3;
  static constexpr int kBarriers = 2 * kStages + 1;  // full, empty, Q
  // + 1 KB: the base is rounded up to the swizzle atom.
  static constexpr int kSmemBytes =
      kQBytes + kStages * kStageBytes + kBarriers * 8 + 1024;

  // Registers after setmaxnreg: the kernel is built for one CTA of
  // kThreads at 65536 / kThreads rounded down to 8 (168), and the pool it
  // is given is what the consumers' inc takes from: kProducerRegs +
  // 2 kConsumerRegs <= 3 * 168. FA3's cp.async pair (40 / 232) made ptxas
  // spill the producer's block-table entries at D = 128; the consumers
  // (one tile's S, P fragments and O live at a time) need ~164.
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 224;
  static_assert(kProducerRegs + kConsumerWgs * kConsumerRegs <=
                    (1 + kConsumerWgs) * kLaunchRegs,
                "setmaxnreg asks more registers than the CTA holds");

  // Producer: warp w copies tokens [w, w + 1) * kCopyToks of a tile, 8
  // lanes per token (a copy instruction moves 4 tokens x 128 contiguous
  // bytes), lane j of a token taking chunks j, j + 8, ...: chunk step it
  // is panel it. Lane i holds the table entry of the warp's token i.
  static constexpr int kCopyToks = kTileN / kProducerWarps;  // 32
  static constexpr int kLanesPerTok = 8;
  static constexpr int kToksPerCopy = 32 / kLanesPerTok;
  static constexpr int kCopySteps = kCopyToks / kToksPerCopy;
  static constexpr int kChunkSteps = kTokenChunks / kLanesPerTok;
  static_assert(kCopyToks == 32, "one table entry per lane");
  static_assert(kLanesPerTok == kPanelChunks, "lane j: chunk j of a panel");

  static_assert(kKvPanelBytes % sm90::kSwizzleAtomBytes == 0 &&
                    kQPanelBytes % sm90::kSwizzleAtomBytes == 0,
                "tiles are whole swizzle atoms");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM must fit");
};

// Byte offset, inside a stage, of element e (0 <= e < 2 D: K then V) of
// tile token tok, as the producer places it: chunk e / 8 -> panel
// (e / 8) / 8, chunk (e / 8) % 8 of row tok.
template <int D>
constexpr uint32_t stage_offset(int tok, int e) {
  using C = PrefillWgmmaTraits<D>;
  const int c = e / 8;
  return uint32_t((c / C::kPanelChunks) * C::kKvPanelBytes +
                  sm90::sw128_chunk_offset(tok, c % C::kPanelChunks) +
                  (e % 8) * 2);
}

// Byte offset, inside Q, of element d of CTA row r.
template <int D>
constexpr uint32_t q_offset(int r, int d) {
  using C = PrefillWgmmaTraits<D>;
  const int c = d / 8;
  return uint32_t((c / C::kPanelChunks) * C::kQPanelBytes +
                  sm90::sw128_chunk_offset(r, c % C::kPanelChunks) +
                  (d % 8) * 2);
}

// The descriptors' starts (offsets from Q / the stage) as the consumer
// computes them: S's k16 step ks reads Q rows of warpgroup wg from
// q_desc_start and K from k_desc_start; P V's step kk reads V from
// v_desc_start with leading offset kKvPanelBytes.
template <int D>
constexpr uint32_t q_desc_start(int wg, int ks) {
  using C = PrefillWgmmaTraits<D>;
  return uint32_t((ks / 4) * C::kQPanelBytes +
                  wg * C::kWgRows * sm90::kSwizzleRowBytes + (ks % 4) * 32);
}
template <int D>
constexpr uint32_t k_desc_start(int ks) {
  using C = PrefillWgmmaTraits<D>;
  return uint32_t((ks / 4) * C::kKvPanelBytes + (ks % 4) * 32);
}
template <int D>
constexpr uint32_t v_desc_start(int kk, int inst) {
  using C = PrefillWgmmaTraits<D>;
  return uint32_t(C::kKBytes + inst * (C::kPvInstN / 64) * C::kKvPanelBytes +
                  kk * 16 * sm90::kSwizzleRowBytes);
}

// Every element every wgmma of the kernel reads is where the loaders put
// it, under the hardware's address model of sm90_utils.cuh
// (sw128_k_offset / sw128_mn_offset, which strip the start's k offset the
// same way the hardware's XOR does on 1024-byte aligned tiles):
// * S step ks: A(m, k) = Q[wg rows + m][16 ks + k]; B(n, k) = K[token n]
//   [16 ks + k];
// * P V step kk, instruction inst: B(k, n) = V[token 16 kk + k][inst *
//   kPvInstN + n].
template <int D>
constexpr bool operands_match_loader() {
  using C = PrefillWgmmaTraits<D>;
  for (int ks = 0; ks < C::kKS; ++ks) {
    // The k offset inside the row (ks % 4) * 16 elements is the descriptor
    // start's low bits; the model applies it before the swizzle.
    const int k0 = (ks % 4) * 16;
    for (int k = 0; k < 16; ++k) {
      for (int wg = 0; wg < C::kConsumerWgs; ++wg)
        for (int m = 0; m < C::kWgRows; ++m) {
          const uint32_t base = q_desc_start<D>(wg, ks) - k0 * 2;
          if (base + sm90::sw128_k_offset(m, k, k0) !=
              q_offset<D>(wg * C::kWgRows + m, 16 * ks + k))
            return false;
        }
      for (int n = 0; n < C::kTileN; ++n) {
        const uint32_t base = k_desc_start<D>(ks) - k0 * 2;
        if (base + sm90::sw128_k_offset(n, k, k0) !=
            stage_offset<D>(n, 16 * ks + k))
          return false;
      }
    }
  }
  for (int kk = 0; kk < C::kPS; ++kk)
    for (int inst = 0; inst < C::kPvInsts; ++inst)
      for (int k = 0; k < 16; ++k)
        for (int n = 0; n < C::kPvInstN; ++n) {
          const uint32_t at = v_desc_start<D>(kk, inst) +
                              sm90::sw128_mn_offset(n, k, C::kKvPanelBytes);
          if (at != stage_offset<D>(16 * kk + k, D + inst * C::kPvInstN + n))
            return false;
        }
  return true;
}

// Descriptor starts are 1024-byte aligned up to the k offset inside the
// row (the swizzle pattern is anchored at address bits [7, 10), which the
// hardware takes from the absolute address: base offset field 0).
template <int D>
constexpr bool descriptor_starts_aligned() {
  using C = PrefillWgmmaTraits<D>;
  for (int ks = 0; ks < C::kKS; ++ks) {
    for (int wg = 0; wg < C::kConsumerWgs; ++wg)
      if ((q_desc_start<D>(wg, ks) - (ks % 4) * 32) % 1024 != 0) return false;
    if ((k_desc_start<D>(ks) - (ks % 4) * 32) % 1024 != 0) return false;
  }
  for (int kk = 0; kk < C::kPS; ++kk)
    for (int inst = 0; inst < C::kPvInsts; ++inst)
      if (v_desc_start<D>(kk, inst) % 1024 != 0) return false;
  return C::kQBytes % 1024 == 0 && C::kStageBytes % 1024 == 0;
}

static_assert(operands_match_loader<64>() && operands_match_loader<128>(),
              "a wgmma operand does not read what the loader wrote");
static_assert(descriptor_starts_aligned<64>() &&
                  descriptor_starts_aligned<128>(),
              "a descriptor start is not on a swizzle atom");

}  // namespace vllm_myops::attention_cuda

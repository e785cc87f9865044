// SPDX-License-Identifier: Apache-2.0
//
// prefill_wgmma's overlapped consumer mainloop (the kernel's kOverlap =
// true; FlashAttention-3's intra-warpgroup "GEMM-softmax pipelining",
// hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp, its IntraWGOverlap path),
// offered for the A/B against the serial one (prefill_wgmma_mainloop.cuh),
// and its ping-pong between the two consumer warpgroups (kPingpong, at the
// end of this comment), offered for the A/B against it.
//
// Iteration t, entered with S(t) already turned into fp32 P(t) in the S
// registers and alpha(t) its O factor (the first tile's S and softmax run
// before the loop):
//   0. wait_group 0: P V(t - 1) completes (nothing in flight at t = 0);
//      release tile t - 1's stage (its S completed one iteration earlier);
//      P(t) rounded into the RS A fragments; O *= alpha(t): the row-max
//      rescale after the tile's softmax, before its P V (as FA3);
//   1. wait tile t + 1's `full`; issue S(t + 1) = Q K(t + 1)^T (SS wgmma,
//      committed) into the S registers (free: P(t) is in the fragments);
//   2. issue O += P(t) V(t) (RS wgmma, committed);
//   3. wait_group 1: S(t + 1) completes (groups complete in commit order),
//      P V(t) stays in flight;
//   4. the softmax of S(t + 1) in place (mask, row max, exp2, row sum) while
//      P V(t) runs on the tensor cores; alpha(t + 1) kept for step 0.
// The last tile does 0 and 2 only; after the loop a wait_group 0 and the
// last tile's release. P V(t) cannot stay in flight past step 0: O's
// rescale writes its accumulators, and P(t + 1) goes into the fragments it
// reads (one set).
//
// Why not the order "issue S(t + 1), softmax of S(t), issue P V(t), wait
// for S(t + 1)" (the softmax overlapping S instead of P V): it keeps two S
// accumulator sets live beside O; a D = 128 build of it under the 224
// consumer registers spilled and ptxas serialized every wgmma (C7512,
// insufficient registers). The order above keeps one S set (the entry
// docs/attention/log/2026-12-06-prefill-wgmma-overlap.md has the figures).
//
// Two ptxas rules shape the code (either one, broken, serializes every
// wgmma of the kernel or drops the overlap, with no error):
// * no instruction may read or write registers of an in-flight wgmma, and
//   ptxas checks it per path: a wait_group must see the same groups in
//   flight on every path into it, so steps 1-4 sit in one branch and the
//   last tile's step 2 in the other (two `if (has_next)` around them made
//   it serialize, C7514);
// * ptxas hoists a wgmma wait to the top of its basic block, above every
//   instruction that does not need it: a wait_group 0 placed after the
//   softmax in the same block ran before the exp2s. Step 0 at the top of
//   the next iteration puts the loop's back edge between them (SASS:
//   every MUFU.EX2 of the loop between the DEPBAR 1 and the DEPBAR 0).
//
// A consumer holds 2 stages at once (tile t and the awaited t + 1: traits'
// kOverlapStagesHeld). Causal masking (tiles crossing the warpgroup's
// first row's limit), the tiles a warpgroup skips and the releases of the
// tiles only the other warpgroup needs are those of the serial loop
// (prefill_wgmma.cuh); every release follows its tile's `full` wait and
// the completion of both of the tile's wgmmas.
//
// Ping-pong (kPingpong; FA3's warp_scheduler_barrier_sync / _arrive on its
// named barriers WarpSchedulerWG1 / 2): the two consumer warpgroups take
// turns issuing their GEMMs, so that the tensor cores run one warpgroup's
// S(t + 1) and P V(t) while the other does its softmax. A round is steps
// 1-2 of an iteration with a next tile (round r = iteration r): warpgroup
// w has R_w = max(n_mine(w) - 1, 0) rounds; the first tile's S and the
// last tile's P V are in no round (as FA3). Warpgroup w owns turn barrier
// kTurnBarrier0 + w (256 threads: its own 128 bar.sync, the partner's 128
// bar.arrive). In round r, w waits for tile r + 1's `full`, then
//   wait(r): bar.sync on its own barrier, if r < lim_w;
//   issues S(r + 1) and P V(r);
//   pass(r): bar.arrive on the partner's barrier, if r + 1 < lim_w;
// lim_0 = R_1 + 1, lim_1 = R_0, and warpgroup 1 passes round -1 before
// anything else (the pre-arrival: warpgroup 0 goes first). The turns go
// 0's round 0, 1's round 0, 0's round 1, ... while both have rounds; the
// one with rounds left runs them without waiting (1 when its rows' limits
// reach a tile past 0's on the causal diagonal; 0 when 1's rows are all
// past the query rows: R_1 = 0).
// Invariant (no deadlock, no barrier left mid-phase at exit): each wait
// is matched by exactly one partner arrival, whatever R_0 and R_1 are.
// Barrier 0: 0 waits min(R_0, R_1 + 1) times, 1 arrives [R_0 > 0] +
// min(R_1, R_0 - 1) times; barrier 1: 1 waits min(R_1, R_0) times, 0
// arrives min(R_0, R_1) times. A warpgroup passes round r only after its
// wait of round r returned (r + 1 < lim implies r < lim), which needs the
// partner's previous pass, made after the partner's previous wait: the
// arrivals on a barrier alternate with its phases (none counted twice in
// one phase). Against the stage pipeline: a warpgroup waits for its turn
// in round r only after tile r + 1's `full` (the producer fills in order:
// every tile <= r + 1 is full); the partner round it waits for reads
// tiles <= r + 1 and needs from it only earlier rounds' passes, so no
// `full` / `empty` wait closes a cycle with a turn wait.
#pragma once

#include <cstdint>

#include "attention/cuda/prefill_wgmma_mainloop.cuh"
#include "attention/cuda/prefill_wgmma_softmax.cuh"
#include "attention/cuda/prefill_wgmma_traits.cuh"
#include "cuda/sm90_pipeline.cuh"
#include "cuda/sm90_utils.cuh"

namespace vllm_myops::attention_cuda {

// The turns of consumer warpgroup wg in the ping-pong above (kOn =
// kPingpong; with kOn false every call is empty). Warpgroup-uniform.
template <int D, bool kOn>
struct WgmmaTurns {
  using C = PrefillWgmmaTraits<D>;
  static_assert(C::kConsumerWgs == 2, "ping-pong of two warpgroups");
  static constexpr int kThreads = 128 * C::kConsumerWgs;
  int wg;   // this consumer warpgroup
  int lim;  // round r waits iff r < lim, passes iff r + 1 < lim

  // Warpgroup 1's pass of round -1, before anything it may wait on.
  __device__ __forceinline__ void start() const {
    if constexpr (kOn) {
      if (wg == 1) pass(-1);
    }
  }
  __device__ __forceinline__ void wait(int r) const {
    if constexpr (kOn) {
      if (r < lim) sm90::named_barrier_sync(C::kTurnBarrier0 + wg, kThreads);
    }
  }
  __device__ __forceinline__ void pass(int r) const {
    if constexpr (kOn) {
      if (r + 1 < lim) {
        sm90::named_barrier_arrive(C::kTurnBarrier0 + 1 - wg, kThreads);
      }
    }
  }
};

template <int D, bool kOn>
__device__ __forceinline__ WgmmaTurns<D, kOn> wgmma_turns(
    const WgmmaCtaInfo& ci, int G, int wg) {
  if constexpr (kOn) {
    const int r0 = max(wgmma_tiles_of<D>(ci, G, 0) - 1, 0);
    const int r1 = max(wgmma_tiles_of<D>(ci, G, 1) - 1, 0);
    return {wg, wg == 0 ? r1 + 1 : r0};
  } else {
    return {wg, 0};
  }
}

template <int kPS>
__device__ __forceinline__ void fence_p_fragments(uint32_t (&pa)[kPS][4]) {
#pragma unroll
  for (int kk = 0; kk < kPS; ++kk) sm90::fence_operands(pa[kk]);
}

// The softmax of tile t (S complete in sc), in place: P(t) in fp32 in sc,
// alpha out (neither O nor the P fragments touched).
template <int D>
__device__ __forceinline__ void overlap_softmax(
    const WgmmaConsumer& c, int t, float (&sc)[PrefillWgmmaTraits<D>::kSAcc],
    float (&m)[2], float (&l)[2], float (&alpha)[2]) {
  using C = PrefillWgmmaTraits<D>;
  int lim[2];
  const bool masked = wgmma_tile_mask<D>(c, t, lim);
  wgmma_softmax_p<C::kTileN>(sc, m, l, alpha, c.p->scale_log2, masked,
                             t * C::kTileN, lim, c.lane % 4);
}

// The overlapped mainloop over tiles [0, n_mine), n_mine >= 1 (q_full
// already waited for), steps 0-4 above, round t taking its turn with
// kPingpong (turns.start() already called): on return every wgmma
// completed and every tile of [0, n_mine) released.
template <typename T, int D, bool kPingpong>
__device__ __forceinline__ void prefill_wgmma_mainloop_overlap(
    const WgmmaConsumer& c, const WgmmaTurns<D, kPingpong>& turns, int n_mine,
    float (&m)[2], float (&l)[2], float (&o)[PrefillWgmmaTraits<D>::kOAcc]) {
  using C = PrefillWgmmaTraits<D>;
  float sc[C::kSAcc];
  uint32_t pa[C::kPS][4];
  float alpha[2];
  wgmma_wait_tile<D>(c, 0);
  wgmma_qk<T, D>(sc, c.q_base, wgmma_stage<D>(c, 0), c.wg);
  sm90::wgmma_wait<0>();
  sm90::fence_operands(sc);
  overlap_softmax<D>(c, 0, sc, m, l, alpha);
  for (int t = 0; t < n_mine; ++t) {
    // 0: P V(t - 1) completes (no group in flight at t = 0); at t = 0 O is
    // all zeros and alpha(0) = exp2(-inf) = 0.
    sm90::wgmma_wait<0>();
    sm90::fence_operands(o);
    fence_p_fragments<C::kPS>(pa);
    if (t > 0) wgmma_release_tile<D>(c, t - 1);
    wgmma_pack_p<T, C::kTileN>(sc, pa);
    wgmma_rescale_o<C::kOAcc>(o, alpha);
    sm90::fence_operands(o);
    // One branch per path (warpgroup-uniform), so that every wait_group
    // sees the same groups in flight on every path into it.
    if (t + 1 < n_mine) {
      wgmma_wait_tile<D>(c, t + 1);                                  // 1
      turns.wait(t);                                                 // 1
      wgmma_qk<T, D>(sc, c.q_base, wgmma_stage<D>(c, t + 1), c.wg);  // 1
      wgmma_pv<T, D>(o, pa, wgmma_stage<D>(c, t));                   // 2
      turns.pass(t);                                                 // 2
      sm90::wgmma_wait<1>();  // 3: S(t + 1); P V(t) in flight
      sm90::fence_operands(sc);
      overlap_softmax<D>(c, t + 1, sc, m, l, alpha);  // 4
      sm90::fence_operands(sc);
    } else {
      wgmma_pv<T, D>(o, pa, wgmma_stage<D>(c, t));
    }
  }
  sm90::wgmma_wait<0>();  // P V(n_mine - 1)
  sm90::fence_operands(o);
  fence_p_fragments<C::kPS>(pa);
  wgmma_release_tile<D>(c, n_mine - 1);
}

}  // namespace vllm_myops::attention_cuda

// SPDX-License-Identifier: Apache-2.0
//
// The CUDA arrangement of one 64x64 tile of int4 codes (b_packed[nt][kt][512]
// int32), shared by the repack kernel, the GEMM and the dequant kernel.
//
// A warp computes a 64 (k) x 64 (n) tile as 4 k16 steps x 8 n8 blocks of
// mma.sync m16n8k16. Lane l (g = l / 4, t = l % 4) holds, per (k16 step s,
// n8 block j), the B fragment b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
// (rows relative to the step, column relative to the block): 4 codes.
// Two n8 blocks (j = 2p, 2p + 1) share one int32, so a lane owns
// 4 steps x 4 pairs = 16 words of a tile:
//
//   word w = s * 128 + lane * 4 + p        (s: k16 step, p: n8-block pair)
//
// so the 4 words of one step are one 16-byte load per lane and a warp reads
// 512 contiguous bytes per load (a tile is 4 fully coalesced loads).
// Inside word w, nibble i (bits 4i..4i+3), with h = i / 4 and r = i % 4:
//
//   k = 16 s + 2 t + h + 8 (r & 1),   n = 16 p + 8 (r >> 1) + g
//
// i.e. nibbles (0, 4) = b0 of block 2p, (1, 5) = b1 of block 2p,
//      (2, 6) = b0 of block 2p + 1, (3, 7) = b1 of block 2p + 1.
// The dequant extracts nibble pair (r, r + 4) with one lop3 on q >> 4r:
// (q >> 4r) & 0x000f000f lands them in the low mantissa bits of the low and
// high 16-bit halves, the low half being the smaller k (2t) as mma expects.
// Codes outside K x N (padding) are 0.
#pragma once

#include <cstdint>

namespace vllm_myops::w4a16::cuda_layout {

constexpr int kTileK = 64;
constexpr int kTileN = 64;
constexpr int kTileWords = 512;  // 64 * 64 codes / 8 per int32
constexpr int kWordsPerLane = 16;
constexpr int kSteps = 4;  // k16 steps per tile
constexpr int kPairs = 4;  // n8-block pairs per tile
static_assert(kTileK * kTileN / 8 == kTileWords, "tile word count");
static_assert(kWordsPerLane * 32 == kTileWords, "a warp owns a tile");
static_assert(kSteps * 16 == kTileK && kPairs * 16 == kTileN, "tile shape");

// (k, n) inside the tile of nibble i of word w.
struct TileCoord {
  int k;
  int n;
};

__host__ __device__ constexpr TileCoord nibble_coord(int w, int i) {
  const int s = w / 128;
  const int lane = (w / 4) % 32;
  const int p = w % 4;
  const int g = lane / 4, t = lane % 4;
  const int h = i / 4, r = i % 4;
  return {16 * s + 2 * t + h + 8 * (r & 1), 16 * p + 8 * (r >> 1) + g};
}

// Inverse: (word, nibble) holding tile coordinate (k, n).
struct TileSlot {
  int word;
  int nibble;
};

__host__ __device__ constexpr TileSlot slot_of(int k, int n) {
  const int s = k / 16, kr = k % 16;
  const int h = kr & 1, t = (kr % 8) / 2, rlo = kr / 8;
  const int p = n / 16, nr = n % 16;
  const int rhi = nr / 8, g = nr % 8;
  const int lane = 4 * g + t;
  return {s * 128 + lane * 4 + p, 4 * h + rlo + 2 * rhi};
}

// The two maps are inverses (checked at compile time on a few points).
constexpr bool roundtrip(int w, int i) {
  const TileCoord c = nibble_coord(w, i);
  const TileSlot s = slot_of(c.k, c.n);
  return s.word == w && s.nibble == i;
}
static_assert(roundtrip(0, 0) && roundtrip(511, 7) && roundtrip(137, 5) &&
                  roundtrip(300, 2) && roundtrip(77, 3) && roundtrip(450, 6),
              "nibble_coord and slot_of disagree");
static_assert(nibble_coord(0, 4).k == 1 && nibble_coord(0, 1).k == 8 &&
                  nibble_coord(0, 2).n == 8 && nibble_coord(16, 0).n == 1 &&
                  nibble_coord(4, 0).k == 2 && nibble_coord(1, 0).n == 16 &&
                  nibble_coord(128, 0).k == 16,
              "layout as documented");

}  // namespace vllm_myops::w4a16::cuda_layout

// SPDX-License-Identifier: Apache-2.0
//
// 16-byte vectors of float/__half/__nv_bfloat16 and the global loads and
// stores that move them.
//
// Bandwidth-bound kernels want one 16-byte access per element group
// (LDG.E.128 / STG.E.128). A 16-byte access needs a 16-byte aligned address,
// which a tensor row does not always have (odd widths, strided views). The
// load_16B / store_16B helpers therefore take the alignment the caller can
// prove (16, 8, 4 or 2 bytes) and split the access into that many pieces;
// with_alignment turns a run-time alignment into that compile-time one, so a
// kernel picks the widest access per row once, outside its unrolled loops.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/dispatch_utils.cuh"

namespace vllm_myops::cuda {

// 16 bytes of T, held as packed pairs so float conversions go two at a time.
template <typename T>
struct alignas(16) Vec16 {
  using Pair = typename PackedPair<T>::type;
  static constexpr int kElems = 16 / static_cast<int>(sizeof(T));
  static constexpr int kPairs = kElems / 2;
  Pair pair[kPairs];
};

template <typename T>
__device__ __forceinline__ Vec16<T> vec16_from_bits(uint4 bits) {
  Vec16<T> v;
  static_assert(sizeof(v) == sizeof(bits));
  __builtin_memcpy(&v, &bits, sizeof(v));
  return v;
}

template <typename T>
__device__ __forceinline__ uint4 vec16_to_bits(const Vec16<T>& v) {
  uint4 bits;
  __builtin_memcpy(&bits, &v, sizeof(v));
  return bits;
}

template <typename T>
__device__ __forceinline__ void vec16_to_floats(const Vec16<T>& v,
                                                float (&f)[Vec16<T>::kElems]) {
#pragma unroll
  for (int i = 0; i < Vec16<T>::kPairs; ++i) {
    const float2 two = PackedPair<T>::to_floats(v.pair[i]);
    f[2 * i] = two.x;
    f[2 * i + 1] = two.y;
  }
}

// Rounds each value to T (round-to-nearest-even).
template <typename T>
__device__ __forceinline__ Vec16<T> vec16_from_floats(
    const float (&f)[Vec16<T>::kElems]) {
  Vec16<T> v;
#pragma unroll
  for (int i = 0; i < Vec16<T>::kPairs; ++i) {
    v.pair[i] = PackedPair<T>::from_floats(f[2 * i], f[2 * i + 1]);
  }
  return v;
}

// ---- alignment --------------------------------------------------------------

template <int kBytes>
struct Alignment {
  static constexpr int value = kBytes;
};

// Alignment (16, 8, 4, 2 or 1 bytes) of a + k whenever b + k is 16-byte
// aligned: the lowest bit in which the two addresses differ, capped at 16.
// Used for a tensor that is walked in step with another one whose accesses
// were aligned to 16 bytes.
__host__ __device__ __forceinline__ int relative_alignment(const void* a,
                                                           const void* b) {
  const unsigned diff = static_cast<unsigned>(reinterpret_cast<uintptr_t>(a) ^
                                              reinterpret_cast<uintptr_t>(b)) &
                        15u;
  return diff == 0 ? 16 : static_cast<int>(diff & (0u - diff));
}

// Calls f(Alignment<A>{}) with A the widest of 16, 8, 4, 2 that is <= align
// and >= kMinAlign (the element size: a smaller alignment cannot happen).
// `align` should be uniform across the warp, or the branches diverge.
template <int kMinAlign, typename F>
__device__ __forceinline__ void with_alignment(int align, F&& f) {
  static_assert(kMinAlign == 2 || kMinAlign == 4, "element size 2 or 4 bytes");
  if (align >= 16) {
    f(Alignment<16>{});
  } else if (align >= 8) {
    f(Alignment<8>{});
  } else if constexpr (kMinAlign == 4) {
    f(Alignment<4>{});
  } else if (align >= 4) {
    f(Alignment<4>{});
  } else {
    f(Alignment<2>{});
  }
}

// ---- loads and stores -------------------------------------------------------

// kReadOnly loads go through the non-coherent path (ld.global.nc, as __ldg),
// which is legal only when no thread writes that memory while the kernel
// runs: read-only inputs and weights, never a tensor written in place.
enum class LoadPath { kCoherent, kReadOnly };

template <LoadPath kPath, typename U>
__device__ __forceinline__ U load_word(const U* p) {
  if constexpr (kPath == LoadPath::kReadOnly) {
    return __ldg(p);
  } else {
    return *p;
  }
}

// 16 bytes at p, which is kAlign-byte aligned.
template <LoadPath kPath, int kAlign>
__device__ __forceinline__ uint4 load_16B(const void* p) {
  if constexpr (kAlign == 16) {
    return load_word<kPath>(static_cast<const uint4*>(p));
  } else if constexpr (kAlign == 8) {
    const auto* q = static_cast<const uint2*>(p);
    const uint2 lo = load_word<kPath>(q);
    const uint2 hi = load_word<kPath>(q + 1);
    return make_uint4(lo.x, lo.y, hi.x, hi.y);
  } else if constexpr (kAlign == 4) {
    const auto* q = static_cast<const unsigned*>(p);
    return make_uint4(load_word<kPath>(q), load_word<kPath>(q + 1),
                      load_word<kPath>(q + 2), load_word<kPath>(q + 3));
  } else {
    static_assert(kAlign == 2, "alignment must be 16, 8, 4 or 2 bytes");
    const auto* q = static_cast<const unsigned short*>(p);
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = static_cast<unsigned>(load_word<kPath>(q + 2 * i)) |
             (static_cast<unsigned>(load_word<kPath>(q + 2 * i + 1)) << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Stores 16 bytes at p (global memory), which is kAlign-byte aligned.
// Inline PTX on purpose: given plain C++ stores, the compiler merges the
// branches of with_alignment into one store sequence of the narrowest width,
// which turns every 16-byte store into four 4-byte ones. The "memory" clobber
// keeps these ordered with the surrounding loads and stores, as C++ stores
// would be.
template <int kAlign>
__device__ __forceinline__ void store_16B(void* p, uint4 v) {
  if constexpr (kAlign == 16) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  } else if constexpr (kAlign == 8) {
    asm volatile(
        "st.global.v2.b32 [%0], {%1, %2};\n\t"
        "st.global.v2.b32 [%0+8], {%3, %4};" ::"l"(p),
        "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
        : "memory");
  } else if constexpr (kAlign == 4) {
    asm volatile(
        "st.global.b32 [%0], %1;\n\t"
        "st.global.b32 [%0+4], %2;\n\t"
        "st.global.b32 [%0+8], %3;\n\t"
        "st.global.b32 [%0+12], %4;" ::"l"(p),
        "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
        : "memory");
  } else {
    static_assert(kAlign == 2, "alignment must be 16, 8, 4 or 2 bytes");
    auto* q = static_cast<unsigned short*>(p);
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      q[2 * i] = static_cast<unsigned short>(w[i]);
      q[2 * i + 1] = static_cast<unsigned short>(w[i] >> 16);
    }
  }
}

// ---- misaligned read-only data, from whole granules -------------------------
// A misaligned 16-byte window spans two aligned 16-byte granules. Loading
// both and funnel-shifting costs 2 loads instead of up to 8 narrow ones (a
// 2-byte-aligned window), at the price of also reading the granules' other
// bytes. A granule that holds any byte of an allocation lies in the same page,
// so that is safe for read-only data; never use it on memory being written.

// Where a window starts within its first granule: kWords whole 4-byte words
// plus a run-time 0/8/16/24-bit shift. kWords == -1: the window is the
// granule (aligned).
template <int kWords>
struct GranuleOffset {
  static constexpr int words = kWords;
};

// Calls f(GranuleOffset<W>{}) for a window starting byte_offset (0..15) bytes
// into its granule. byte_offset should be uniform across the warp.
template <typename F>
__device__ __forceinline__ void with_granule_offset(unsigned byte_offset,
                                                    F&& f) {
  switch (byte_offset >> 2) {
    case 0:
      if (byte_offset == 0) {
        f(GranuleOffset<-1>{});
      } else {
        f(GranuleOffset<0>{});
      }
      break;
    case 1:
      f(GranuleOffset<1>{});
      break;
    case 2:
      f(GranuleOffset<2>{});
      break;
    default:
      f(GranuleOffset<3>{});
      break;
  }
}

// Bits [bit_shift, bit_shift + 32) of the 64-bit value hi:lo (SHF.R.W).
__host__ __device__ __forceinline__ unsigned funnel_shift_right(
    unsigned lo, unsigned hi, unsigned bit_shift) {
  return static_cast<unsigned>(
      ((static_cast<unsigned long long>(hi) << 32) | lo) >> bit_shift);
}

// The 16-byte window that starts kWords * 4 + bit_shift / 8 bytes into the
// granule pair (lo, hi).
template <int kWords>
__host__ __device__ __forceinline__ uint4
window_of_granules(uint4 lo, uint4 hi, unsigned bit_shift) {
  static_assert(kWords >= 0 && kWords <= 3);
  const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  return make_uint4(
      funnel_shift_right(w[kWords], w[kWords + 1], bit_shift),
      funnel_shift_right(w[kWords + 1], w[kWords + 2], bit_shift),
      funnel_shift_right(w[kWords + 2], w[kWords + 3], bit_shift),
      funnel_shift_right(w[kWords + 3], w[kWords + 4], bit_shift));
}

// The 16 bytes at the window given by kWords and bit_shift in the granules
// starting at g (16-byte aligned). Read-only data only (see above).
template <LoadPath kPath, int kWords>
__device__ __forceinline__ uint4 load_16B_from_granules(const uint4* g,
                                                        unsigned bit_shift) {
  const uint4 lo = load_word<kPath>(g);
  if constexpr (kWords < 0) {
    return lo;
  } else {
    return window_of_granules<kWords>(lo, load_word<kPath>(g + 1), bit_shift);
  }
}

// Read-only vectors of T at p + i * 16 bytes for any element-aligned p: the
// granule arithmetic, done once for a run of vectors that share p's offset.
template <typename T>
struct GranuleCursor {
  const uint4* granules;  // granule holding p
  unsigned byte_offset;   // of p in it
  unsigned bit_shift;     // (byte_offset % 4) * 8

  __device__ __forceinline__ explicit GranuleCursor(const T* p) {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    byte_offset = static_cast<unsigned>(addr & 15u);
    granules = reinterpret_cast<const uint4*>(addr - byte_offset);
    bit_shift = (byte_offset & 3u) * 8u;
  }

  // Vector i, for f's GranuleOffset from with_granule_offset(byte_offset, f).
  template <LoadPath kPath, int kWords>
  __device__ __forceinline__ Vec16<T> load(int64_t i,
                                           GranuleOffset<kWords>) const {
    return vec16_from_bits<T>(
        load_16B_from_granules<kPath, kWords>(granules + i, bit_shift));
  }

  // As load(), for a window that ends at or before `end` (one past the last
  // element of the data), but without reading any byte at or past `end`:
  // the window's second granule can extend past the allocation, which no
  // hardware faults on but compute-sanitizer (byte-exact) reports. Only the
  // one vector whose second granule holds `end` takes the element path.
  template <LoadPath kPath, int kWords>
  __device__ __forceinline__ Vec16<T> load_bounded(int64_t i,
                                                   GranuleOffset<kWords> o,
                                                   const T* end) const {
    if constexpr (kWords >= 0) {
      const auto* second_granule_end =
          reinterpret_cast<const char*>(granules + i + 2);
      if (second_granule_end > reinterpret_cast<const char*>(end)) {
        const T* p = reinterpret_cast<const T*>(
            reinterpret_cast<const char*>(granules + i) + byte_offset);
        T e[Vec16<T>::kElems];
#pragma unroll
        for (int j = 0; j < Vec16<T>::kElems; ++j)
          e[j] = load_word<kPath>(p + j);
        Vec16<T> v;
        __builtin_memcpy(&v, e, sizeof(v));
        return v;
      }
    }
    return load<kPath>(i, o);
  }
};

// ---- typed wrappers ---------------------------------------------------------

template <LoadPath kPath, int kAlign, typename T>
__device__ __forceinline__ Vec16<T> load_vec16(const T* p) {
  return vec16_from_bits<T>(load_16B<kPath, kAlign>(p));
}

template <int kAlign, typename T>
__device__ __forceinline__ void store_vec16(T* p, const Vec16<T>& v) {
  store_16B<kAlign>(p, vec16_to_bits(v));
}

// One element (for the ragged ends of a row).
template <LoadPath kPath, typename T>
__device__ __forceinline__ T load_element(const T* p) {
  return load_word<kPath>(p);
}

}  // namespace vllm_myops::cuda

// SPDX-License-Identifier: Apache-2.0
// Per-ISA entry points of the CPU RMSNorm kernel. rms_norm_kernels_isa.cpp
// is compiled once per ISA (cpu/isa.h), each copy defining the function
// named for its ISA.
#pragma once

#include <cstdint>

#include "layernorm/rms_norm_params.h"

namespace vllm_myops::cpu {

// Normalises rows [begin, end) of `p` on the calling thread.
using RmsNormRowsFn = void (*)(const RmsNormParams& p, int64_t begin,
                               int64_t end);

void rms_norm_rows_DEFAULT(const RmsNormParams& p, int64_t begin, int64_t end);
void rms_norm_rows_AVX2(const RmsNormParams& p, int64_t begin, int64_t end);
void rms_norm_rows_AVX512(const RmsNormParams& p, int64_t begin, int64_t end);

}  // namespace vllm_myops::cpu

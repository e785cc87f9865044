// SPDX-License-Identifier: Apache-2.0
// The tile and constants every piece of the CPU paged attention kernel
// (attention_kernels_isa.cpp and its attention_*.h pieces) shares.
// Include only from that per-ISA source; everything here has internal
// linkage.
#pragma once

#include <limits>

#include "attention/cpu/attention_kernels_isa.h"
#include "cpu/isa.h"

namespace vllm_myops::cpu {
namespace {

constexpr int kTile = 32;  // context tokens per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace
}  // namespace vllm_myops::cpu

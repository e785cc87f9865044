// SPDX-License-Identifier: Apache-2.0
// Element types the kernels are built for, as a plain enum. ATen-free, so
// launch descriptions and device code can carry it (c10::ScalarType is mapped
// to it once, by the host-side argument checks).
#pragma once

namespace vllm_myops {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

}  // namespace vllm_myops

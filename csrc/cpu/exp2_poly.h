// SPDX-License-Identifier: Apache-2.0
// 2^f for f in [-0.5, 0.5] as a degree-7 polynomial, the core of the vector
// exp2 of every CPU ISA body: x = n + f with n = round(x), then 2^x = 2^n *
// poly(f), 2^n from the exponent bits. Relative error < 1e-8 before fp32
// rounding, so the result is within ~1 ulp of exp2f. One table so that the
// AVX2 and AVX-512 bodies of a kernel round the same way.
#pragma once

namespace vllm_myops::cpu {

// Horner order, highest degree first: p = c[0]; p = p * f + c[i].
inline constexpr float kExp2Poly[8] = {
    1.5252734e-05f, 1.5403530e-04f, 1.3333558e-03f, 9.6181291e-03f,
    5.5504109e-02f, 2.4022651e-01f, 6.9314718e-01f, 1.0f};

}  // namespace vllm_myops::cpu

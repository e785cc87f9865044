// SPDX-License-Identifier: Apache-2.0
// Op-agnostic argument checks for the host wrappers of every op family.
//
// Each check throws a RuntimeError (TORCH_CHECK) whose message starts with
// the op's name, names the argument and says what was expected and what it
// got, so a bad call fails loudly instead of crashing or computing garbage.
#pragma once

#include <initializer_list>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "core/dtype.h"

namespace vllm_myops::checks {

// An argument as the messages name it.
using NamedTensor = std::pair<const char*, const at::Tensor*>;

// The backend is chosen from all tensor arguments (CUDA wins over CPU), so a
// mixed call arrives with `primary` on another device: names the tensor that
// differs from `primary`, which is the argument the caller got wrong as
// often. Then `primary` must live on `device` (the backend being called).
// An entry whose tensor is nullptr or undefined (an absent optional) is
// skipped.
void check_devices(const char* op, NamedTensor primary,
                   std::initializer_list<NamedTensor> others,
                   c10::DeviceType device);

// float32, float16 or bfloat16: the element types of DType.
void check_floating_dtype(const char* op, const char* name,
                          const at::Tensor& t);

// The DType of a tensor check_floating_dtype accepted.
DType to_dtype(c10::ScalarType t);

// At least `min_dim` dims; `why` says what the dims are for.
void check_min_dim(const char* op, const char* name, const at::Tensor& t,
                   int64_t min_dim, const char* why);

// `t` is defined and matches `ref` in device and dtype.
void check_same_device_and_dtype(const char* op, const char* name,
                                 const at::Tensor& t, const char* ref_name,
                                 const at::Tensor& ref);

// `t` matches `ref` in device, dtype and shape.
void check_like(const char* op, const char* name, const at::Tensor& t,
                const char* ref_name, const at::Tensor& ref);

void check_contiguous(const char* op, const char* name, const at::Tensor& t);

// A finite number >= 0 (e.g. an epsilon).
void check_finite_non_negative(const char* op, const char* name, double value);

// For a tensor written in place: no two indices may share an element.
void check_no_internal_overlap(const char* op, const char* name,
                               const at::Tensor& t);

// False only when a and b provably share no element. ATen answers "too
// hard" for any non-dense pair; then different storages cannot overlap, and
// views of one storage are taken as overlapping when their byte spans
// intersect (interleaved views of one buffer are refused rather than risked).
bool may_overlap(const at::Tensor& a, const at::Tensor& b);

// a and b share no element; `why` says why they must not.
void check_disjoint(const char* op, const char* a_name, const at::Tensor& a,
                    const char* b_name, const at::Tensor& b, const char* why);

// `out` is either exactly `in` (an elementwise op may write in place) or
// shares no element with it.
void check_no_partial_overlap(const char* op, const char* out_name,
                              const at::Tensor& out, const char* in_name,
                              const at::Tensor& in);

}  // namespace vllm_myops::checks

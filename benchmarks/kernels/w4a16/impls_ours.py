# SPDX-License-Identifier: Apache-2.0
"""The W4A16 GEMM benchmark's own implementations and their base class:
W4Impl (an implementation whose weight lives in its own layout, the anchors'
base too), the weight-bytes floor, ours (vllm_myops._custom_ops.w4a16_gemm on
w4a16_repack's layout; act-order: the served layer, w4a16_layer.w4a16_apply)
and the act-order activation gather alone. Each is fn(set) -> out [M, N]."""

from __future__ import annotations

import copy
from typing import Any

import torch

from benchmarks.common.impls import BytesPassFloor, ConvertingImpl, load_our_kernels
from benchmarks.common.sweep import Unavailable
from benchmarks.kernels.w4a16.cases import is_act, served_perm, set_zeros
from vllm_myops.quantization import reference as R


class W4Impl(ConvertingImpl):
    """An implementation whose weight lives in its own layout (converted from
    the set's interchange weight before timing)."""


class Floor(BytesPassFloor):
    name = "floor"
    description = (
        "one pass over the int4 weight bytes (act-order: + the [K] permutation) "
        "(CUDA torch.neg, CPU memcpy), timed like the op"
    )
    operand = "qweight"

    def convert(self, s, case):
        if not is_act(case):
            return super().convert(s, case)
        # The weight's words and the permutation, in one buffer of this
        # set's own (converted per set).
        flat = torch.cat([s.qweight.view(-1), served_perm(case, s.qweight.device)])
        half = flat.numel() // 2
        return flat[:half], flat[half : 2 * half]


class Ours(W4Impl):
    name = "ours"
    description = (
        "vllm_myops._custom_ops.w4a16_gemm on w4a16_repack's layout "
        "(act-order: the served layer, w4a16_layer.w4a16_apply)"
    )
    is_anchor = False

    def load(self):
        self.ops, note = load_our_kernels(
            self.device, ("w4a16_gemm", "w4a16_repack", "w4a16_permute_cols")
        )
        return note

    @staticmethod
    def layer() -> Any:
        """vllm_myops.quantization.w4a16_layer: what a served layer installs
        and runs per call (no vLLM needed; imported when first used, after
        load() has chosen the kernels)."""
        from vllm_myops.quantization import w4a16_layer

        return w4a16_layer

    def convert(self, s, case):
        k, n, group = case["k"], case["n"], case["group"]
        if not is_act(case):
            return self.ops.w4a16_repack(s.qweight, k, n)
        # MyopsW4A16GPTQLinearMethod.process_weights_after_loading's steps
        # on the checkpoint's tensors: rows permuted so groups are
        # contiguous, then install_weights (w4a16_repack) on a layer.
        perm = served_perm(case, s.qweight.device)
        codes = R.unpack_int4(s.qweight, 0, k)
        layer = torch.nn.Module()
        self.layer().install_weights(
            layer,
            R.pack_int4(codes[perm.long()], 0),
            s.scales,
            set_zeros(s),
            perm,
            k,
            n,
            group,
            s.a.dtype,
        )
        return layer

    def call(self, s, w, case):
        if is_act(case):
            # What the served layer runs per call: the activation's columns
            # gathered by w4a16_perm, then w4a16_gemm.
            return self.layer().w4a16_apply(w, s.a, None)
        return self.ops.w4a16_gemm(
            s.a, w, s.scales, set_zeros(s), None, case["k"], case["n"], case["group"]
        )

    def prepare(self, case, sets):
        if not is_act(case):
            return super().prepare(case, sets)
        # The operand is a layer (a module of parameters): every other set
        # gets a deep copy (its own memory, so still cold).
        first = None
        for s in sets:
            if self.key in s.__dict__:
                continue
            if first is None:
                w = first = self.convert(s, case)
            else:
                w = copy.deepcopy(first)
            setattr(s, self.key, w)
        return None


class Gather(W4Impl):
    name = "gather"
    description = (
        "act-order cases: ours' activation column gather alone "
        "(w4a16_permute_cols(x, w4a16_perm), as w4a16_layer.w4a16_apply runs it)"
    )
    is_anchor = False
    checked = False  # ours' check covers it

    def load(self):
        self.ops, note = load_our_kernels(self.device, ("w4a16_permute_cols",))
        return note

    def supports(self, case):
        if not is_act(case):
            raise Unavailable("plain order: nothing to gather")

    def convert(self, s, case):
        return served_perm(case, s.a.device)

    def call(self, s, w, case):
        return self.ops.w4a16_permute_cols(s.a, w)

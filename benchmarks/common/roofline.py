# SPDX-License-Identifier: Apache-2.0
"""Roofline helpers: bytes and FLOPs each op must do, the ceilings, percentages.

- Bytes models: the fewest bytes an op must move through device memory (each
  input read once, each output written once), registered by op name: each
  benchmark registers its family's (benchmarks/kernels/), generic ones here.
- FLOP models: the arithmetic an op must do, registered the same way; an op
  without one is memory-bound by definition (RMSNorm).
- Roofline: the ideal time of a case is max(bytes / bandwidth, flops / peak);
  `bound` says which roof it is under, `pct_of_roofline` how close it gets.
- Compute ceiling: a large matmul measured in the same run (bf16 through
  cuBLAS on CUDA, fp32 on CPU), FLOP/s.
- Ceiling: a large device-to-device copy measured in the same run, counting
  bytes read + written (the guide's 4.27 TB/s on the H200; datasheet 4.8).
  On CPU the same with a large memcpy (`Tensor.copy_`, which torch splits over
  all threads).
- Floor: per shape, an SM elementwise pass (`torch.neg(x, out=y)`) over the
  same bytes, timed exactly like the op (see timing.py). It includes what every
  real kernel pays at that size (launch, tail, partial waves), which the copy
  ceiling does not; % of floor is the fair "how close to the hardware" figure
  for small and odd shapes, % of ceiling for large ones.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

# Vendor datasheet HBM/DRAM bandwidth, bytes/s. Matched by substring of
# torch.cuda.get_device_name(), first match wins (so more specific first).
DATASHEET_BANDWIDTH: list[tuple[str, float]] = [
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),
    ("H800", 3.35e12),
    ("GH200", 4.0e12),
    ("B200", 8.0e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),
    ("L40S", 0.864e12),
    ("L4", 0.3e12),
]


def datasheet_bandwidth(device_name: str) -> float | None:
    for key, bw in DATASHEET_BANDWIDTH:
        if key.lower() in device_name.lower():
            return bw
    return None


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ---------------------------------------------------------------------------
# Bytes models
# ---------------------------------------------------------------------------

BytesModel = Callable[..., int]
_BYTES_MODELS: dict[str, BytesModel] = {}


def _registrar(
    models: dict[str, Callable[..., int]], name: str
) -> Callable[[Callable[..., int]], Callable[..., int]]:
    def deco(fn: Callable[..., int]) -> Callable[..., int]:
        models[name] = fn
        return fn

    return deco


def register_bytes_model(name: str) -> Callable[[BytesModel], BytesModel]:
    return _registrar(_BYTES_MODELS, name)


def bytes_moved(op: str, **shape: Any) -> int:
    """Fewest bytes `op` moves for this shape (see the registered models)."""
    try:
        model = _BYTES_MODELS[op]
    except KeyError:
        raise KeyError(
            f"no bytes model for {op!r}; known: {sorted(_BYTES_MODELS)}"
        ) from None
    return int(model(**shape))


@register_bytes_model("elementwise")
def _elementwise_bytes(numel: int, dtype: torch.dtype, passes: int = 1) -> int:
    # each pass reads numel elements and writes numel elements
    return 2 * element_size(dtype) * numel * passes


@register_bytes_model("copy")
def _copy_bytes(nbytes: int) -> int:
    return 2 * nbytes  # read + write


def known_ops() -> list[str]:
    return sorted(_BYTES_MODELS)


# ---------------------------------------------------------------------------
# FLOP models
# ---------------------------------------------------------------------------

FlopsModel = Callable[..., int]
_FLOPS_MODELS: dict[str, FlopsModel] = {}


def register_flops_model(name: str) -> Callable[[FlopsModel], FlopsModel]:
    return _registrar(_FLOPS_MODELS, name)


def flops_done(op: str, **shape: Any) -> int | None:
    """FLOPs `op` must do for this shape; None when it has no FLOP model
    (a memory-bound op: its roofline is the bytes roof alone)."""
    model = _FLOPS_MODELS.get(op)
    return None if model is None else int(model(**shape))


@register_flops_model("matmul")
def _matmul_flops(m: int, n: int, k: int) -> int:
    return 2 * m * n * k  # one multiply and one add per (m, n, k)


def roofline_time_us(
    nbytes: int,
    flops: int | None,
    bandwidth_bps: float | None,
    flops_per_s: float | None,
) -> float | None:
    """The ideal time: max(bytes / bandwidth, flops / peak) over the roofs known."""
    times = []
    if bandwidth_bps:
        times.append(nbytes / bandwidth_bps * 1e6)
    if flops and flops_per_s:
        times.append(flops / flops_per_s * 1e6)
    return max(times) if times else None


def bound(
    nbytes: int,
    flops: int | None,
    bandwidth_bps: float | None,
    flops_per_s: float | None,
) -> str | None:
    """ "memory" or "compute": the roof that sets the ideal time."""
    if not bandwidth_bps:
        return "compute" if flops and flops_per_s else None
    if not (flops and flops_per_s):
        return "memory"
    return "compute" if flops / flops_per_s > nbytes / bandwidth_bps else "memory"


def pct_of_roofline(
    nbytes: int,
    flops: int | None,
    time_us: float,
    bandwidth_bps: float | None,
    flops_per_s: float | None,
) -> float | None:
    """ideal time / time in %: 100 means on the roofline."""
    ideal = roofline_time_us(nbytes, flops, bandwidth_bps, flops_per_s)
    if ideal is None or time_us <= 0:
        return None
    return 100.0 * ideal / time_us


# ---------------------------------------------------------------------------
# Percentages
# ---------------------------------------------------------------------------


def bandwidth(nbytes: int, time_us: float) -> float:
    """Achieved bytes/s."""
    return nbytes / (time_us * 1e-6) if time_us > 0 else float("nan")


def ideal_time_us(nbytes: int, bandwidth_bps: float) -> float:
    return nbytes / bandwidth_bps * 1e6


def pct_of_ceiling(
    nbytes: int, time_us: float, bandwidth_bps: float | None
) -> float | None:
    """Achieved bandwidth as % of a ceiling (None if no ceiling)."""
    if not bandwidth_bps or time_us <= 0:
        return None
    return 100.0 * bandwidth(nbytes, time_us) / bandwidth_bps


def pct_of_floor(floor_us: float | None, time_us: float) -> float | None:
    """floor / time in %: 100 means as fast as the elementwise pass."""
    if not floor_us or time_us <= 0:
        return None
    return 100.0 * floor_us / time_us


def neg_pass(pairs: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """The floor's elementwise pass: dst = -src for every (src, dst)."""
    for src, dst in pairs:
        torch.neg(src, out=dst)


# ---------------------------------------------------------------------------
# Ceiling
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class ComputeCeiling:
    flops_per_s: float
    dtype: str
    shape: tuple[int, int, int]  # (m, n, k) of the matmul
    median_us: float
    samples: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def cpu_gemm_fallback(dtype: torch.dtype) -> str | None:
    """Why this CPU's roof for `dtype` is fp32's, or None. ATen multiplies
    bf16 / fp16 on the CPU through oneDNN only where oneDNN supports the
    type (bf16: AVX-512 BW/VL/DQ, AVX512-BF16 or AMX); elsewhere (an AVX2
    CPU) it runs its scalar reference loop, ~1.2 GFLOP/s on one core of the
    AVX2 EPYC CI machine against ~74 in fp32, where one 2048^3 ceiling
    matmul takes ~15 s. That loop is no roof: a bf16 kernel there widens to
    fp32 and runs at the fp32 FMA rate."""
    checks = {
        torch.bfloat16: ("bfloat16", torch.ops.mkldnn._is_mkldnn_bf16_supported),
        torch.float16: ("float16", torch.ops.mkldnn._is_mkldnn_fp16_supported),
    }
    if dtype not in checks:
        return None
    name, supported = checks[dtype]
    if supported():
        return None
    return (
        f"this CPU has no {name} GEMM (oneDNN {name} unsupported, ATen's "
        "reference loop instead); its kernels widen to fp32"
    )


def measure_compute_ceiling(
    device: torch.device | str,
    *,
    dtype: torch.dtype | None = None,
    n: int | None = None,
    reps: int = 20,
    warmup: int = 3,
) -> ComputeCeiling:
    """A square matmul's FLOP/s: bf16 n=8192 on CUDA (cuBLAS, events, median
    of `reps`); fp32 n=2048 on CPU (perf_counter, fastest of `reps`, as the
    copy ceiling). On a CPU without a GEMM for the reduced `dtype`
    (cpu_gemm_fallback) the roof measured is fp32's, and `method` says why."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    dtype = dtype or (torch.bfloat16 if cuda else torch.float32)
    n = n or (8192 if cuda else 2048)
    fallback = None if cuda else cpu_gemm_fallback(dtype)
    if fallback is not None:
        dtype = torch.float32
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    out = torch.empty(n, n, dtype=dtype, device=device)
    for _ in range(warmup):
        torch.matmul(a, b, out=out)
    times = []
    if cuda:
        evs = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(reps)
        ]
        for start, end in evs:
            start.record()
            torch.matmul(a, b, out=out)
            end.record()
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) * 1e3 for start, end in evs]
        t_us, how = statistics.median(times), "cuBLAS torch.matmul, events, median"
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.matmul(a, b, out=out)
            times.append((time.perf_counter() - t0) * 1e6)
        t_us = min(times)
        how = f"cpu torch.matmul ({torch.get_num_threads()} threads), fastest of {reps}"
        if fallback is not None:
            how += f"; float32: {fallback}"
    flops = flops_done("matmul", m=n, n=n, k=n) or 0
    return ComputeCeiling(
        flops_per_s=flops / (t_us * 1e-6),
        dtype=str(dtype).replace("torch.", ""),
        shape=(n, n, n),
        median_us=t_us,
        samples=reps,
        method=how,
    )


@dataclasses.dataclass
class Ceiling:
    bandwidth_bps: float  # bytes read + written per second
    nbytes: int  # size of the copied buffer (bytes moved = 2x)
    median_us: float
    samples: int
    method: str
    datasheet_bps: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def measure_copy_ceiling(
    device: torch.device | str,
    nbytes: int | None = None,
    *,
    reps: int = 20,
    warmup: int = 3,
) -> Ceiling:
    """Large same-device copy (`dst.copy_(src)`), bytes read + written.

    CUDA: 2 GiB (a few GB of traffic per copy, far above L2), timed with
    events, median of `reps`; also records an SM elementwise pass
    (torch.neg) over the same buffer in `extra` for reference. CPU: 256 MiB
    (8x a typical L3), perf_counter, fastest of `reps` (median in `extra`).
    """
    device = torch.device(device)
    if device.type == "cuda":
        nbytes = nbytes or 2 * 1024**3
        n = nbytes // 2
        src = torch.empty(n, dtype=torch.bfloat16, device=device).uniform_(-1, 1)
        dst = torch.empty_like(src)

        def timed(fn: Callable[[], Any]) -> list[float]:
            for _ in range(warmup):
                fn()
            evs = [
                (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                for _ in range(reps)
            ]
            for a, b in evs:
                a.record()
                fn()
                b.record()
            torch.cuda.synchronize()
            return [a.elapsed_time(b) * 1e3 for a, b in evs]

        copy_us = timed(lambda: dst.copy_(src))
        neg_us = timed(lambda: torch.neg(src, out=dst))
        med = statistics.median(copy_us)
        moved = 2 * n * 2
        name = torch.cuda.get_device_name(device)
        res = Ceiling(
            bandwidth_bps=moved / (med * 1e-6),
            nbytes=n * 2,
            median_us=med,
            samples=reps,
            method="cuda Tensor.copy_ (device-to-device), events, median",
            datasheet_bps=datasheet_bandwidth(name),
            extra={
                "neg_pass_bandwidth_bps": moved / (statistics.median(neg_us) * 1e-6),
                "neg_pass_median_us": statistics.median(neg_us),
            },
        )
        del src, dst
        torch.cuda.empty_cache()
        return res

    nbytes = nbytes or 256 * 1024**2
    src = torch.empty(nbytes, dtype=torch.uint8).random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(warmup):
        dst.copy_(src)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append((time.perf_counter() - t0) * 1e6)
    med, best = statistics.median(times), min(times)
    # On a small shared CPU box the median moves with whatever else runs; the
    # fastest copy is what the memory system can do, so it is the ceiling.
    return Ceiling(
        bandwidth_bps=2 * nbytes / (best * 1e-6),
        nbytes=nbytes,
        median_us=best,
        samples=reps,
        method=f"cpu Tensor.copy_ (memcpy, {torch.get_num_threads()} threads), fastest of {reps}",
        datasheet_bps=None,
        extra={"median_bandwidth_bps": 2 * nbytes / (med * 1e-6), "median_us": med},
    )

# SPDX-License-Identifier: Apache-2.0
"""Timers shared by the kernel benchmarks: one method for every implementation.

GPU (the reported numbers): `time_cuda_graph`. One CUDA graph calls the
function once on each of K buffer sets whose total size is more than 3x the
L2 cache (read off the device), so every call finds its data in HBM, as in a
model where other layers ran in between. The graph is replayed; each replay is
timed with CUDA events, and the time per call is replay time / K. We report
the median and p90 over replays. Launch gaps inside a graph are what a vLLM
decode step (which runs under CUDA graphs) sees, so tiny shapes are measured
the way they run in production.

Also available, labelled differently in results:
- `time_do_bench`: eager calls through `triton.testing.do_bench`, which flushes
  L2 (writes a 256 MB buffer) before every call. Includes eager launch cost.
- `time_cpu`: a perf_counter loop over rotating sets (> 3x the last-level
  cache), warm-up, median and p90 over passes. torch.utils.benchmark.Timer is
  not used because it pins torch to 1 thread unless told otherwise, and the
  CPU kernels are meant to use every core.
- `time_dry_run`: the CPU loop with a tiny budget, to exercise a GPU
  benchmark's plumbing on a machine without a GPU. Its numbers mean nothing.

Buffer sets: `alloc_sets` carves K sets out of one flat allocation per tensor,
each view starting on a 256-byte boundary (like a fresh allocation from the
caching allocator), so creating 20k small sets costs a handful of kernels and
unaligned widths (5125) do not start their sets at unaligned addresses.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import torch

# Default factor: the working set of one graph must exceed this many times the
# last-level cache (L2 on a GPU, L3 on a CPU).
CACHE_FACTOR = 3.0
# Upper bound on sets in one graph: beyond this capture/instantiate time grows
# past a second and the working set is already far above L2 for any shape
# where it matters. Exposed so a benchmark can report when it hits it.
MAX_SETS = 32768
ALIGN_BYTES = 256


@dataclasses.dataclass
class Timing:
    """Per-call time statistics of one measurement, in microseconds."""

    median_us: float
    p90_us: float
    min_us: float
    mean_us: float
    samples: int  # timed samples (graph replays, timer passes, do_bench calls)
    calls_per_sample: int  # K: calls (buffer sets) per sample
    method: str  # cuda_graph | do_bench_l2_flush | cpu_loop | dry_run
    working_set_bytes: int = 0  # bytes of all K sets together
    cache_bytes: int | None = None  # L2 (GPU) or LLC (CPU) size used to pick K
    setup_s: float = 0.0  # capture + instantiate (graph) or warm-up time
    total_s: float = 0.0  # wall time of the whole measurement
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def cache_coverage(self) -> float | None:
        """Working set over cache size (> CACHE_FACTOR means cold-cache)."""
        if not self.cache_bytes:
            return None
        return self.working_set_bytes / self.cache_bytes


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (q in [0, 100]), numpy's default."""
    if not values:
        return float("nan")
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(per_call_us: Sequence[float], **kw: Any) -> Timing:
    return Timing(
        median_us=statistics.median(per_call_us),
        p90_us=percentile(per_call_us, 90),
        min_us=min(per_call_us),
        mean_us=statistics.fmean(per_call_us),
        samples=len(per_call_us),
        **kw,
    )


# ---------------------------------------------------------------------------
# Cache sizes and the number of buffer sets
# ---------------------------------------------------------------------------


def cuda_l2_bytes(device: torch.device | int | None = None) -> int:
    props = torch.cuda.get_device_properties(device if device is not None else 0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    return l2 if l2 > 0 else 60 * 1024 * 1024  # H200's, if torch cannot say


def cpu_llc_bytes() -> int:
    """Largest cache of cpu0 from sysfs (the L3 on x86), 32 MiB if unknown."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            if not entry.startswith("index"):
                continue
            try:
                with open(os.path.join(base, entry, "size")) as f:
                    text = f.read().strip().upper()
                with open(os.path.join(base, entry, "type")) as f:
                    if f.read().strip() == "Instruction":
                        continue
            except OSError:
                continue
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
            num = text[:-1] if text[-1:] in "KMG" else text
            best = max(best, int(num) * mult)
    except OSError:
        pass
    return best or 32 * 1024 * 1024


def cache_bytes_for(device: torch.device) -> int:
    return cuda_l2_bytes(device) if device.type == "cuda" else cpu_llc_bytes()


def num_buffer_sets(
    bytes_per_set: int,
    cache_bytes: int,
    *,
    factor: float = CACHE_FACTOR,
    min_sets: int = 2,
    max_sets: int = MAX_SETS,
    max_total_bytes: int | None = None,
) -> int:
    """Smallest K with K * bytes_per_set > factor * cache_bytes, clamped.

    min_sets=2 keeps consecutive calls on different buffers even when one set
    alone is far larger than the cache. max_total_bytes (free memory budget)
    wins over min_sets' cold-cache goal but never goes below 1.
    """
    bytes_per_set = max(1, int(bytes_per_set))
    k = int(factor * cache_bytes // bytes_per_set) + 1
    k = max(min_sets, min(k, max_sets))
    if max_total_bytes is not None:
        k = max(1, min(k, int(max_total_bytes // bytes_per_set)))
    return k


# ---------------------------------------------------------------------------
# Buffer sets
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class TensorSpec:
    """One tensor of a buffer set.

    init: "randn" (x * scale + offset with x ~ N(0, 1)), "uniform"
    (U[-1, 1) * scale + offset), "empty", "nan" (poisoned), "zeros",
    "randbits" (integer dtypes: uniformly random bit patterns over the whole
    width, e.g. packed int4 codes, every code equally likely).
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    init: str = "randn"
    scale: float = 1.0
    offset: float = 0.0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.dtype).element_size()


def set_bytes(specs: dict[str, TensorSpec]) -> int:
    return sum(s.nbytes for s in specs.values())


def _aligned_numel(spec: TensorSpec) -> int:
    esize = torch.empty((), dtype=spec.dtype).element_size()
    per = max(1, ALIGN_BYTES // esize)
    return max(per, -(-spec.numel // per) * per)


def alloc_sets(
    specs: dict[str, TensorSpec],
    k: int,
    device: torch.device | str,
    *,
    generator: torch.Generator | None = None,
) -> list[SimpleNamespace]:
    """K buffer sets; set i has one attribute per spec name.

    All K tensors of one spec share one flat allocation; each view starts on
    an ALIGN_BYTES boundary and is contiguous. Initialised with one kernel per
    spec (never zeros unless asked: zeros hide unwritten outputs and can run
    faster than real data).
    """
    device = torch.device(device)
    flats: dict[str, tuple[torch.Tensor, int]] = {}
    for name, spec in specs.items():
        stride = _aligned_numel(spec)
        flat = torch.empty(k * stride, dtype=spec.dtype, device=device)
        if spec.init == "randn":
            flat.normal_(generator=generator)
        elif spec.init == "uniform":
            flat.uniform_(-1.0, 1.0, generator=generator)
        elif spec.init == "nan":
            flat.fill_(float("nan"))
        elif spec.init == "zeros":
            flat.zero_()
        elif spec.init == "randbits":
            info = torch.iinfo(spec.dtype)
            flat.random_(info.min, info.max + 1, generator=generator)
        elif spec.init != "empty":
            raise ValueError(f"unknown init {spec.init!r}")
        if spec.init in ("randn", "uniform") and (
            spec.scale != 1.0 or spec.offset != 0.0
        ):
            flat.mul_(spec.scale).add_(spec.offset)
        flats[name] = (flat, stride)
    sets = []
    for i in range(k):
        ns = SimpleNamespace()
        for name, spec in specs.items():
            flat, stride = flats[name]
            view = flat[i * stride : i * stride + spec.numel].view(spec.shape)
            setattr(ns, name, view)
        sets.append(ns)
    return sets


# ---------------------------------------------------------------------------
# Timers
# ---------------------------------------------------------------------------


def time_cuda_graph(
    fn: Callable[[Any], Any],
    sets: Sequence[Any],
    *,
    warmup_calls: int = 3,
    warmup_replays: int = 2,
    min_replays: int = 5,
    max_replays: int = 200,
    target_s: float = 0.25,
    working_set_bytes: int = 0,
    cache_bytes: int | None = None,
) -> Timing:
    """Median/p90 per-call time of fn over `sets` inside one replayed CUDA graph.

    fn(set) is called eagerly a few times first (on a side stream, as graph
    capture requires: lazy init, Triton/Inductor compilation and autotuning
    happen there), then once per set during capture. Return values are kept
    alive until the graph is gone so out-of-place implementations write to K
    distinct outputs like in-place ones do (otherwise the graph pool would hand
    every call the same freed block, which stays in L2).

    The number of timed replays adapts to `target_s` from the warm-up replays'
    time, between min_replays and max_replays, so a sweep's duration is
    predictable.
    """
    if not sets:
        raise ValueError("no buffer sets")
    t_start = time.perf_counter()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(min(warmup_calls, len(sets))):
            fn(sets[i])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    keep: list[Any] = []
    with torch.cuda.graph(graph):
        for s in sets:
            keep.append(fn(s))
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - t_start

    stream = torch.cuda.current_stream()

    def timed_replays(n: int) -> list[float]:
        evs = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(n)
        ]
        for start, end in evs:
            start.record(stream)
            graph.replay()
            end.record(stream)
        torch.cuda.synchronize()
        return [start.elapsed_time(end) * 1e-3 for start, end in evs]  # seconds

    try:
        warm = timed_replays(max(1, warmup_replays))
        est = max(statistics.median(warm), 1e-7)
        n = int(min(max_replays, max(min_replays, math.ceil(target_s / est))))
        replay_s = timed_replays(n)
    finally:
        graph.reset()  # frees the graph and its memory pool
        keep.clear()
    k = len(sets)
    per_call_us = [t * 1e6 / k for t in replay_s]
    return summarize(
        per_call_us,
        calls_per_sample=k,
        method="cuda_graph",
        working_set_bytes=working_set_bytes,
        cache_bytes=cache_bytes,
        setup_s=setup_s,
        total_s=time.perf_counter() - t_start,
    )


def time_do_bench(
    fn: Callable[[Any], Any],
    sets: Sequence[Any],
    *,
    warmup_ms: float = 25,
    rep_ms: float = 100,
    working_set_bytes: int = 0,
    cache_bytes: int | None = None,
) -> Timing:
    """Eager calls on sets[0] via triton.testing.do_bench (L2 flushed before
    each call, each call timed with events); median/p90/min over its per-call
    times. Includes eager launch cost. Raises ImportError without triton."""
    import triton.testing  # noqa: PLC0415  (optional dependency)

    t_start = time.perf_counter()
    s0 = sets[0]
    try:
        ms = [
            float(v)
            for v in triton.testing.do_bench(
                lambda: fn(s0), warmup=warmup_ms, rep=rep_ms, return_mode="all"
            )
        ]
        p50, p90, mn, mean = (
            statistics.median(ms) * 1e3,
            percentile(ms, 90) * 1e3,
            min(ms) * 1e3,
            statistics.fmean(ms) * 1e3,
        )
        samples = len(ms)
    except (AssertionError, TypeError):  # an older triton without return_mode="all"
        q = triton.testing.do_bench(
            lambda: fn(s0), warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.9, 0.0]
        )
        p50, p90, mn = (float(v) * 1e3 for v in q)
        mean, samples = p50, -1
    return Timing(
        median_us=p50,
        p90_us=p90,
        min_us=mn,
        mean_us=mean,
        samples=samples,
        calls_per_sample=1,
        method="do_bench_l2_flush",
        working_set_bytes=working_set_bytes,
        cache_bytes=cache_bytes,
        total_s=time.perf_counter() - t_start,
    )


def time_cpu(
    fn: Callable[[Any], Any],
    sets: Sequence[Any],
    *,
    warmup_s: float = 0.05,
    target_s: float = 0.5,
    min_samples: int = 5,
    max_samples: int = 200,
    min_sample_s: float = 1e-3,
    working_set_bytes: int = 0,
    cache_bytes: int | None = None,
    method: str = "cpu_loop",
) -> Timing:
    """Per-call time of fn over rotating sets with time.perf_counter.

    One sample = `inner` passes over all K sets (inner chosen so a sample lasts
    at least min_sample_s, far above the timer's resolution); per-call time =
    sample time / (inner * K). Warm-up runs at least one full pass (first-touch
    page faults, lazy init) and until warmup_s. The garbage collector is off
    while timing.
    """
    if not sets:
        raise ValueError("no buffer sets")
    k = len(sets)
    t_start = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        passes = 0
        t0 = time.perf_counter()
        while True:
            for s in sets:
                fn(s)
            passes += 1
            if time.perf_counter() - t0 >= warmup_s:
                break
        pass_s = (time.perf_counter() - t0) / passes
        setup_s = time.perf_counter() - t_start
        inner = max(1, math.ceil(min_sample_s / max(pass_s, 1e-9)))
        sample_s = pass_s * inner
        n = int(
            min(
                max_samples, max(min_samples, math.ceil(target_s / max(sample_s, 1e-9)))
            )
        )
        per_call_us = []
        for _ in range(n):
            t0 = time.perf_counter()
            for _ in range(inner):
                for s in sets:
                    fn(s)
            per_call_us.append((time.perf_counter() - t0) * 1e6 / (inner * k))
    finally:
        if gc_was_enabled:
            gc.enable()
    return summarize(
        per_call_us,
        calls_per_sample=k * inner,
        method=method,
        working_set_bytes=working_set_bytes,
        cache_bytes=cache_bytes,
        setup_s=setup_s,
        total_s=time.perf_counter() - t_start,
    )


def time_dry_run(fn: Callable[[Any], Any], sets: Sequence[Any], **kw: Any) -> Timing:
    """Plumbing check without a GPU: the CPU loop with a tiny budget."""
    kw.setdefault("target_s", 0.01)
    kw.setdefault("warmup_s", 0.0)
    kw.setdefault("min_samples", 3)
    kw.setdefault("max_samples", 5)
    kw.setdefault("min_sample_s", 0.0)
    return time_cpu(fn, sets, method="dry_run", **kw)


def describe_method(method: str) -> str:
    return {
        "cuda_graph": "CUDA graph over K rotating buffer sets (> 3x L2), replayed; per call = replay / K",
        "do_bench_l2_flush": "eager triton.testing.do_bench, L2 flushed before each call (includes launch cost)",
        "cpu_loop": "perf_counter loop over K rotating buffer sets (> 3x LLC); per call = pass / K",
        "dry_run": "DRY RUN on CPU tensors: plumbing check only, numbers are meaningless",
    }.get(method, method)


def load_average() -> list[float] | None:
    """The host's 1/5/15-minute load averages (CPU figures on a shared box
    mean little without them), or None where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None

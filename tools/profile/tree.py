# SPDX-License-Identifier: Apache-2.0
"""The kernel-level decision tree, as data.

Seed 000's fixed reading order (speed of light -> memory workload -> warp
stalls -> occupancy) as a table of rules. A rule belongs to a node; the
rules of a node are tried in order and the first whose conditions all hold
fires: it either ends the walk (verdict + next change) or hands over to
another node (``goto``). A condition on a fact the report does not have is
false (the walk records the fact as missing), so a report without a section
falls through to the rules it can still answer. The last rule of every node
has no condition.

Facts are the names tools/profile/triage.py derives from an ncu row and the
case's bytes/FLOPs model (FACTS below says where each comes from). Verdict
and next-change texts are ``str.format`` templates over the facts.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Where each fact comes from: the ncu metric(s) or the model. Printed with
# the evidence so a reader can find the number in ncu's own report.
FACTS: dict[str, str] = {
    "time_us": "gpu__time_duration.sum",
    "roof_pct": "roof time / kernel time (bytes / measured copy ceiling, FLOPs / measured compute ceiling)",
    "dram_ceiling_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed x datasheet / measured ceiling",
    "memory_dominant": "bytes model (bytes roof >= FLOPs roof) or SOL memory % >= SOL SM %",
    "sol_mem_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sol_sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "bytes_over_model": "(dram__bytes_read.sum + dram__bytes_write.sum) / model bytes",
    "ld_sectors_per_req": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "st_sectors_per_req": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum / l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active (achieved)",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct (or from launch__occupancy_limit_*)",
    "achieved_over_theoretical": "achieved / theoretical occupancy",
    "waves": "launch__waves_per_multiprocessor (or grid / (SMs x blocks per SM))",
    "eligible_warps": "smsp__warps_eligible.avg.per_cycle_active",
    "issue_active_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "tensor_pipe_pct": "sm__pipe_tensor*_cycles_active.avg.pct_of_peak_sustained_active",
    "top_pipe_pct": "sm__inst_executed_pipe_*/sm__pipe_*_cycles_active .avg.pct_of_peak_sustained_active (busiest non-tensor pipe)",
    "flops_per_byte": "model FLOPs / model bytes (arithmetic intensity)",
    "bank_conflicts_per_wavefront": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum / l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
}
STALLS = (
    "long_scoreboard", "barrier", "mio_throttle", "short_scoreboard", "lg_throttle",
    "wait", "not_selected", "math_pipe_throttle", "no_instruction", "imc_miss",
    "membar", "drain", "dispatch_stall", "branch_resolving", "tex_throttle", "sleeping",
    "selected", "misc",
)  # fmt: skip
for _s in STALLS:
    FACTS[f"stall_{_s}_pct"] = (
        f"smsp__average_warps_issue_stalled_{_s}_per_issue_active.ratio / "
        "smsp__average_warp_latency_per_inst_issued.ratio (share of a warp's cycles)"
    )

OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
}


@dataclass(frozen=True)
class Cond:
    fact: str
    op: str  # one of OPS, or "missing" (true when the report lacks the fact)
    value: float = 0.0

    def holds(self, facts: Mapping[str, Any]) -> bool | None:
        """True/False, or None when the fact is missing (counts as False)."""
        v = facts.get(self.fact)
        if self.op == "missing":
            return v is None
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        return OPS[self.op](v, self.value)

    def text(self) -> str:
        return "missing" if self.op == "missing" else f"{self.op} {self.value:g}"


@dataclass(frozen=True)
class Rule:
    id: str
    node: str
    when: tuple[Cond, ...]
    verdict: str
    next_change: str = ""
    why: str = ""
    goto: str | None = None  # another node; None: the walk ends here


def C(fact: str, op: str, value: float = 0.0) -> Cond:
    return Cond(fact, op, value)


# Thresholds, named once: the tests and docs/project/design.md quote them.
NEAR_ROOF_PCT = (
    95.0  # the project's floor targets are 97%; ncu's isolated runs cost a few %
)
# Faster than the model allows by more than ncu's noise and a ceiling measured a
# few % low: the model is not this kernel's work (a stand-in such as the
# benchmark's copy floor judged against a compute-bound case's FLOPs).
MODEL_EXCEEDED_PCT = 130.0
LATENCY_SOL_PCT = 60.0  # ncu's own rule: neither SOL above 60% -> latency issue
EXTRA_BYTES = 1.25
FULL_SECTORS = 4.0  # 4-byte lanes of a full warp: 128 B = 4 sectors per request
FEW_WARPS_PCT = 40.0
MEM_FEW_WARPS_PCT = 50.0
DOMINANT_STALL_PCT = 40.0
STALL_PCT = 30.0
SMALL_GRID_WAVES = 0.5
BUSY_PIPE_PCT = 80.0
IDLE_TENSOR_PCT = 30.0
MATMUL_FLOPS_PER_BYTE = 30.0  # a GEMM-like op (tensor cores apply); RMSNorm is ~1

RULES: tuple[Rule, ...] = (
    # ---- root: which bound -------------------------------------------------
    Rule(
        "model_exceeded",
        "root",
        (C("roof_pct", ">=", MODEL_EXCEEDED_PCT),),
        "the op's model does not describe this kernel: its {bound} roof ({roof_us:.2f} us) is "
        "{roof_pct:.0f}% of the kernel's {time_us:.2f} us",
        "profile it with its own work (--bytes / --flops), or check the benchmark's bytes/FLOPs model",
        "no kernel beats the roof of the work it does: this one does less than the op (a stand-in, a helper kernel) or the model counts too much",
    ),
    Rule(
        "at_roof",
        "root",
        (C("roof_pct", ">=", NEAR_ROOF_PCT),),
        "at the roof: {roof_pct:.0f}% of the {bound} roof ({roof_us:.2f} us of {time_us:.2f} us)",
        "stop: nothing left in this kernel; look elsewhere (fusion, fewer bytes in the op itself)",
        "the bytes/FLOPs model at the measured ceiling says no implementation can be much faster",
    ),
    Rule(
        "at_roof_dram",
        "root",
        (C("roof_pct", "missing"), C("dram_ceiling_pct", ">=", NEAR_ROOF_PCT)),
        "at the memory roof: DRAM at {dram_ceiling_pct:.0f}% of the measured ceiling (no bytes model)",
        "stop if those bytes are all needed: give --benchmark/--bytes to check DRAM bytes against the model",
        "without a model only DRAM throughput says how close it is; it cannot tell needed bytes from extra ones",
    ),
    Rule(
        "latency_bound",
        "root",
        (C("sol_mem_pct", "<", LATENCY_SOL_PCT), C("sol_sm_pct", "<", LATENCY_SOL_PCT)),
        "latency-bound: neither memory ({sol_mem_pct:.0f}%) nor SM ({sol_sm_pct:.0f}%) throughput reaches 60% of peak",
        goto="latency",
        why="no unit is busy, so warps are waiting: the stall reasons and the occupancy say on what",
    ),
    Rule(
        "memory_bound",
        "root",
        (C("memory_dominant", "==", 1),),
        "memory-bound, far from the roof{roof_note}",
        goto="memory",
        why="the bytes roof is the larger one (or memory throughput leads SM throughput)",
    ),
    Rule(
        "compute_bound",
        "root",
        (C("memory_dominant", "==", 0),),
        "compute-bound, far from the roof{roof_note}",
        goto="compute",
        why="the FLOPs roof is the larger one (or SM throughput leads memory throughput)",
    ),
    Rule(
        "bound_unknown",
        "root",
        (),
        "bound unknown (no SpeedOfLight section, no bytes model): reading the stalls",
        goto="latency",
        why="without SOL figures or a model only stalls and occupancy are left",
    ),
    # ---- memory-bound, far from the roof -----------------------------------
    Rule(
        "extra_bytes_l2_miss",
        "memory",
        (C("bytes_over_model", ">=", EXTRA_BYTES), C("l2_hit_pct", "<", 50.0)),
        "moves {bytes_over_model:.2f}x the model's bytes and L2 hits only {l2_hit_pct:.0f}%: re-reads go to DRAM",
        "keep reused data on chip: tile so a block reuses what it loaded (shared memory), or order blocks so re-reads hit L2",
        "DRAM bytes above the model are re-reads or over-fetch; a low L2 hit rate says the re-reads miss L2",
    ),
    Rule(
        "extra_bytes",
        "memory",
        (C("bytes_over_model", ">=", EXTRA_BYTES),),
        "moves {bytes_over_model:.2f}x the model's bytes: uncoalesced or over-fetched sectors ({ld_sectors_per_req_s} sectors per load request)",
        "coalesce: a warp's lanes read one contiguous, aligned run (16 bytes per lane); check ncu's Source page for the access",
        "every byte above the model costs DRAM time; sectors touched but not used are the usual source",
    ),
    Rule(
        "narrow_loads",
        "memory",
        (C("ld_sectors_per_req", "<", FULL_SECTORS),),
        "narrow global loads: {ld_sectors_per_req:.1f} sectors per request (< 4: under 4 bytes per lane)",
        "vectorise: 16-byte loads per lane (8 bf16), the unaligned head/tail handled apart",
        "a full warp of 4-byte loads is 4 sectors per request, 16-byte loads 16; fewer means more requests per byte",
    ),
    Rule(
        "few_bytes_in_flight_warps",
        "memory",
        (
            C("occupancy_pct", "<", MEM_FEW_WARPS_PCT),
            C("stall_long_scoreboard_pct", ">=", STALL_PCT),
        ),
        "memory-bound far from the roof with too few bytes in flight: achieved occupancy {occupancy_pct:.0f}%, long_scoreboard {stall_long_scoreboard_pct:.0f}% of warp cycles",
        "raise bytes in flight (occupancy x loads in flight per thread): more loads in flight per thread (all of a row's loads before the first use, unroll, cp.async/TMA) or more warps (limiter: {limiter})",
        "Little's law: DRAM bandwidth x latency bytes must be in flight per SM; few warps each waiting on a load cannot cover it",
    ),
    Rule(
        "few_loads_per_thread",
        "memory",
        (C("stall_long_scoreboard_pct", ">=", STALL_PCT),),
        "memory-bound far from the roof, enough warps ({occupancy_pct_s}% occupancy) but each waits on its load: too few loads in flight per thread",
        "more independent loads per thread before the first use (unroll, vector loads, prefetch the next tile, cp.async pipeline)",
        "with many warps resident, bytes in flight can only grow per thread",
    ),
    Rule(
        "l2_bound",
        "memory",
        (C("l2_pct", ">=", BUSY_PIPE_PCT),),
        "L2-bound: L2 throughput {l2_pct:.0f}% of peak",
        "cut L2 traffic: reuse in shared memory/registers, fewer atomics/partial-sum round trips through L2",
        "DRAM is not the busy unit, L2 is",
    ),
    Rule(
        "memory_other",
        "memory",
        (),
        "memory-bound far from the roof with no memory-side cause in the report: reading the stalls",
        goto="latency",
        why="bytes are as counted and coalesced: the time is lost waiting, not moving",
    ),
    # ---- latency-bound: stalls against occupancy limiters ------------------
    Rule(
        "small_grid",
        "latency",
        (C("waves", "<", SMALL_GRID_WAVES),),
        "too little parallel work: {grid_s} blocks fill {waves:.2f} of a wave on the GPU (launch/latency-bound)",
        "give the GPU more blocks (split rows/K across blocks) or fuse the op into its neighbour; inside a model, CUDA graphs and PDL hide the launch",
        "with most SMs idle no in-kernel change can reach the bandwidth; the time is one launch plus one memory round trip",
    ),
    Rule(
        "long_scoreboard_few_warps",
        "latency",
        (
            C("stall_long_scoreboard_pct", ">=", DOMINANT_STALL_PCT),
            C("occupancy_pct", "<", FEW_WARPS_PCT),
        ),
        "latency-bound on global loads with too few warps: achieved occupancy {occupancy_pct:.0f}%, long_scoreboard {stall_long_scoreboard_pct:.0f}% of warp cycles",
        "raise bytes in flight (more loads in flight per thread / more warps: limiter {limiter})",
        "long_scoreboard is a wait on global (L1TEX) data; with few warps there is no other warp to issue meanwhile",
    ),
    Rule(
        "long_scoreboard",
        "latency",
        (C("stall_long_scoreboard_pct", ">=", DOMINANT_STALL_PCT),),
        "latency-bound on global loads with enough warps ({occupancy_pct_s}% occupancy): too few loads in flight per thread",
        "issue a thread's independent loads before their first use (unroll, vector loads, cp.async/TMA prefetch of the next tile)",
        "warps are resident but each serialises load -> use -> load",
    ),
    Rule(
        "barrier",
        "latency",
        (C("stall_barrier_pct", ">=", STALL_PCT),),
        "barrier-bound: {stall_barrier_pct:.0f}% of warp cycles at __syncthreads (block {block_s} threads, {blocks_per_sm_s} blocks per SM)",
        "fewer block-wide syncs (warp-shuffle reductions, one sync per reduction), smaller blocks, or more resident blocks so others run across a barrier (limiter: {limiter})",
        "a block waits for its slowest warp at each barrier; few resident blocks leave the SM idle meanwhile",
    ),
    Rule(
        "mio_throttle",
        "latency",
        (C("stall_mio_throttle_pct", ">=", STALL_PCT),),
        "MIO-throttled: {stall_mio_throttle_pct:.0f}% of warp cycles waiting for the shared-memory/special-function queue",
        "fewer, wider shared-memory instructions (128-bit, ldmatrix), remove bank conflicts (pad/swizzle), move shuffles/transcendentals out of the loop",
        "the MIO queue is full: too many shared-memory, shuffle or MUFU instructions per cycle",
    ),
    Rule(
        "short_scoreboard",
        "latency",
        (C("stall_short_scoreboard_pct", ">=", STALL_PCT),),
        "waiting on shared memory / MUFU results: short_scoreboard {stall_short_scoreboard_pct:.0f}% of warp cycles",
        "issue shared-memory loads earlier (software pipelining), remove bank conflicts, fewer dependent special-function ops",
        "short_scoreboard is a wait on an MIO result (shared memory, shuffles, MUFU)",
    ),
    Rule(
        "lg_throttle",
        "latency",
        (C("stall_lg_throttle_pct", ">=", STALL_PCT),),
        "LSU queue full of global memory instructions: lg_throttle {stall_lg_throttle_pct:.0f}%",
        "fewer, wider global accesses: vectorise to 16 bytes per lane, keep small values in registers",
        "too many small global load/store instructions per byte",
    ),
    Rule(
        "wait",
        "latency",
        (C("stall_wait_pct", ">=", STALL_PCT),),
        "fixed-latency dependencies: wait {stall_wait_pct:.0f}% of warp cycles",
        "more instruction-level parallelism: independent chains per thread (unroll, several accumulators)",
        "each instruction waits for the previous one's fixed latency; more warps or ILP hide it",
    ),
    Rule(
        "math_pipe",
        "latency",
        (C("stall_math_pipe_throttle_pct", ">=", STALL_PCT),),
        "waiting on a busy math pipe: math_pipe_throttle {stall_math_pipe_throttle_pct:.0f}%",
        goto="compute",
        why="the warps are throttled by an execution pipe: a compute question",
    ),
    Rule(
        "not_selected",
        "latency",
        (C("stall_not_selected_pct", ">=", 20.0),),
        "issue-bound, not latency-bound: not_selected {stall_not_selected_pct:.0f}% (eligible warps wait their turn)",
        "cut instructions per byte/FLOP (vectorise, hoist index math, fewer conversions); more warps will not help",
        "not_selected means another warp issued: the scheduler is busy",
    ),
    Rule(
        "instruction_fetch",
        "latency",
        (C("stall_no_instruction_pct", ">=", STALL_PCT),),
        "instruction fetch stalls: no_instruction {stall_no_instruction_pct:.0f}%",
        "smaller code in the hot loop (less unrolling / fewer template instantiations inlined), fewer divergent branches",
        "the warp has no decoded instruction: instruction cache misses or branch targets",
    ),
    Rule(
        "few_warps",
        "latency",
        (C("occupancy_pct", "<", FEW_WARPS_PCT),),
        "latency-bound with few warps: achieved occupancy {occupancy_pct:.0f}%, top stall {top_stall}",
        "more warps per SM (limiter: {limiter}) or more independent work per warp",
        "no stall reason dominates; too few warps to hide any of them",
    ),
    Rule(
        "latency_other",
        "latency",
        (),
        "latency-bound, no dominant stall (top: {top_stall})",
        "read ncu's Source page for the hot instructions of the top stall",
        "the tree has no rule for this mix",
    ),
    # ---- compute-bound -------------------------------------------------------
    Rule(
        "no_tensor_cores",
        "compute",
        (
            C("flops_per_byte", ">=", MATMUL_FLOPS_PER_BYTE),
            C("tensor_pipe_pct", "<", IDLE_TENSOR_PCT),
            C("top_pipe_pct", ">=", 60.0),
        ),
        "compute-bound on the {top_pipe} pipe ({top_pipe_pct:.0f}%) with tensor cores idle ({tensor_pipe_pct:.0f}%)",
        "move the inner products to tensor cores (mma.sync / wgmma) and keep the {top_pipe} pipe for the epilogue",
        "the FLOPs roof is the tensor-core one; CUDA-core FMA/ALU peaks are ~15x lower on sm_90",
    ),
    Rule(
        "tensor_saturated",
        "compute",
        (C("tensor_pipe_pct", ">=", BUSY_PIPE_PCT),),
        "tensor pipe near saturation ({tensor_pipe_pct:.0f}%)",
        "stop for this instruction form, or a faster one: wgmma over mma.sync, fp8",
        "the unit that does the FLOPs is busy",
    ),
    Rule(
        "pipe_saturated",
        "compute",
        (C("top_pipe_pct", ">=", BUSY_PIPE_PCT),),
        "the {top_pipe} pipe is saturated ({top_pipe_pct:.0f}%)",
        "cut instructions on the {top_pipe} pipe: conversions, index math, predication, scale/zero arithmetic per element",
        "one pipe sets the time; work on other pipes is free until it is relieved",
    ),
    Rule(
        "issue_bound",
        "compute",
        (C("issue_active_pct", ">=", BUSY_PIPE_PCT),),
        "instruction-issue-bound: the schedulers issue {issue_active_pct:.0f}% of cycles",
        "fewer instructions per byte/FLOP: vectorise, larger tiles per thread, hoist loop-invariant math",
        "every cycle issues an instruction; only fewer instructions make it faster",
    ),
    Rule(
        "compute_other",
        "compute",
        (),
        "compute-side time without a saturated pipe: reading the stalls",
        goto="latency",
        why="no pipe is full, so warps wait",
    ),
)

NODES = tuple(dict.fromkeys(r.node for r in RULES))


@dataclass
class Step:
    rule: Rule
    evidence: list[tuple[str, Any, str]]  # (fact, value, condition)
    text: str


@dataclass
class Verdict:
    steps: list[Step]
    missing: list[str] = field(default_factory=list)

    @property
    def final(self) -> Step:
        return self.steps[-1]

    @property
    def path(self) -> list[str]:
        return [s.rule.id for s in self.steps]


class _Fmt(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def _render(template: str, facts: Mapping[str, Any]) -> str:
    try:
        return template.format_map(_Fmt(facts))
    except (ValueError, TypeError):  # a numeric format on a missing ("?") fact
        fmt = _Fmt({k: v for k, v in facts.items()})
        for k in list(FACTS) + ["roof_us", "grid", "block"]:
            if fmt.get(k) is None:
                fmt[k] = float("nan")
        return template.format_map(fmt)


def walk(facts: Mapping[str, Any], rules: tuple[Rule, ...] = RULES) -> Verdict:
    """The path through the tree for these facts: the fired rule of every
    node visited, the last one a verdict."""
    by_node: dict[str, list[Rule]] = {}
    for r in rules:
        by_node.setdefault(r.node, []).append(r)
    node: str | None = "root"
    steps: list[Step] = []
    missing: list[str] = []
    seen: set[str] = set()
    while node is not None:
        if node in seen:
            raise ValueError(f"decision tree loops at node {node!r}")
        seen.add(node)
        for r in by_node[node]:
            results = [c.holds(facts) for c in r.when]
            if False not in results:  # would have fired but for missing facts
                missing += [c.fact for c, ok in zip(r.when, results) if ok is None]
            if all(results):
                ev = [(c.fact, facts.get(c.fact), c.text()) for c in r.when]
                steps.append(Step(r, ev, _render(r.verdict, facts)))
                node = r.goto
                break
        else:  # pragma: no cover - every node ends with an unconditional rule
            raise ValueError(f"no rule fired at node {node!r}")
    return Verdict(steps, sorted(set(missing)))

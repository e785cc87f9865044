# SPDX-License-Identifier: Apache-2.0
"""tools/profile triage: the ncu raw-CSV reader, the decision tree branch by
branch (tests/tooling/data/ncu/branches.csv: one synthetic row per branch,
written by make_fixtures.py), the issue's classic case (achieved occupancy
25%, long_scoreboard 60%), and the verdicts on the RMSNorm ncu tables of
docs/layernorm/log/ rebuilt as ncu rows (notes_anchors, notes_v4_small) through
the CLI with the layernorm benchmark's bytes model and the H200 baseline's
measured ceiling."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.profile import __main__ as cli
from tools.profile import ncu, tree
from tools.profile import triage as tr

DATA = Path(__file__).parent / "data" / "ncu"
CEIL = {"bandwidth_bps": 4.25e12, "datasheet_bps": 4.8e12, "flops_per_s": 7.9e14}
MEMORY = tr.Model(bytes=200e6, **CEIL)
COMPUTE = tr.Model(bytes=1e6, flops=1e11, **CEIL)
NO_BYTES = tr.Model(**CEIL)

# row of branches.csv -> (model, path through the tree)
BRANCHES = {
    "at_roof": (MEMORY, ["at_roof"]),
    "model_exceeded": (MEMORY, ["model_exceeded"]),
    "at_roof_dram": (NO_BYTES, ["at_roof_dram"]),
    "extra_bytes_l2_miss": (MEMORY, ["memory_bound", "extra_bytes_l2_miss"]),
    "extra_bytes": (MEMORY, ["memory_bound", "extra_bytes"]),
    "narrow_loads": (MEMORY, ["memory_bound", "narrow_loads"]),
    "few_bytes_in_flight_warps": (
        MEMORY,
        ["memory_bound", "few_bytes_in_flight_warps"],
    ),
    "few_loads_per_thread": (MEMORY, ["memory_bound", "few_loads_per_thread"]),
    "l2_bound": (MEMORY, ["memory_bound", "l2_bound"]),
    "memory_then_latency_other": (
        MEMORY,
        ["memory_bound", "memory_other", "latency_other"],
    ),
    "small_grid": (MEMORY, ["latency_bound", "small_grid"]),
    "long_scoreboard_few_warps": (
        MEMORY,
        ["latency_bound", "long_scoreboard_few_warps"],
    ),
    "long_scoreboard": (MEMORY, ["latency_bound", "long_scoreboard"]),
    "barrier": (MEMORY, ["latency_bound", "barrier"]),
    "mio_throttle": (MEMORY, ["latency_bound", "mio_throttle"]),
    "short_scoreboard": (MEMORY, ["latency_bound", "short_scoreboard"]),
    "lg_throttle": (MEMORY, ["latency_bound", "lg_throttle"]),
    "wait": (MEMORY, ["latency_bound", "wait"]),
    "math_pipe_then_pipe_saturated": (
        MEMORY,
        ["latency_bound", "math_pipe", "pipe_saturated"],
    ),
    "not_selected": (MEMORY, ["latency_bound", "not_selected"]),
    "instruction_fetch": (MEMORY, ["latency_bound", "instruction_fetch"]),
    "few_warps": (MEMORY, ["latency_bound", "few_warps"]),
    "latency_other": (MEMORY, ["latency_bound", "latency_other"]),
    "no_tensor_cores": (COMPUTE, ["compute_bound", "no_tensor_cores"]),
    "tensor_saturated": (COMPUTE, ["compute_bound", "tensor_saturated"]),
    "pipe_saturated": (COMPUTE, ["compute_bound", "pipe_saturated"]),
    "issue_bound": (COMPUTE, ["compute_bound", "issue_bound"]),
    "compute_then_wait": (COMPUTE, ["compute_bound", "compute_other", "wait"]),
    "bound_unknown_classic": (None, ["bound_unknown", "long_scoreboard_few_warps"]),
    "sol_compute_no_model": (None, ["compute_bound", "tensor_saturated"]),
}


@pytest.fixture(scope="module")
def branch_rows() -> dict[str, ncu.Kernel]:
    return {k.name: k for k in ncu.load(DATA / "branches.csv")}


def test_raw_csv_reader_scales_units_and_skips_noise():
    ks = ncu.load(DATA / "notes_anchors.csv", DATA / "notes_anchors.log")
    assert len(ks) == 13
    k = ks[0]
    assert k.label == "ours rms_norm bf16 8192x8192"
    assert k.get("gpu__time_duration.sum") == pytest.approx(66.6e3)  # usecond -> ns
    assert k.get("dram__bytes_read.sum") == pytest.approx(124.8301e6)  # Mbyte -> bytes
    assert (
        k.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum") == 4194304
    )  # "4,194,304"
    with pytest.raises(ValueError, match="Kernel Name"):
        ncu.parse_raw_csv("==PROF== nothing\n")


def test_tree_is_well_formed():
    nodes = set(tree.NODES)
    for node in nodes:
        rules = [r for r in tree.RULES if r.node == node]
        assert rules[-1].when == (), f"node {node} must end with an unconditional rule"
    for r in tree.RULES:
        assert r.goto is None or r.goto in nodes, r.id
        assert r.goto is not None or r.next_change, (
            f"{r.id}: a verdict needs a next change"
        )
        for c in r.when:
            assert c.fact in tree.FACTS, f"{r.id}: fact {c.fact} has no source"
            assert c.op in tree.OPS or c.op == "missing"
    assert len({r.id for r in tree.RULES}) == len(tree.RULES)


def test_every_branch_has_a_fixture_row():
    covered = {rule for _, path in BRANCHES.values() for rule in path}
    assert covered == {r.id for r in tree.RULES}


@pytest.mark.parametrize("row", list(BRANCHES))
def test_branch(row, branch_rows):
    model, path = BRANCHES[row]
    t = tr.triage_kernel(branch_rows[row], model)
    assert t.verdict.path == path
    final = t.verdict.final
    assert not re.search(r"\?|\bnan\b", final.text + t.to_dict()["next_change"]), (
        final.text
    )
    assert t.lines()[2].startswith("  verdict: ") or t.lines()[1].startswith(
        "  verdict: "
    )
    # Evidence: every condition of every fired rule, with its value.
    for step in t.verdict.steps:
        assert [e[0] for e in step.evidence] == [c.fact for c in step.rule.when]


def test_classic_occupancy_25_long_scoreboard_60(branch_rows):
    t = tr.triage_kernel(branch_rows["long_scoreboard_few_warps"], MEMORY)
    d = t.to_dict()
    assert d["verdict"] == (
        "latency-bound on global loads with too few warps: achieved occupancy 25%, "
        "long_scoreboard 60% of warp cycles"
    )
    assert d["next_change"] == (
        "raise bytes in flight (more loads in flight per thread / more warps: limiter "
        "registers (32 registers/thread: 2 blocks of 256 threads per SM))"
    )
    ev = {e["fact"]: (e["value"], e["threshold"]) for e in d["evidence"]}
    assert ev["occupancy_pct"] == (25.0, "< 40")
    assert ev["stall_long_scoreboard_pct"] == (pytest.approx(60.0), ">= 40")
    # The same answer from occupancy and stalls alone (no SOL, no model),
    # the limiter estimated from registers and block size.
    t2 = tr.triage_kernel(branch_rows["bound_unknown_classic"], None)
    assert t2.verdict.final.rule.id == "long_scoreboard_few_warps"
    assert (
        "limiter registers (128 registers/thread: 2 blocks of 256 threads per SM, sm_90 estimate)"
        in (t2.to_dict()["next_change"])
    )


def test_occupancy_limits_match_the_log():
    # docs/layernorm/log/2026-11-29-wave-steps.md: 96 threads x 122 registers
    # -> 5 rows per SM; 128 x 59 -> 8; v4: 5 x 128 threads at 72 registers -> 7.
    assert tr.occupancy_limits(122, 96)["launch__occupancy_limit_registers"] == 5
    assert tr.occupancy_limits(59, 128)["launch__occupancy_limit_registers"] == 8
    assert tr.occupancy_limits(72, 128)["launch__occupancy_limit_registers"] == 7


# docs/layernorm/log/2026-11-29-anchors-under-ncu.md: ours loses where it
# holds the row in registers (too few warps, registers the limiter); the anchors that
# win are at the roof; the others have warps but one load in flight each.
LOGGED_ANCHORS = [
    ("ours rms_norm bf16 8192x8192", "few_bytes_in_flight_warps"),
    ("compile rms_norm bf16 8192x8192", "at_roof"),
    ("vllm rms_norm bf16 8192x8192", "few_loads_per_thread"),
    ("liger rms_norm bf16 8192x8192", "few_loads_per_thread"),
    ("ours rms_norm bf16 32768x4096", "at_roof"),
    ("compile rms_norm bf16 32768x4096", "few_loads_per_thread"),
    ("ours fused_add_rms_norm bf16 8192x4096", "few_bytes_in_flight_warps"),
    ("compile fused_add_rms_norm bf16 8192x4096", "few_loads_per_thread"),
    ("vllm fused_add_rms_norm bf16 8192x4096", "at_roof"),
    ("liger fused_add_rms_norm bf16 8192x4096", "at_roof"),
    ("ours fused_add_rms_norm bf16 1024x8192", "few_bytes_in_flight_warps"),
    ("vllm fused_add_rms_norm bf16 1024x8192", "few_loads_per_thread"),
    ("liger fused_add_rms_norm bf16 1024x8192", "few_loads_per_thread"),
]


def test_cli_on_the_logged_tables(tmp_path, capsys):
    out = tmp_path / "v.json"
    rc = cli.main([
        "triage", str(DATA / "notes_anchors.csv"), "--log", str(DATA / "notes_anchors.log"),
        "--benchmark", "benchmarks.kernels.benchmark_layernorm",
        "--results", "benchmarks/results/baselines/h200/layernorm_bf16.json", "--json", str(out),
    ])  # fmt: skip
    assert rc == 0
    got = [(d["label"], d["rule"]) for d in json.loads(out.read_text())]
    assert got == LOGGED_ANCHORS
    text = capsys.readouterr().out
    assert (
        "limiter: registers (59 registers/thread: 4 blocks of 256 threads per SM"
        in text
    )
    # The 16-row cases: launch/latency-bound (v4 profile: ~6% occupancy, one block per SM).
    rc = cli.main([
        "triage", str(DATA / "notes_v4_small.csv"), "--log", str(DATA / "notes_v4_small.log"),
        "--benchmark", "benchmarks.kernels.benchmark_layernorm", "--bandwidth-gbps", "4250",
        "--json", str(out),
    ])  # fmt: skip
    assert rc == 0
    assert [d["rule"] for d in json.loads(out.read_text())] == [
        "small_grid",
        "small_grid",
    ]


def test_explicit_bytes_and_unknown_case(tmp_path):
    out = tmp_path / "v.json"
    cli.main([
        "triage", str(DATA / "branches.csv"), "--kernel", "0", "--bytes", "200e6",
        "--bandwidth-gbps", "4250", "--json", str(out),
    ])  # fmt: skip
    assert json.loads(out.read_text())[0]["rule"] == "at_roof"
    with pytest.raises(SystemExit, match="not one of layernorm's cases"):
        cli.main([
            "triage", str(DATA / "notes_anchors.csv"), "--case", "rms_norm bf16 3x3",
            "--benchmark", "benchmarks.kernels.benchmark_layernorm",
        ])  # fmt: skip


def test_ncu_command_and_missing_ncu(monkeypatch):
    cmd = ncu.profile_command(
        "/tmp/x",
        ncu.benchmark_program("benchmarks.kernels.benchmark_w4a16", ["--m", "1"]),
    )
    assert cmd[:3] == ["ncu", "--clock-control", "none"]
    for s in (
        "SpeedOfLight",
        "Occupancy",
        "LaunchStats",
        "MemoryWorkloadAnalysis",
        "WarpStateStats",
    ):
        assert s in cmd
    assert cmd[-4:] == [
        "benchmarks.kernels.profile_cases",
        "benchmarks.kernels.benchmark_w4a16",
        "--m",
        "1",
    ]
    monkeypatch.setattr(ncu.shutil, "which", lambda _: None)
    with pytest.raises(RuntimeError, match="ncu not on PATH"):
        ncu.run_profile("/tmp/x", ["true"])
    with pytest.raises(RuntimeError, match="--page raw --csv"):
        ncu.load("/tmp/report.ncu-rep")


def test_w4a16_model_from_the_profile_log_label():
    # profile_cases prints `IMPL LABEL`; the benchmark's own flags choose the cases.
    from benchmarks.kernels import benchmark_w4a16 as w4

    models = tr.BenchmarkModels(
        "benchmarks.kernels.benchmark_w4a16", ["--m", "1,16", "--nk", "28672x4096"]
    )
    label, nbytes, flops = models.lookup("marlin bf16 sym g128 M=16 28672x4096")
    case = {
        "op": w4.OP,
        "dtype": "bf16",
        "zp": "sym",
        "group": 128,
        "n": 28672,
        "k": 4096,
        "m": 16,
    }
    assert label == "bf16 sym g128 M=16 28672x4096"
    assert nbytes == w4.case_bytes(case) and flops == 2 * 16 * 28672 * 4096
    assert models.lookup("ours bf16 sym g128 M=7 28672x4096") is None


def test_real_h200_w4a16_decode_kernel_is_few_warps_limited_by_registers_and_smem():
    """The first real ncu CSV (H200): the reader takes it as ncu wrote it and the
    cp.async-ring decode kernel lands on few_warps (17% occupancy, 164 registers)."""
    ks = ncu.load(DATA / "h200_w4a16.csv", DATA / "h200_w4a16.log")
    decode = [k for k in ks if "w4a16_decode_kernel" in k.name]
    assert decode
    t = tr.triage_kernel(decode[0], NO_BYTES)
    assert t.verdict.path == ["latency_bound", "few_warps"]


def test_real_h200_log_labels_every_kernel_of_a_case():
    """A case that launches two kernels (decode + split-K reduce) gets its label
    on both: the kernels ncu names before a `profile case` line are that case's."""
    ks = ncu.load(DATA / "h200_w4a16.csv", DATA / "h200_w4a16.log")
    assert all(k.label for k in ks)
    ours = [k for k in ks if k.label == "ours bf16 sym g128 M=1 28672x4096"]
    assert len(ours) == 2
    assert any("w4a16_decode_kernel" in k.name for k in ours)
    assert any("w4a16_splitk_reduce_kernel" in k.name for k in ours)
    floor = [k for k in ks if k.label and k.label.startswith("floor ")]
    assert floor and all("elementwise" in k.name for k in floor)


def test_cli_on_the_real_h200_w4a16_report(tmp_path):
    """With the benchmark's bytes model: the 58.7 MB floor pass is at the roof, ours
    is held against its case's total time (decode + reduce), so neither of
    ours is 'at the roof' (the reduce alone is far shorter than the bytes)."""
    out = tmp_path / "v.json"
    rc = cli.main([
        "triage", str(DATA / "h200_w4a16.csv"), "--log", str(DATA / "h200_w4a16.log"),
        "--benchmark", "benchmarks.kernels.benchmark_w4a16",
        "--results", "benchmarks/results/baselines/h200/w4a16_bf16.json", "--json", str(out),
        "--", "--device", "cpu", "--m", "1,16", "--nk", "28672x4096,4096x14336",
    ])  # fmt: skip
    assert rc == 0
    got = json.loads(out.read_text())
    floor = [d for d in got if d["label"].startswith("floor ")]
    ours = [d for d in got if d["label"].startswith("ours ")]
    big = [d for d in floor if d["label"].endswith("M=1 28672x4096")]
    assert [d["rule"] for d in big] == ["at_roof"]
    assert len(ours) == 8 and all(d["rule"] != "at_roof" for d in ours)
    decode = [d for d in ours if "w4a16_decode_kernel" in d["kernel"]]
    assert [d["rule"] for d in decode] == ["few_warps"] * 4


# docs/layernorm/log/2026-12-01-h200-ncu-report-vs-compile.md: the rule per
# case of ours and torch.compile (the floor pass is the roof's reference, not tabled).
H200_LAYERNORM_RULES = {
    "rms_norm bf16 16x4096": ("small_grid", "small_grid"),
    "rms_norm bf16 16x8192": ("small_grid", "small_grid"),
    "rms_norm bf16 1024x4096": ("latency_other", "latency_other"),
    "rms_norm bf16 1024x8192": ("latency_other", "long_scoreboard"),
    "rms_norm bf16 8192x4096": ("at_roof", "few_loads_per_thread"),
    "rms_norm bf16 8192x8192": ("at_roof", "at_roof"),
    "fused_add_rms_norm bf16 16x4096": ("small_grid", "small_grid"),
    "fused_add_rms_norm bf16 16x8192": ("small_grid", "small_grid"),
    "fused_add_rms_norm bf16 1024x4096": ("long_scoreboard_few_warps", "long_scoreboard"),
    "fused_add_rms_norm bf16 1024x8192": ("long_scoreboard_few_warps", "long_scoreboard"),
    "fused_add_rms_norm bf16 8192x4096": ("few_bytes_in_flight_warps", "few_loads_per_thread"),
    "fused_add_rms_norm bf16 8192x8192": ("few_bytes_in_flight_warps", "at_roof"),
}  # fmt: skip


@pytest.fixture(scope="module")
def h200_layernorm_verdicts(tmp_path_factory):
    """The real H200 layernorm report (trimmed to the columns the triage reads,
    trim_report.py) through the CLI with the benchmark's bytes model."""
    out = tmp_path_factory.mktemp("h200_layernorm") / "v.json"
    rc = cli.main([
        "triage", str(DATA / "h200_layernorm.csv"), "--log", str(DATA / "h200_layernorm.log"),
        "--benchmark", "benchmarks.kernels.benchmark_layernorm",
        "--results", "benchmarks/results/baselines/h200/layernorm_bf16.json", "--json", str(out),
        "--", "--device", "cpu", "--ops", "rms_norm,fused_add_rms_norm",
        "--rows", "16,1024,8192", "--hidden", "4096,8192",
    ])  # fmt: skip
    assert rc == 0
    return {d["label"]: d for d in json.loads(out.read_text())}


def test_real_h200_layernorm_report_labels_every_kernel():
    """42 kernels, each with its case; the fused add's floor launches two."""
    ks = ncu.load(DATA / "h200_layernorm.csv", DATA / "h200_layernorm.log")
    assert len(ks) == 42 and all(k.label for k in ks)
    floor = [k for k in ks if k.label == "floor fused_add_rms_norm bf16 8192x4096"]
    assert len(floor) == 2
    ours = [k for k in ks if k.label and k.label.startswith("ours ")]
    assert len(ours) == 12 and all("vllm_myops" in k.name for k in ours)


def test_real_h200_layernorm_verdicts_match_the_log(h200_layernorm_verdicts):
    got = h200_layernorm_verdicts
    for case, (ours, compile_) in H200_LAYERNORM_RULES.items():
        assert (got[f"ours {case}"]["rule"], got[f"compile {case}"]["rule"]) == (
            ours,
            compile_,
        ), case


def test_real_h200_layernorm_verdicts_by_row_count(h200_layernorm_verdicts):
    """The reading the layernorm log draws from the report: 16 rows small_grid for
    both; 8192 rows ours at the roof for rms_norm and short of bytes in flight
    for the fused add; 1024 rows ours latency-bound."""
    ours = {
        k[5:]: d for k, d in h200_layernorm_verdicts.items() if k.startswith("ours ")
    }
    for case, d in h200_layernorm_verdicts.items():
        if " 16x" in case and not case.startswith("floor "):
            assert d["path"] == ["latency_bound", "small_grid"], case
    for h in (4096, 8192):
        assert ours[f"rms_norm bf16 8192x{h}"]["path"] == ["at_roof"]
        assert ours[f"fused_add_rms_norm bf16 8192x{h}"]["path"] == [
            "memory_bound",
            "few_bytes_in_flight_warps",
        ]
        for op in ("rms_norm", "fused_add_rms_norm"):
            assert ours[f"{op} bf16 1024x{h}"]["path"][0] == "latency_bound"


def _real_verdicts(
    tmp_path, report: str, benchmark: str, ceiling: list[str], args: str
):
    out = tmp_path / f"{report}.json"
    rc = cli.main([
        "triage", str(DATA / f"{report}.csv"), "--log", str(DATA / f"{report}.log"),
        "--benchmark", benchmark, *ceiling, "--json", str(out),
        "--", "--device", "cpu", *args.split(),
    ])  # fmt: skip
    assert rc == 0

    def short(kernel: str) -> str:  # "void ns::<unnamed>::name<T, ...>(...)" -> name
        m = re.search(r"(\w+)<", kernel)
        return m.group(1) if m else kernel

    return [
        (d["label"], short(d["kernel"]), d["rule"]) for d in json.loads(out.read_text())
    ]


# docs/quantization/log/2026-12-02-ncu-swap-ring4-mma.md and
# docs/attention/log/2026-12-02-ncu-decode-and-prefill-v1.md: the rule per
# kernel of the recorded reports (swap-AB W4A16 GEMM, attention decode, prefill).
H200_SWAP_RULES = [
    ("floor bf16 sym g128 M=1 28672x4096", "vectorized_elementwise_kernel", "at_roof"),
    ("ours bf16 sym g128 M=1 28672x4096", "w4a16_swap_kernel", "wait"),
    ("floor bf16 sym g128 M=8 28672x4096", "vectorized_elementwise_kernel", "at_roof"),
    ("ours bf16 sym g128 M=8 28672x4096", "w4a16_swap_kernel", "wait"),
    ("floor bf16 sym g128 M=16 28672x4096", "vectorized_elementwise_kernel", "at_roof"),
    ("ours bf16 sym g128 M=16 28672x4096", "w4a16_decode_kernel", "wait"),
    ("floor bf16 sym g128 M=32 28672x4096", "vectorized_elementwise_kernel", "at_roof"),
    ("ours bf16 sym g128 M=32 28672x4096", "w4a16_mma_kernel", "barrier"),
    ("ours bf16 sym g128 M=32 28672x4096", "w4a16_splitk_reduce_kernel", "long_scoreboard"),
]  # fmt: skip


def test_real_h200_w4a16_swap_report_verdicts(tmp_path):
    got = _real_verdicts(
        tmp_path, "h200_w4a16_swap", "benchmarks.kernels.benchmark_w4a16",
        ["--results", "benchmarks/results/baselines/h200/w4a16_bf16.json"],
        "--m 1,8,16,32 --nk 28672x4096,4096x14336",
    )  # fmt: skip
    assert len(got) == 21
    assert got[: len(H200_SWAP_RULES)] == H200_SWAP_RULES
    # The same ceilings by name: the h200 folder's w4a16_bf16 baseline.
    by_name = _real_verdicts(
        tmp_path, "h200_w4a16_swap", "benchmarks.kernels.benchmark_w4a16",
        ["--baseline", "w4a16_bf16", "--baseline-device", "h200"],
        "--m 1,8,16,32 --nk 28672x4096,4096x14336",
    )  # fmt: skip
    assert by_name == got
    swap = [g for g in got if g[1] == "w4a16_swap_kernel"]
    # 4096x14336: few warps (22% occupancy) rather than wait at M = 1.
    assert {g[2] for g in swap} <= {"wait", "few_warps"} and len(swap) == 4


def test_real_h200_attention_decode_report_verdicts(tmp_path):
    got = _real_verdicts(
        tmp_path, "h200_attention_decode", "benchmarks.kernels.benchmark_attention",
        ["--bandwidth-gbps", "4251"], "--kind decode --batch 1,32 --ctx 1024,8192",
    )  # fmt: skip
    ours = {label[5:]: rule for label, _, rule in got if label.startswith("ours ")}
    assert ours == {
        "bf16 decode 32/8x128 blk16 1x1024": "small_grid",
        "bf16 decode 32/8x128 blk16 1x8192": "few_warps",
        "bf16 decode 32/8x128 blk16 32x1024": "few_warps",
        "bf16 decode 32/8x128 blk16 32x8192": "at_roof",
        "bf16 decode 9/3x64 blk16 1x1024": "small_grid",
        "bf16 decode 9/3x64 blk16 1x8192": "small_grid",
        "bf16 decode 9/3x64 blk16 32x1024": "few_warps",
        "bf16 decode 9/3x64 blk16 32x8192": "few_bytes_in_flight_warps",
    }


def test_real_h200_attention_prefill_report_floor_is_not_held_to_the_flops(tmp_path):
    """A compute-bound case: the floor row (a copy of the case's bytes) is 10x
    faster than the FLOPs roof, which the tree reports as a model that does not
    describe that kernel instead of 'at the roof'; ours (the decode launch that
    exits for a prefill-only batch, then the prefill kernel) is latency-bound."""
    got = _real_verdicts(
        tmp_path, "h200_attention_prefill", "benchmarks.kernels.benchmark_attention",
        ["--bandwidth-gbps", "4277", "--tflops", "803"], "--kind prefill --batch 1 --ctx 2048",
    )  # fmt: skip
    rules = [(label.split()[0], rule) for label, _, rule in got]
    assert rules == [
        ("floor", "model_exceeded"),
        ("ours", "few_warps"),
        ("ours", "wait"),
        ("floor", "model_exceeded"),
        ("ours", "small_grid"),
        ("ours", "wait"),
    ]

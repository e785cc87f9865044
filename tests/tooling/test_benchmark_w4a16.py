# SPDX-License-Identifier: Apache-2.0
"""The W4A16 benchmark: its byte/FLOP model, its command line, the generic
harness pieces it added (random-bit buffers, per-set prepare, the speedup and
metric targets), and a tiny CPU run that writes a valid results JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.common import cli, results, roofline, timing
from benchmarks.common import targets as T
from benchmarks.kernels import benchmark_w4a16 as B

REPO = Path(__file__).resolve().parents[2]


def case(**kw):
    c = {"op": B.OP, "dtype": "bf16", "zp": "sym", "group": 128}
    c.update(kw)
    return c


# ---------------------------------------------------------------------------
# Bytes and FLOPs
# ---------------------------------------------------------------------------


def test_weight_bytes_int4_plus_scales() -> None:
    # 28672x4096 group 128: 4 bits per weight + one bf16 scale per 128.
    n, k = 28672, 4096
    assert (
        B.weight_bytes(n, k, 128, "sym", torch.bfloat16)
        == n * k // 2 + (k // 128) * n * 2
    )
    # Zero points in the activation dtype double the per-group part.
    assert (
        B.weight_bytes(n, k, 128, "asym", torch.bfloat16)
        == n * k // 2 + 2 * (k // 128) * n * 2
    )


def test_weight_bytes_partial_group_and_per_channel() -> None:
    # K = 576 = 4.5 groups of 128: 5 groups; K not a multiple of 8 pads words.
    assert B.weight_bytes(576, 576, 128, "sym", torch.float16) == 72 * 576 * 4 + (
        5 * 576 * 2
    )
    assert B.weight_bytes(64, 100, -1, "sym", torch.bfloat16) == 13 * 64 * 4 + 64 * 2


def test_case_bytes_and_flops() -> None:
    c = case(m=16, n=4096, k=14336)
    w = B.weight_bytes(4096, 14336, 128, "sym", torch.bfloat16)
    assert B.BENCHMARK.bytes(c) == w + 2 * (16 * 14336 + 16 * 4096)
    assert B.BENCHMARK.flops(c) == 2 * 16 * 4096 * 14336
    # At M = 1 the weight is almost all the traffic (the floor's premise).
    c1 = case(m=1, n=28672, k=4096)
    assert B.BENCHMARK.bytes(c1) / B.weight_bytes(
        28672, 4096, 128, "sym", torch.bfloat16
    ) == pytest.approx(1.0, abs=2e-3)


def test_roofline_bound_flips_with_m() -> None:
    bw, peak = 4.27e12, 790e12
    small, big = case(m=1, n=28672, k=4096), case(m=4096, n=28672, k=4096)
    for c, want in ((small, "memory"), (big, "compute")):
        got = roofline.bound(B.BENCHMARK.bytes(c), B.BENCHMARK.flops(c), bw, peak)
        assert got == want


def test_set_specs_match_interchange_format() -> None:
    specs = B.set_specs(case(m=3, n=64, k=200, group=64, zp="asym"))
    assert specs["qweight"].shape == (25, 64) and specs["qweight"].dtype == torch.int32
    assert specs["scales"].shape == (4, 64) and specs["zeros"].shape == (4, 64)
    assert specs["a"].shape == (3, 200)
    assert "zeros" not in B.set_specs(case(m=1, n=64, k=64))


def test_randbits_covers_every_code() -> None:
    spec = timing.TensorSpec((64, 64), torch.int32, "randbits")
    s = timing.alloc_sets({"q": spec}, 1, "cpu")[0]
    from vllm_myops.quantization import reference as R

    codes = R.unpack_int4(s.q, 0, 8 * 64)
    assert set(codes.unique().tolist()) == set(range(16))
    assert bool((s.q < 0).any())  # the top nibble is random too


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def parse(*argv: str):
    args = cli.parse_args(B.BENCHMARK, list(argv), B.__doc__ or "")
    B.BENCHMARK.finish_args(args, torch.device("cpu"))
    return args


def test_cli_cpu_preset_defaults() -> None:
    args = parse("--device", "cpu")
    assert args.preset == "cpu"
    assert args.nk == list(B.CPU_NK) and args.m == [1, 32]
    assert args.group == [B.CPU_GROUP] and args.zp == ["sym"]
    cases = B.BENCHMARK.cases(args)
    assert len(cases) == len(B.CPU_NK) * 2
    assert {c["m"] for c in cases} == {1, 32}


def test_cli_gpu_preset_is_the_issue_list() -> None:
    args = parse("--preset", "gpu")
    assert (28672, 4096) in args.nk and (57344, 8192) in args.nk and len(args.nk) == 7
    assert args.m == [1, 4, 16, 32, 64, 128, 256, 1024, 4096]
    assert args.group == [128]


def test_cli_explicit_lists() -> None:
    args = parse(
        "--nk", "576x1536,4104X64", "--m", "1,7", "--group=-1,32", "--zp", "sym,asym"
    )
    assert args.nk == [(576, 1536), (4104, 64)]
    assert args.m == [1, 7] and args.group == [-1, 32] and args.zp == ["sym", "asym"]
    assert len(B.BENCHMARK.cases(args)) == 2 * 2 * 2 * 2


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--nk", "4096"], "NxK"),
        (["--nk", "0x64"], "NxK"),
        (["--group", "48"], "48"),
        (["--zp", "awq"], "awq"),
        (["--m", "a,b"], "integers"),
        (["--dtype", "fp32"], "--dtype fp32"),
    ],
)
def test_cli_rejects_bad_values(argv, needle, capsys) -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(B.BENCHMARK, argv, B.__doc__ or "")
    assert needle in capsys.readouterr().err


def test_cli_rejects_m_zero() -> None:
    args = cli.parse_args(B.BENCHMARK, ["--m", "0,1"], "")
    with pytest.raises(SystemExit, match="--m"):
        B.BENCHMARK.finish_args(args, torch.device("cpu"))


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------


def rec(impl, us, m=1, status="ok", **kw):
    return {
        **case(m=m, n=64, k=64),
        "impl": impl,
        "median_us": us,
        "status": status,
        **kw,
    }


def verdict(records, target):
    return T.evaluate(
        records,
        [target],
        case_fields=B.BENCHMARK.case_fields,
        label=B.label,
        anchors=B.ANCHORS,
    )[1]


def test_speedup_where_targets() -> None:
    t = T.SpeedupWhere("x", others=("cpu_wna16",), factor=1.2, where=lambda c: True)
    assert verdict([rec("ours", 10.0), rec("cpu_wna16", 12.5)], t)["status"] == "PASS"
    assert verdict([rec("ours", 10.0), rec("cpu_wna16", 11.0)], t)["status"] == "FAIL"
    missing = rec("cpu_wna16", None, status="missing")
    assert verdict([rec("ours", 10.0), missing], t)["status"] == "INCOMPLETE"


def test_metric_at_least_target() -> None:
    t = T.MetricAtLeast(
        "y", metric="pct_ceiling", value=70.0, where=lambda c: c["m"] == 1
    )
    assert verdict([rec("ours", 1.0, pct_ceiling=75.0)], t)["status"] == "PASS"
    assert verdict([rec("ours", 1.0, pct_ceiling=60.0)], t)["status"] == "FAIL"
    assert verdict([rec("ours", 1.0, m=32, pct_ceiling=10.0)], t)["status"] == "N/A"


# ---------------------------------------------------------------------------
# Implementations and a tiny run
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mm", "tinygemm"])
def test_torch_anchors_agree_with_reference(name) -> None:
    args = parse("--device", "cpu")
    impl = B.IMPL_CLASSES[name](args, torch.device("cpu"))
    assert impl.availability()[0], impl.availability()
    for zp in ("sym", "asym"):
        c = case(m=3, n=64, k=256, group=64, zp=zp)
        ok, why, _ = B.check(impl.make(c), c, torch.device("cpu"))
        assert ok, why


def test_prepare_attaches_and_release_drops() -> None:
    args = parse("--device", "cpu")
    impl = B.IMPL_CLASSES["mm"](args, torch.device("cpu"))
    c = case(m=2, n=64, k=128, group=64)
    sets = timing.alloc_sets(B.set_specs(c), 3, "cpu")
    impl.prepare(c, sets)
    assert all(impl.key in s.__dict__ for s in sets)
    out = impl.make(c)(sets[1])
    assert out.shape == (2, 64)
    impl.release(sets)
    assert not any(impl.key in s.__dict__ for s in sets)


def test_tiny_cpu_run_writes_valid_json(tmp_path) -> None:
    out = tmp_path / "w4a16.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.kernels.benchmark_w4a16",
            "--device=cpu",
            "--impls=floor,mm,tinygemm",
            "--nk=64x128",
            "--m=1,4",
            "--group=64",
            "--zp=sym,asym",
            "--target-s=0.02",
            "--max-sets=16",
            "--threads=1",
            f"--save={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # ours is always added: exit 2 only when it is absent or wrong here.
    assert proc.returncode in (0, 2), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = results.load_results(out)
    assert doc["benchmark"] == "w4a16"
    assert doc["config"]["key_fields"] == [*B.BENCHMARK.case_fields, "impl", "method"]
    assert doc["config"]["load_avg_1_5_15_start"] is not None
    assert doc["ceiling"]["bandwidth_bps"] > 0
    assert doc["compute_ceiling"]["dtype"] == "bfloat16"
    recs = doc["records"]
    assert len(recs) == 2 * 2 * 4  # zp x M x (floor, ours, mm, tinygemm)
    for r in recs:
        if r["impl"] in ("floor", "mm", "tinygemm"):
            assert r["status"] == "ok", r
            assert r["median_us"] > 0 and r["flops"] == 2 * r["m"] * 64 * 128
            # The bound follows from the bytes/FLOPs model at the ceilings this
            # run measured (at M = 4 a loaded 1-thread CPU's bf16 matmul ceiling
            # can make the tiny case compute-bound).
            memory_s = r["bytes"] / doc["ceiling"]["bandwidth_bps"]
            compute_s = r["flops"] / doc["compute_ceiling"]["flops_per_s"]
            assert r["pct_ceiling"] is not None
            assert r["bound"] == ("compute" if compute_s > memory_s else "memory")
    # The regression gate reads it back (same file: no regression).
    assert results.compare(doc, doc, threshold_pct=3.0) == []
    json.dumps(doc)  # plain JSON all the way down


def test_prepare_gives_every_set_its_own_memory() -> None:
    args = parse("--device", "cpu")
    c = case(m=1, n=64, k=128, group=64)
    sets = timing.alloc_sets(B.set_specs(c), 3, "cpu")
    for name in ("mm", "floor"):
        impl = B.IMPL_CLASSES[name](args, torch.device("cpu"))
        impl.prepare(c, sets)
        ws = [s.__dict__[impl.key] for s in sets]
        first = [w if isinstance(w, torch.Tensor) else w[0] for w in ws]
        assert len({t.data_ptr() for t in first}) == 3
        impl.release(sets)


@pytest.mark.parametrize("name", ["marlin", "machete"])
def test_gpu_anchors_missing_cleanly_on_cpu(name) -> None:
    impl = B.IMPL_CLASSES[name](parse("--device", "cpu"), torch.device("cpu"))
    ok, why = impl.availability()
    assert not ok and "GPU" in why


def test_vllm_cpu_anchor_agrees_with_reference() -> None:
    pytest.importorskip("vllm")
    impl = B.IMPL_CLASSES["cpu_wna16"](parse("--device", "cpu"), torch.device("cpu"))
    ok, why = impl.availability()
    if not ok:
        pytest.skip(why)
    for zp in ("sym", "asym"):
        c = case(m=5, n=64, k=256, group=64, zp=zp)
        ok, why, _ = B.check(impl.make(c), c, torch.device("cpu"))
        assert ok, why
    # Its kernel takes K / G as the group: a partial last group is refused
    # up front instead of failing inside vLLM.
    with pytest.raises(B.Unavailable, match="partial"):
        impl.make(case(m=1, n=576, k=576, group=128))

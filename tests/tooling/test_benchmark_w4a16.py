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
    # bf16's roof where ATen has a bf16 GEMM here; fp32's, saying why, where
    # it would be ATen's scalar loop (an AVX2 CPU: 23 matmuls of 2048^3 at
    # ~1.2 GFLOP/s, past this test's timeout).
    fallback = roofline.cpu_gemm_fallback(torch.bfloat16)
    comp = doc["compute_ceiling"]
    assert comp["dtype"] == ("bfloat16" if fallback is None else "float32"), comp
    assert fallback is None or fallback in comp["method"], comp
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


# ---------------------------------------------------------------------------
# Act-order (GPTQ desc_act) cases
# ---------------------------------------------------------------------------


def act_case(**kw):
    return case(op=B.OP_ACT, **kw)


def ours_or_skip(args):
    impl = B.IMPL_CLASSES["ours"](args, torch.device("cpu"))
    ok, why = impl.availability()
    if not ok:
        pytest.skip(why)
    return impl


@pytest.mark.parametrize("k, group", [(512, 64), (576, 128), (200, 32)])
def test_act_order_g_idx_is_gptq_desc_act(k, group) -> None:
    from vllm_myops.quantization import reference as R

    g_idx = B.act_order_g_idx(k, group)
    assert g_idx.dtype == torch.int32 and g_idx.shape == (k,)
    assert torch.equal(g_idx, B.act_order_g_idx(k, group))  # fixed seed
    # Non-monotonic group ids, each group group_size rows (the last the rest).
    assert bool((g_idx[1:] < g_idx[:-1]).any())
    counts = torch.bincount(g_idx.long()).tolist()
    assert counts == [group] * (k // group) + ([k % group] if k % group else [])
    # The served layer's permutation makes the groups contiguous.
    perm = B.served_perm(act_case(m=1, n=64, k=k, group=group), "cpu")
    assert torch.equal(perm, R.act_order_perm(g_idx, k, group))
    assert torch.equal(g_idx[perm.long()], R.default_g_idx(k, group))


def test_act_order_bytes_add_the_permutation() -> None:
    plain, act = case(m=16, n=4096, k=14336), act_case(m=16, n=4096, k=14336)
    assert B.BENCHMARK.bytes(act) == B.BENCHMARK.bytes(plain) + 4 * 14336
    assert B.BENCHMARK.flops(act) == B.BENCHMARK.flops(plain)


def test_cli_order() -> None:
    args = parse("--nk", "64x256", "--m", "1,7", "--group=-1,64")
    assert args.order == ["plain"]
    assert {c["op"] for c in B.BENCHMARK.cases(args)} == {B.OP}
    # Without act-order the default implementations leave the gather out.
    assert "gather" not in args.impls.split(",")
    args = parse("--nk", "64x256", "--m", "1,7", "--group=-1,64", "--order=plain,act")
    cases = B.BENCHMARK.cases(args)
    # Group -1 (one group) has no act-order: 2 M x (2 plain + 1 act).
    assert len(cases) == 6
    acts = [c for c in cases if B.is_act(c)]
    assert {c["group"] for c in acts} == {64}
    # A case's plain and act-order runs are adjacent (timed back to back).
    i = cases.index(acts[0])
    assert cases[i - 1] == {**acts[0], "op": B.OP}
    assert " act " in B.label(acts[0]) and " act " not in B.label(cases[i - 1])
    assert args.impls is None  # the CPU defaults, gather included
    assert "gather" in B.CPU_DEFAULT_IMPLS
    with pytest.raises(SystemExit, match="act-order"):
        parse("--order", "act", "--group=-1")


def test_cli_rejects_bad_order(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(B.BENCHMARK, ["--order", "desc"], "")
    assert "desc" in capsys.readouterr().err


@pytest.mark.parametrize("zp", ["sym", "asym"])
def test_ours_act_order_agrees_with_reference_and_a_wrong_perm_fails(zp) -> None:
    args = parse("--device", "cpu")
    impl = ours_or_skip(args)
    c = act_case(m=5, n=64, k=512, group=64, zp=zp)
    ok, why, _ = B.check(impl.make(c), c, torch.device("cpu"))
    assert ok, why
    # The check would see a wrong permutation: the same layer with the
    # gather left out, or with another order of the columns.
    s, ref = B.check_inputs(c, torch.device("cpu"))
    plain_ref = B.R.w4a16_gemm_ref(
        s.a, B.codes_of(s, 512), s.scales, B.zero_codes(s), 64
    )
    assert not torch.allclose(ref.float(), plain_ref.float(), atol=0.1)
    for wrong in (None, "flip", "plain"):
        layer = impl.convert(s, c)
        if wrong == "flip":
            layer.w4a16_perm.data = layer.w4a16_perm.data.flip(0).contiguous()
        elif wrong == "plain":
            layer.w4a16_perm.data = torch.arange(512, dtype=torch.int32)
        else:
            layer.w4a16_perm = None
        bad = B.check(
            lambda s, layer=layer: impl.call(s, layer, c), c, torch.device("cpu")
        )
        assert not bad[0], wrong


def test_ours_act_order_prepare_gives_every_set_its_own_layer() -> None:
    args = parse("--device", "cpu")
    impl = ours_or_skip(args)
    c = act_case(m=2, n=64, k=256, group=64)
    sets = timing.alloc_sets(B.set_specs(c), 3, "cpu")
    impl.prepare(c, sets)
    layers = [s.__dict__[impl.key] for s in sets]
    for name in ("w4a16_packed", "scales", "w4a16_perm"):
        assert len({getattr(x, name).data_ptr() for x in layers}) == 3, name
    out = impl.make(c)(sets[2])
    assert out.shape == (2, 64)
    impl.release(sets)


def test_gather_and_anchors_by_order() -> None:
    args = parse("--device", "cpu")
    gather = B.IMPL_CLASSES["gather"](args, torch.device("cpu"))
    gather.load()  # as the harness does before make
    c = act_case(m=3, n=64, k=256, group=64)
    s = timing.alloc_sets(B.set_specs(c), 1, "cpu")[0]
    perm = B.served_perm(c, "cpu").long()
    assert torch.equal(gather.make(c)(s), s.a[:, perm])
    with pytest.raises(B.Unavailable, match="plain"):
        gather.make(case(m=3, n=64, k=256, group=64))
    for name in ("mm", "tinygemm", "cpu_wna16"):
        impl = B.IMPL_CLASSES[name](args, torch.device("cpu"))
        with pytest.raises(B.Unavailable, match="act-order"):
            impl.make(c)
    floor = B.IMPL_CLASSES["floor"](args, torch.device("cpu"))
    src, dst = floor.convert(s, c)
    assert (src.numel() + dst.numel()) * 4 == s.qweight.numel() * 4 + 4 * 256


def test_act_order_target() -> None:
    t = B.ACT_TARGET

    def recs(act_us, plain_us=10.0, gather_us=0.2):
        return [
            rec("ours", plain_us),
            {**rec("ours", act_us), "op": B.OP_ACT},
            {**rec("gather", gather_us), "op": B.OP_ACT},
        ]

    v = verdict(recs(10.2), t)
    assert v["status"] == "PASS" and "2.0-2.0%" in v["detail"]
    assert verdict(recs(10.5), t)["status"] == "FAIL"
    assert verdict([rec("ours", 10.0)], t)["status"] == "N/A"
    # The anchor targets are for plain cases only.
    m = B.GPU_TARGETS[1]
    act_only = [
        {**rec("ours", 5.0), "op": B.OP_ACT},
        {**rec("marlin", 1.0), "op": B.OP_ACT},
    ]
    assert verdict(act_only, m)["status"] == "N/A"


def test_tiny_cpu_run_with_act_order(tmp_path) -> None:
    args = parse("--device", "cpu")
    ours_or_skip(args)
    out = tmp_path / "w4a16_act.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.kernels.benchmark_w4a16",
            "--device=cpu",
            "--impls=floor,ours,mm,gather",
            "--nk=64x256",
            "--m=1,4",
            "--group=64",
            "--order=plain,act",
            "--target-s=0.02",
            "--max-sets=16",
            "--threads=1",
            f"--save={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = results.load_results(out)
    assert doc["config"]["order"] == ["plain", "act"]
    recs = doc["records"]
    assert len(recs) == 2 * 2 * 4  # order x M x impls
    by = {(r["op"], r["m"], r["impl"]): r for r in recs}
    for m in (1, 4):
        plain, act = (B.OP, m), (B.OP_ACT, m)
        assert by[(*act, "ours")]["status"] == "ok"  # checked vs the g_idx reference
        assert by[(*act, "ours")]["max_abs_err"] is not None
        assert by[(*act, "gather")]["status"] == "ok"
        assert by[(*act, "mm")]["status"] == "missing"
        assert by[(*plain, "mm")]["status"] == "ok"
        assert by[(*plain, "gather")]["status"] == "missing"
        assert by[(*act, "ours")]["bytes"] == by[(*plain, "ours")]["bytes"] + 4 * 256
        # Plain records keep the fields they had before the option.
        assert "order" not in by[(*plain, "ours")]
    targets = {v["target"]: v for v in doc["verdicts"]}
    assert targets[B.ACT_TARGET.target]["status"] in ("PASS", "FAIL")

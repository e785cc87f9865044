# SPDX-License-Identifier: Apache-2.0
"""benchmarks/e2e/step_breakdown.py on synthetic torch.profiler traces: the
family of each kernel name seen in vLLM's traces (ours, vLLM's, Inductor's,
cuBLAS, FlashAttention), per-step times from the forward annotations, and
the CPU fallback that counts only top-level operators."""

from __future__ import annotations

import json

import pytest

from benchmarks.e2e import step_breakdown as sb


@pytest.mark.parametrize(
    "name, family",
    [
        ("void vllm_myops::(anonymous namespace)::rms_norm_warp_rows_kernel<c10::BFloat16>(...)", "rmsnorm"),
        ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(...)", "rmsnorm"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "rmsnorm"),
        ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(...)", "attention"),
        ("kernel_unified_attention_2d", "attention"),
        ("void vllm::reshape_and_cache_flash_kernel<...>(...)", "attention"),
        ("nvjet_tst_128x64_64x6_1x1_h_bz_TNT", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
        ("aten::mm", "gemm"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
        ("triton_poi_fused_mul_silu_1", "other"),
        ("_C::weight_packed_linear", "gemm"),
        ("vllm::unified_kv_cache_update", "attention"),
        ("myops_obs::tick", "counting"),
        ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(...)", "other"),
    ],
)  # fmt: skip
def test_family_of_kernel_names(name, family):
    assert sb.family_of(name) == family


def _x(name, ts, dur, cat="kernel", tid=7):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": 1,
        "tid": tid,
    }


DECODE = "execute_context_0(0)_generation_16(16)"
PREFILL = "execute_context_16(640)_generation_0(0)"


def test_gpu_trace_per_decode_step_and_shares(tmp_path):
    events = [
        _x(DECODE, 0, 100, cat="user_annotation"),  # CPU timeline: not used on GPU
        _x(PREFILL, 900, 100, cat="gpu_user_annotation"),
        _x("nvjet_prefill_gemm", 910, 80),  # in a prefill step: not summed
        _x(DECODE, 0, 100, cat="gpu_user_annotation"),
        _x(DECODE, 200, 100, cat="gpu_user_annotation"),
        _x("aten::mm", 0, 50, cat="cpu_op"),  # CPU side: ignored on a GPU trace
        _x("nvjet_between_steps", 150, 40),  # outside every step: not summed
    ]
    for step in (0, 200):
        events += [
            _x("vllm_myops::rms_norm_warp_rows_kernel", step + 1, 2),
            _x("nvjet_tst_gemm", step + 5, 30),
            _x("flash_fwd_kernel", step + 40, 10),
            _x("triton_poi_fused_mul_silu", step + 60, 6),
            _x("Memcpy HtoD", step + 70, 2, cat="gpu_memcpy"),
        ]
    path = tmp_path / "worker.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    r = sb.breakdown_dir(tmp_path)
    assert r["source"] == "gpu kernels" and r["steps"] == 2
    assert r["total_us"] == 100.0 and r["us_per_step"] == 50.0
    assert r["step_wall_us"] == 100.0
    fam = r["families"]
    assert fam["rmsnorm"]["us_per_step"] == 2.0 and fam["rmsnorm"]["count"] == 2
    assert fam["gemm"]["share"] == pytest.approx(0.6)
    assert fam["attention"]["us"] == 20.0 and fam["other"]["us"] == 12.0
    assert fam["memcpy"]["us"] == 4.0
    assert r["ours"] == {"us": 4.0, "count": 2}
    assert r["top"][0]["name"] == "nvjet_tst_gemm"
    assert "rmsnorm" in sb.format_table({"myops": r, "native": r})


def test_cpu_trace_counts_top_level_ops_once(tmp_path):
    events = [
        _x(DECODE, 0, 100, cat="user_annotation"),
        _x("_myops_C::rms_norm", 0, 10, cat="cpu_op"),
        _x("aten::linear", 10, 40, cat="cpu_op"),
        _x("aten::mm", 12, 35, cat="cpu_op"),  # nested in aten::linear
        _x("aten::silu", 60, 5, cat="cpu_op", tid=8),  # another thread
    ]
    (tmp_path / "t.json").write_text(json.dumps(events))
    r = sb.breakdown_dir(tmp_path)
    assert r["source"] == "cpu ops (top level)" and r["steps"] == 1
    assert r["total_us"] == 55.0
    assert r["families"]["gemm"]["us"] == 40.0
    assert r["families"]["rmsnorm"]["us"] == 10.0 and r["ours"]["count"] == 1


def test_without_step_annotations_everything_counts(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps([_x("aten::mm", 0, 7, cat="cpu_op")]))
    r = sb.breakdown_dir(tmp_path)
    assert r["steps"] == 0 and r["us_per_step"] is None and r["total_us"] == 7.0


def test_no_trace_files_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace files"):
        sb.breakdown_dir(tmp_path)

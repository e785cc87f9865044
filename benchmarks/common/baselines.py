# SPDX-License-Identifier: Apache-2.0
"""Named gate baselines, one folder per device:
benchmarks/results/baselines/<device>/<name>.json.

The device folder is a slug of the device's name: torch.cuda.get_device_name()
"NVIDIA H100 80GB HBM3" -> h100, "NVIDIA H200" -> h200, "NVIDIA H100 PCIe" ->
h100_pcie (another memory system, so another baseline), CPU -> cpu.
Env VLLM_MYOPS_BASELINE_DEVICE=<slug> overrides the detected slug.

    python -m benchmarks.common.baselines               # this machine's slug
    python -m benchmarks.common.baselines attention_bf16  # its baseline's path

The second form exits 1 with the message of BaselineNotFound when this
device has no such baseline.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BASELINES_DIR = REPO_ROOT / "benchmarks" / "results" / "baselines"
DEVICE_ENV = "VLLM_MYOPS_BASELINE_DEVICE"

# Words of a device name that name neither the chip nor its memory system.
_VENDOR_WORDS = {"nvidia", "amd", "intel", "geforce", "tesla", "quadro", "instinct"}
# Form factors whose bandwidth or clocks differ from the chip's main part:
# kept in the slug so their numbers never gate the other's.
_FORM_FACTORS = {"pcie", "nvl"}
_NOISE = re.compile(r"^(\d+gb|hbm\d*e?|sxm\d*|gddr\d*x?)$")


class BaselineNotFound(LookupError):
    """No baseline of that name for the device; the message says what exists."""


def device_slug(name: str) -> str:
    """The baselines folder of a device name (see the module docstring).

    Lower case, vendor words, memory sizes and SXM/HBM tags dropped, the rest
    joined: "NVIDIA A100-SXM4-80GB" -> a100, "NVIDIA GeForce RTX 4090" ->
    rtx4090, "NVIDIA H200 NVL" -> h200_nvl, "AMD Instinct MI300X" -> mi300x;
    "cpu" or a CPU model name ("AMD EPYC ...", "Intel(R) Xeon(R) ...") -> cpu.
    """
    low = name.strip().lower()
    if (
        not low
        or low == "cpu"
        or re.search(r"\b(epyc|xeon|ryzen|core\(tm\)|cpu)\b", low)
    ):
        return "cpu"
    words = [w for w in re.split(r"[\s\-_/(),]+", low) if w]
    model: list[str] = []
    forms: list[str] = []
    for w in words:
        if w in _VENDOR_WORDS or _NOISE.match(w):
            continue
        if w in _FORM_FACTORS:
            forms.append(w)
        else:
            model.append(re.sub(r"[^a-z0-9]", "", w))
    slug = "".join(model) or "unknown"
    return "_".join([slug, *forms])


def current_device_slug(device: object = None) -> str:
    """The slug of `device` (a torch.device or "cuda"/"cpu"; default: cuda
    when available, else cpu), or env VLLM_MYOPS_BASELINE_DEVICE."""
    forced = os.environ.get(DEVICE_ENV)
    if forced:
        return forced
    import torch  # noqa: PLC0415  (the slug of a name needs no torch)

    dev = torch.device(device) if device is not None else None
    if dev is None:
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cpu":
        return "cpu"
    return device_slug(torch.cuda.get_device_name(dev))


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


def _stem(name: str) -> str:
    return name[: -len(".json")] if name.endswith(".json") else name


def devices_with(name: str | None = None, root: Path = BASELINES_DIR) -> list[str]:
    """Device folders under root (those holding <name>.json when name is given)."""
    if not root.is_dir():
        return []
    return sorted(
        d.name
        for d in root.iterdir()
        if d.is_dir() and (name is None or (d / f"{_stem(name)}.json").is_file())
    )


def baseline_path(name: str, slug: str, root: Path = BASELINES_DIR) -> Path:
    return root / slug / f"{_stem(name)}.json"


def resolve_baseline(
    name: str, slug: str, *, device_name: str | None = None, root: Path = BASELINES_DIR
) -> Path:
    """root/<slug>/<name>.json, or BaselineNotFound naming the missing path
    and the devices that do have a baseline of that name."""
    if "/" in name or os.sep in name:
        raise BaselineNotFound(
            f"baseline name {name!r}: give a name such as attention_bf16 "
            "(a file path goes to --compare)"
        )
    path = baseline_path(name, slug, root)
    if path.is_file():
        return path
    have = devices_with(name, root)
    dev = f"{slug} ({device_name})" if device_name else slug
    if have:
        where = ", ".join(f"{d} ({_rel(baseline_path(name, d, root))})" for d in have)
        tail = f"devices with a baseline {_stem(name)!r}: {where}"
    else:
        tail = (
            f"no device has a baseline {_stem(name)!r}; device folders: "
            f"{', '.join(devices_with(None, root)) or 'none'}"
        )
    raise BaselineNotFound(
        f"no baseline {_stem(name)!r} for device {dev}: {_rel(path)} does not exist; "
        f"{tail}. Record one on this device (--save {_rel(path)}, see "
        f"benchmarks/results/README.md), set {DEVICE_ENV}, or pass --compare PATH."
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    slug = current_device_slug()
    if not args:
        print(slug)
        return 0
    try:
        print(_rel(resolve_baseline(args[0], slug)))
    except BaselineNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

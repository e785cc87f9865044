# SPDX-License-Identifier: Apache-2.0
"""Checkpoints derived once from a converted model and cached beside it:
the main job's 4-bit GPTQ checkpoint (``vllm-myops quantize``) and the
bf16 copy of its dequantized weights (what vLLM's own kernels serve when it
cannot load the GPTQ format itself).

    gptq = ensure_gptq(base_dir, DEMO_GPTQ)            # <base>-gptq-g128-asym-act
    deq = ensure_dequantized(gptq)                     # <gptq>-dequant-bf16

Each directory appears by one rename after its stamp is written
(packaged_gguf.build_beside), so an interrupted run never leaves one that looks done; the
stamp records the source's own stamp, so a re-converted base model makes
its derived checkpoints again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_myops.models.packaged_gguf import STAMP as BASE_STAMP
from vllm_myops.models.packaged_gguf import Log, build_beside, locked_file

STAMP = "myops_derived_model.json"
# Bump when a derived directory changes for the same source and scheme.
DERIVER_VERSION = 1


@dataclasses.dataclass(frozen=True)
class GptqScheme:
    """The arguments of ``vllm-myops quantize``."""

    group_size: int = 128
    sym: bool = True
    act_order: bool = False

    @property
    def suffix(self) -> str:
        sym = "sym" if self.sym else "asym"
        act = "-act" if self.act_order else ""
        return f"gptq-g{self.group_size}-{sym}{act}"

    def describe(self) -> str:
        sym = "symmetric" if self.sym else "asymmetric (zero points)"
        act = ", act-order (desc_act)" if self.act_order else ""
        group = "per channel" if self.group_size == -1 else f"group {self.group_size}"
        return f"4-bit GPTQ, {group}, {sym}{act}"


# The main job's checkpoint: act-order with zero points, the GPTQ variants
# vLLM no longer serves (act-order was removed upstream; vLLM on CPU refuses
# asymmetric GPTQ). Group 128 over SmolLM2's K = 576 leaves a partial last
# group of 64, which our kernels take and vLLM's do not.
DEMO_GPTQ = GptqScheme(group_size=128, sym=False, act_order=True)


def _source_key(src: Path) -> str:
    """What identifies the source directory's content: its own stamp (a
    converted or derived model), else its config and weight files' sizes
    and times."""
    for name in (STAMP, BASE_STAMP):
        if (src / name).is_file():
            return hashlib.sha256((src / name).read_bytes()).hexdigest()
    h = hashlib.sha256()
    for f in sorted(src.iterdir()):
        if f.is_file():
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _stamp(src: Path, what: dict[str, Any]) -> dict[str, Any]:
    return {"source": _source_key(src), "deriver": DERIVER_VERSION, **what}


def is_derived(out: Path, src: Path, what: dict[str, Any]) -> bool:
    try:
        record = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return bool(record.get("key") == _stamp(src, what))


def _ensure(
    src: Path,
    out: Path,
    what: dict[str, Any],
    make: Callable[[Path, Path], None],
    log: Log,
) -> Path:
    """`out` made from `src` by make(src, tmp_out), once."""
    if is_derived(out, src, what):
        return out
    with locked_file(out.parent / f".{out.name}.lock", out.name, log):
        if is_derived(out, src, what):  # another process finished it
            return out
        with build_beside(out, f".{out.name}.tmp-") as tmp:
            t = time.time()
            make(src, tmp / "model")
            record = {"key": _stamp(src, what), "made_in_s": round(time.time() - t, 1)}
            (tmp / "model" / STAMP).write_text(json.dumps(record, indent=2) + "\n")
    return out


def gptq_dir(src: str | os.PathLike[str], scheme: GptqScheme) -> Path:
    src = Path(src)
    return src.with_name(f"{src.name}-{scheme.suffix}")


def ensure_gptq(
    src: str | os.PathLike[str], scheme: GptqScheme = DEMO_GPTQ, log: Log = print
) -> Path:
    """The GPTQ checkpoint of the model at `src` (``vllm-myops quantize``
    with `scheme`), made on first use beside `src`."""
    from vllm_myops.cli.quantize import quantize_checkpoint

    src = Path(src)

    def make(s: Path, o: Path) -> None:
        log(f"quantizing {s.name}: {scheme.describe()} (once) ...")
        quantize_checkpoint(s, o, scheme.group_size, scheme.sym, scheme.act_order)

    what = {"gptq": dataclasses.asdict(scheme)}
    return _ensure(src, gptq_dir(src, scheme), what, make, log)


def ensure_dequantized(
    gptq: str | os.PathLike[str], dtype: str = "bfloat16", log: Log = print
) -> Path:
    """An unquantized copy of the GPTQ checkpoint `gptq`: every layer's
    weight dequantized (the values our kernels multiply by) in `dtype`, made
    on first use beside it. vLLM's own kernels serve it where vLLM cannot
    load the GPTQ checkpoint, so both sides run on the same weights."""
    from vllm_myops.cli.quantize import dequantize_checkpoint

    gptq = Path(gptq)

    def make(s: Path, o: Path) -> None:
        log(f"dequantizing {s.name} to {dtype} (once) ...")
        dequantize_checkpoint(s, o, dtype)

    out = gptq.with_name(f"{gptq.name}-dequant-{dtype.replace('float', 'f')}")
    return _ensure(gptq, out, {"dequantized": dtype}, make, log)

# SPDX-License-Identifier: Apache-2.0
"""``vllm-myops quantize MODEL OUT``: an fp16/bf16 Hugging Face checkpoint
to a 4-bit GPTQ-format one (round to nearest), which vLLM's own ``gptq``
path and ``--quantization myops_w4a16`` both load.

Every 2-D ``*.weight`` inside the decoder layers (``.layers.``) becomes
``qweight`` [K/8, N] int32 packed along K, ``qzeros`` [G, N/8] (GPTQ v1:
z - 1; symmetric: 7), ``scales`` [G, N] in the model's dtype (the dtype it
is served in, so vLLM multiplies by exactly these scales) and ``g_idx`` [K].
Embeddings, lm_head and norms stay as they are.

``--act-order``: the input rows are ordered by descending L2 norm of the
weight's column (GPTQ orders by the Hessian diagonal; without calibration
data the weights' own norms stand in), groups are cut in that order and
``g_idx`` says which group each row fell into (``desc_act: true``). Weights
of one module with the same input size (q/k/v_proj, gate/up_proj) get one
order from their stacked columns, as GPTQ's shared input Hessian gives
them: vLLM fuses them into one layer with one g_idx.

vLLM 0.32 on CPU loads only symmetric, non-act-order GPTQ with K and N
multiples of 32 and a group that divides K (SmolLM2's K = 576: group 64);
ours also loads asymmetric, act-order and partial last groups.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

GPTQ_TENSORS = ("qweight", "qzeros", "scales", "g_idx")


def add_parser(subparsers: Any) -> None:
    ap = subparsers.add_parser(
        "quantize",
        help="write a 4-bit GPTQ-format checkpoint (RTN) of an HF model",
        description=__doc__.split("\n\n")[0],
    )
    ap.add_argument("model", help="Hugging Face model directory (fp16/bf16)")
    ap.add_argument("out", help="output directory")
    ap.add_argument("--group-size", type=int, default=128, choices=(-1, 32, 64, 128))
    sym = ap.add_mutually_exclusive_group()
    sym.add_argument(
        "--sym",
        dest="sym",
        action="store_true",
        default=True,
        help="symmetric (zero point 8; the default, vLLM's gptq needs it)",
    )
    sym.add_argument(
        "--asym",
        dest="sym",
        action="store_false",
        help="asymmetric (per-group zero points)",
    )
    ap.add_argument(
        "--act-order",
        action="store_true",
        help="desc_act: groups cut in descending column-norm order",
    )
    ap.set_defaults(run=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    cfg = quantize_checkpoint(
        args.model,
        args.out,
        group_size=args.group_size,
        sym=args.sym,
        act_order=args.act_order,
    )
    print(f"wrote {args.out}: {json.dumps(cfg['quantization_config'])}")
    return 0


def is_quantized_weight(name: str, shape: tuple[int, ...]) -> bool:
    return name.endswith(".weight") and len(shape) == 2 and ".layers." in name


def act_order_g_idx(weight_kn: Any, group_size: int) -> Any:
    """g_idx [K] (int32) of act-order groups: rows sorted by descending
    column norm of W [K, N], cut into groups of group_size in that order."""
    import torch

    from vllm_myops.quantization import reference

    size_k = weight_kn.shape[0]
    order = torch.argsort(weight_kn.float().norm(dim=1), descending=True, stable=True)
    g_idx = torch.empty(size_k, dtype=torch.int32)
    g_idx[order] = reference.default_g_idx(size_k, group_size)
    return g_idx


def shared_g_idx(tensors: dict[str, Any], group_size: int) -> dict[str, Any]:
    """Act-order g_idx per weight name: one per (parent module, K), from the
    column norms of all of that module's weights with that input size."""
    import torch

    by_key: dict[tuple[str, int], list[str]] = {}
    for name, t in tensors.items():
        if is_quantized_weight(name, tuple(t.shape)):
            parent = name.rsplit(".", 2)[0]
            by_key.setdefault((parent, t.shape[1]), []).append(name)
    out = {}
    for names in by_key.values():
        stacked = torch.cat([tensors[n].float() for n in names], dim=0)  # [sum N, K]
        g_idx = act_order_g_idx(stacked.t(), group_size)
        out.update(dict.fromkeys(names, g_idx))
    return out


def quantize_weight(
    weight_nk: Any, group_size: int, sym: bool, act_order: bool, g_idx: Any = None
) -> dict[str, Any]:
    """GPTQ tensors (v1 qzeros) of one HF weight [N, K]; act-order groups
    from `g_idx` when given, else from this weight's column norms."""
    import torch

    from vllm_myops.quantization import reference
    from vllm_myops.quantization.gptq_format import pack_gptq_zeros

    w = weight_nk.t()  # [K, N]
    size_k, size_n = w.shape
    if size_k % reference.PACK or size_n % reference.PACK:
        raise ValueError(
            f"weight: K and N must be multiples of 8 for GPTQ packing, got "
            f"K={size_k}, N={size_n}"
        )
    if act_order:
        # A copy per weight: safetensors refuses tensors that share memory.
        g_idx = act_order_g_idx(w, group_size) if g_idx is None else g_idx.clone()
        perm = torch.sort(g_idx.long(), stable=True).indices
        codes_p, scales, zeros = reference.quantize_rtn(w[perm], group_size, sym)
        codes = torch.empty_like(codes_p)
        codes[perm] = codes_p
    else:
        g_idx = reference.default_g_idx(size_k, group_size)
        codes, scales, zeros = reference.quantize_rtn(w, group_size, sym)
    return {
        "qweight": reference.pack_int4(codes, 0),
        "qzeros": pack_gptq_zeros(zeros, scales.shape[0], size_n),
        "scales": scales.contiguous(),
        "g_idx": g_idx,
    }


def _load_tensors(model_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"model: no *.safetensors in {model_dir}")
    tensors: dict[str, Any] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def _copy_side_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if (
            f.is_file()
            and not f.name.endswith(".safetensors")
            and not f.name.endswith(".safetensors.index.json")
            and f.name != "config.json"
        ):
            shutil.copy2(f, dst / f.name)


def quantize_checkpoint(
    model: str | Path,
    out: str | Path,
    group_size: int = 128,
    sym: bool = True,
    act_order: bool = False,
) -> dict[str, Any]:
    """Writes the GPTQ checkpoint of `model` to `out`; returns its config."""
    from safetensors.torch import save_file

    model, out = Path(model), Path(out)
    config = json.loads((model / "config.json").read_text())
    if config.get("quantization_config"):
        raise ValueError(f"model: {model} is already quantized")
    tensors = _load_tensors(model)
    shared = shared_g_idx(tensors, group_size) if act_order else {}
    result: dict[str, Any] = {}
    n_quantized = 0
    for name, t in tensors.items():
        if is_quantized_weight(name, tuple(t.shape)):
            prefix = name[: -len(".weight")]
            q = quantize_weight(t, group_size, sym, act_order, shared.get(name))
            for key, v in q.items():
                result[f"{prefix}.{key}"] = v
            n_quantized += 1
        else:
            result[name] = t.contiguous()
    if not n_quantized:
        raise ValueError(f"model: no linear weights under '.layers.' in {model}")
    config["quantization_config"] = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": group_size,
        "desc_act": act_order,
        "sym": sym,
        "checkpoint_format": "gptq",
        "lm_head": False,
    }
    _copy_side_files(model, out)
    save_file(result, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return config


def dequantize_checkpoint(
    gptq_dir: str | Path, out: str | Path, dtype: str = "float32"
) -> Path:
    """An unquantized HF checkpoint (in `dtype`) of a GPTQ one: every layer's
    weight is reference.dequantize of its codes, as our kernels see it; the
    rest is copied. The reference the e2e tests compare served outputs to."""
    import torch
    from safetensors.torch import save_file

    from vllm_myops.quantization import reference
    from vllm_myops.quantization.gptq_format import gptq_zeros

    gptq_dir, out = Path(gptq_dir), Path(out)
    config = json.loads((gptq_dir / "config.json").read_text())
    q = config.pop("quantization_config")
    if q.get("quant_method") != "gptq" or q.get("bits") != 4:
        raise ValueError(f"gptq_dir: not a 4-bit GPTQ checkpoint: {q}")
    tensors = _load_tensors(gptq_dir)
    fmt = q.get("checkpoint_format", "gptq")
    result: dict[str, Any] = {}
    torch_dtype = getattr(torch, dtype)
    for name, t in tensors.items():
        if name.endswith(".qweight"):
            prefix = name[: -len(".qweight")]
            size_k, size_n = t.shape[0] * reference.PACK, t.shape[1]
            codes = reference.unpack_int4(t, 0, size_k)
            zeros = gptq_zeros(tensors[f"{prefix}.qzeros"], size_n, q["sym"], fmt)
            w = reference.dequantize(
                codes,
                tensors[f"{prefix}.scales"],
                zeros,
                q["group_size"],
                tensors.get(f"{prefix}.g_idx"),
            )
            result[f"{prefix}.weight"] = w.t().contiguous().to(torch_dtype)
        elif name.rsplit(".", 1)[-1] in GPTQ_TENSORS:
            continue
        else:
            result[name] = t.to(torch_dtype) if t.is_floating_point() else t
    config["torch_dtype"] = dtype
    _copy_side_files(gptq_dir, out)
    save_file(result, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out

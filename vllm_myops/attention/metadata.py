# SPDX-License-Identifier: Apache-2.0
"""The CUSTOM backend's per-step metadata and its builder.

The metadata is the paged_attention op's arguments, taken from vLLM's
CommonAttentionMetadata without a copy (CUDA graphs replay the tensors at
the addresses they were captured with, so no new tensor is made when the
dtypes already match) and without a device-to-host sync: the two host
hints (max_query_len, max_seq_len) are the host ints vLLM already has.

One batch mixes decode rows (q_len 1) and prefill / chunked-prefill rows in
any order: the kernel reads each row's q_len from query_start_loc, so no
reordering is asked for (reorder_batch_threshold None).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from vllm_myops.attention import vllm_compat

logger = logging.getLogger("vllm.myops")

_, _, _Builder, _CGSupport, _ = vllm_compat.backend_classes()


@dataclass
class MyopsAttentionMetadata:
    num_actual_tokens: int  # T: rows of q/k/v/out that are real tokens
    max_query_len: int  # host hint, >= every q_len
    max_seq_len: int  # host hint, >= every seq_len
    query_start_loc: torch.Tensor  # int32 [B+1], cumulative from 0
    seq_lens: torch.Tensor  # int32 [B], context incl. this step's tokens
    block_table: torch.Tensor  # int32 [B, max_blocks_per_seq]
    slot_mapping: torch.Tensor  # int64 [>= T]; < 0 = padding (skipped)

    @property
    def num_reqs(self) -> int:
        return int(self.seq_lens.shape[0])


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # No copy (same address) when vLLM's dtype is already the op's.
    return t if t.dtype == dtype else t.to(dtype)


def metadata_from_common(
    common: Any, max_seq_len: int | None = None
) -> MyopsAttentionMetadata:
    """The op arguments of one step from a CommonAttentionMetadata.
    ``max_seq_len`` overrides the hint (an upper bound, for CUDA-graph
    capture)."""
    if not isinstance(common.causal, bool) or not common.causal:
        raise NotImplementedError(
            "vllm-myops CUSTOM attention: only causal decoder attention is "
            f"supported, got causal={common.causal!r}"
        )
    seq_lens = _as(common.seq_lens, torch.int32)
    num_reqs = int(seq_lens.shape[0])
    return MyopsAttentionMetadata(
        num_actual_tokens=int(common.num_actual_tokens),
        max_query_len=int(common.max_query_len),
        max_seq_len=int(common.max_seq_len if max_seq_len is None else max_seq_len),
        query_start_loc=_as(common.query_start_loc, torch.int32)[: num_reqs + 1],
        seq_lens=seq_lens,
        block_table=_as(common.block_table_tensor, torch.int32)[:num_reqs],
        slot_mapping=_as(common.slot_mapping, torch.int64),
    )


class MyopsAttentionMetadataBuilder(_Builder):  # type: ignore[misc,valid-type]
    # CUDA graphs: pure decode batches (q_len 1). Building needs no host
    # sync, and the capture build passes max_model_len as max_seq_len (the
    # kernel stays correct for any hint >= the true maximum), so a replay at
    # a longer context than the capture's is still right. Mixed batches are
    # not claimed: their max_query_len would be frozen at capture. Cost of
    # the bound: a replay takes the decode splits planned for
    # max_model_len, whatever the batch's real context (CTAs past a
    # sequence's context exit at once).
    _cudagraph_support: ClassVar[Any] = _CGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    reorder_batch_threshold: int | None = None

    def __init__(
        self,
        kv_cache_spec: Any,
        layer_names: list[str],
        vllm_config: Any,
        device: torch.device,
    ) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.kv_cache_spec = kv_cache_spec
        self.vllm_config = vllm_config
        model_config = getattr(vllm_config, "model_config", None)
        self.max_model_len = (
            int(model_config.max_model_len) if model_config is not None else None
        )
        from vllm_myops.attention.backend import log_startup  # (import cycle)

        log_startup(self)

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: Any,
        fast_build: bool = False,
    ) -> MyopsAttentionMetadata:
        return metadata_from_common(common_attn_metadata)

    def build_for_cudagraph_capture(
        self, common_attn_metadata: Any
    ) -> MyopsAttentionMetadata:
        bound = self.max_model_len or int(common_attn_metadata.max_seq_len)
        return metadata_from_common(
            common_attn_metadata,
            max_seq_len=max(bound, int(common_attn_metadata.max_seq_len)),
        )

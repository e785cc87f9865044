# SPDX-License-Identifier: Apache-2.0
"""``--attention-backend CUSTOM``: vllm_myops' paged attention as a vLLM
attention backend (registered by vllm_myops.attention.registration).

Each attention layer's forward is two ops on the layer's KV cache
``[num_blocks, H_kv, block_size, 2*D]`` (K in ``[..., :D]``, V in
``[..., D:]``): ``paged_kv_write`` of this step's keys and values into their
slots, then ``paged_attention`` over the whole batch (decode and prefill
rows mixed, causal, GQA/MQA) into vLLM's output buffer.

What is declared and why (vLLM checks it in validate_configuration on CUDA;
on the CPU, registration.py's wrapper of the platform's selector checks it
the same way, and the impl refuses what a version's selector does not ask
about):

- dtypes fp16/bf16 (fp32 softmax statistics and accumulation inside);
- head sizes 64, 128, 256 (the kernels' contract);
- block sizes: multiples of 16;
- KV-cache dtype "auto" only (no fp8 cache);
- decoder self-attention only, causal; no sliding window, ALiBi, logits
  soft-cap, attention sinks, MLA, sparse, encoder or cross attention;
- CUDA graphs: UNIFORM_SINGLE_TOKEN_DECODE (metadata.py says why).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from vllm_myops import ops
from vllm_myops.attention import vllm_compat
from vllm_myops.attention.metadata import (
    MyopsAttentionMetadata,
    MyopsAttentionMetadataBuilder,
)
from vllm_myops.observability import counters

logger = logging.getLogger("vllm.myops")

_Backend, _Impl, _, _, _AttentionType = vllm_compat.backend_classes()

NAME = "CUSTOM"
CLASS_PATH = "vllm_myops.attention.backend.MyopsAttentionBackend"
HEAD_SIZES = (64, 128, 256)
BLOCK_SIZE_MULTIPLE = 16
SPEC = ops.op("paged_attention")
_SLOT = counters.slot(SPEC.name, ops.PROVIDER)

# Debugging only: MYOPS_ATTENTION_KERNELS=reference runs the plain-torch
# reference (vllm_myops.attention.reference, same signatures; slow) in place
# of the compiled ops. Named in the start-up line when used.
ENV_KERNELS = "MYOPS_ATTENTION_KERNELS"

# Set by registration.register(): whether the kernels can run here.
KERNELS: dict[str, Any] = {"supported": False, "reason": "register() not called"}


@dataclass(frozen=True)
class Kernels:
    name: str  # what the start-up line says runs
    kv_write: Any
    attention: Any


def kernels() -> Kernels:
    """The ops forward() calls: the compiled ones, or the reference when
    MYOPS_ATTENTION_KERNELS=reference."""
    choice = os.environ.get(ENV_KERNELS, "") or "compiled"
    if choice == "reference":
        from vllm_myops.attention import reference

        return Kernels(
            f"vllm_myops.attention.reference (plain torch, {ENV_KERNELS}=reference)",
            reference.paged_kv_write_ref,
            reference.paged_attention_ref,
        )
    if choice != "compiled":
        raise ValueError(
            f"{ENV_KERNELS}: expected 'compiled' or 'reference', got {choice!r}"
        )
    if not KERNELS["supported"]:
        raise RuntimeError(
            "--attention-backend CUSTOM: the vllm_myops paged attention kernels "
            f"are unavailable ({KERNELS['reason']}); serve without "
            "--attention-backend CUSTOM, or fix the build (`vllm-myops doctor` "
            "says more)"
        )
    from vllm_myops import _custom_ops

    return Kernels(
        f"_myops_C.paged_kv_write + _myops_C.paged_attention ({KERNELS['reason']})",
        _custom_ops.paged_kv_write,
        _custom_ops.paged_attention,
    )


def _get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list[Any]:
    # 0.24 calls this with no argument, 0.32 may pass kv_cache_spec.
    return [vllm_compat.multiple_of(BLOCK_SIZE_MULTIPLE)]


class MyopsAttentionBackend(_Backend):  # type: ignore[misc,valid-type]
    # forward() writes the new K/V itself (paged_kv_write, then attention).
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    get_supported_kernel_block_sizes = staticmethod(_get_supported_kernel_block_sizes)

    @staticmethod
    def get_name() -> str:
        return NAME  # vLLM looks the layer's backend up in the enum by this

    @staticmethod
    def get_impl_cls() -> type[MyopsAttentionImpl]:
        return MyopsAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[MyopsAttentionMetadataBuilder]:
        return MyopsAttentionMetadataBuilder

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(HEAD_SIZES)

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_size: int,
        cache_dtype_str: str = "auto",
    ) -> tuple[int, ...]:
        # 0.24 only (0.32 derives the view from supported_kv_cache_layouts).
        return vllm_compat.kv_cache_shape(
            num_blocks, block_size, num_kv_heads, head_size
        )

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[Any, ...] | None:
        return vllm_compat.supported_kv_cache_layouts()

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == _AttentionType.DECODER

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return False

    @classmethod
    def supports_sink(cls) -> bool:
        return False

    @classmethod
    def supports_non_causal(cls) -> bool:
        return False


def unsupported_features(
    *,
    num_heads: int,
    head_size: int,
    num_kv_heads: int | None,
    alibi_slopes: Any,
    sliding_window: int | None,
    kv_cache_dtype: str,
    logits_soft_cap: float | None,
    attn_type: str,
    sinks: Any,
) -> list[str]:
    """What a layer asks for that the backend does not do, each named."""
    out = []
    if alibi_slopes is not None:
        out.append("ALiBi (alibi_slopes)")
    if sliding_window is not None and sliding_window != -1:
        out.append(f"sliding window (sliding_window={sliding_window})")
    if logits_soft_cap:
        out.append(f"logits soft-cap (logits_soft_cap={logits_soft_cap})")
    if sinks is not None:
        out.append("attention sinks (sinks)")
    if attn_type != _AttentionType.DECODER:
        out.append(f"attention type {attn_type} (only decoder self-attention)")
    if kv_cache_dtype != "auto":
        out.append(f"kv_cache_dtype={kv_cache_dtype!r} (only 'auto')")
    if head_size not in HEAD_SIZES:
        out.append(f"head_size={head_size} (supported: {list(HEAD_SIZES)})")
    kv = num_heads if num_kv_heads is None else num_kv_heads
    if kv <= 0 or num_heads % kv:
        out.append(f"num_heads={num_heads} not a multiple of num_kv_heads={kv}")
    return out


_logged_layout = False


class MyopsAttentionImpl(_Impl):  # type: ignore[misc,valid-type]
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = _AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
        **extra: Any,
    ) -> None:
        refused = unsupported_features(
            num_heads=num_heads,
            head_size=head_size,
            num_kv_heads=num_kv_heads,
            alibi_slopes=alibi_slopes,
            sliding_window=sliding_window,
            kv_cache_dtype=kv_cache_dtype,
            logits_soft_cap=logits_soft_cap,
            attn_type=attn_type,
            sinks=sinks,
        )
        if extra:
            refused.append(f"options {sorted(extra)}")
        if refused:
            raise NotImplementedError(
                "vllm-myops CUSTOM attention does not support: " + "; ".join(refused)
            )
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.kernels = kernels()  # raises here (model build) when unavailable
        self._checked_cache = False

    def _check_kv_cache(self, kv_cache: torch.Tensor) -> None:
        """Once per layer: the cache vLLM hands us is the contiguous
        [num_blocks, H_kv, block_size, 2*D] the ops read."""
        global _logged_layout
        ok = (
            kv_cache.dim() == 4
            and kv_cache.shape[1] == self.num_kv_heads
            and kv_cache.shape[3] == 2 * self.head_size
            and kv_cache.is_contiguous()
        )
        if not ok:
            raise RuntimeError(
                "vllm-myops CUSTOM attention: kv_cache must be a contiguous "
                f"[num_blocks, {self.num_kv_heads}, block_size, {2 * self.head_size}] "
                f"tensor, got shape {tuple(kv_cache.shape)} strides "
                f"{kv_cache.stride()}"
            )
        if not _logged_layout:
            _logged_layout = True
            logger.info(
                "vllm-myops: CUSTOM attention kv_cache per layer: shape %s, "
                "strides %s, %s (contiguous)",
                tuple(kv_cache.shape),
                kv_cache.stride(),
                kv_cache.dtype,
            )
        self._checked_cache = True

    def forward(
        self,
        layer: Any,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor | None,
        kv_cache: torch.Tensor,
        attn_metadata: MyopsAttentionMetadata | None,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError(
                "vllm-myops CUSTOM attention: fused output quantization "
                "(output_scale / output_block_scale) is not supported"
            )
        if attn_metadata is None:  # profiling / warm-up run: no cache yet
            return output
        if not self._checked_cache:
            self._check_kv_cache(kv_cache)
        n = attn_metadata.num_actual_tokens
        # Layers sharing an earlier layer's cache write nothing.
        if (
            self.kv_sharing_target_layer_name is None
            and key is not None
            and value is not None
        ):
            self.kernels.kv_write(
                key[:n], value[:n], kv_cache, attn_metadata.slot_mapping
            )
        out = output[:n]
        self.kernels.attention(
            out,
            query[:n],
            kv_cache,
            attn_metadata.query_start_loc,
            attn_metadata.seq_lens,
            attn_metadata.block_table,
            self.scale,
            attn_metadata.max_query_len,
            attn_metadata.max_seq_len,
        )
        if counters.ENABLED:
            counters.tick(out.flatten(1), _SLOT)  # rows = tokens (n may be 0)
        return output


_logged_startup = False


def startup_line(builder: Any) -> str:
    spec = builder.kv_cache_spec
    q_heads = "?"
    try:
        cfg = builder.vllm_config
        q_heads = cfg.model_config.get_num_attention_heads(cfg.parallel_config)
    except Exception:
        pass
    try:
        runs = kernels().name
    except Exception as e:  # the impls raised this already at model build
        runs = f"no kernels ({e})"
    return (
        f"vllm-myops: attention backend {NAME} (MyopsAttentionBackend) runs "
        f"{runs}; {len(builder.layer_names)} layers, "
        f"{q_heads} q / {getattr(spec, 'num_kv_heads', '?')} kv heads, "
        f"head_size {getattr(spec, 'head_size', '?')}, "
        f"block_size {getattr(spec, 'block_size', '?')}, "
        f"{getattr(spec, 'dtype', '?')}"
    )


def log_startup(builder: Any) -> None:
    """Once per process, when vLLM builds the first metadata builder."""
    global _logged_startup
    if not _logged_startup:
        _logged_startup = True
        logger.info("%s", startup_line(builder))

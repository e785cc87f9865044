# SPDX-License-Identifier: Apache-2.0
"""What `tools.profile system` needs from vLLM's in-process LLM API, across
the versions it runs on (vLLM 0.32 on CPU here, vLLM 0.24 on the GPU machine).

Read in both sources: LLM(...) forwards its keyword arguments to EngineArgs
(kv_cache_memory_bytes, max_model_len, load_format, enforce_eager,
async_scheduling; kernel_config as a dict turned into KernelConfig by
EngineArgs.__post_init__), LLMEngine.add_request/step/has_unfinished_requests
and RequestOutputKind are the same in both. The step annotations are this
tool's own record_function ranges: vLLM writes its `execute_context_...`
ones only under its own profiler (profiler_config, whose fields differ
between the two versions), which this tool does not use.

What does differ is kept here:
- an LLM argument the running vLLM's EngineArgs lacks is dropped with a
  note instead of failing the run (names come and go between versions);
- async scheduling (on by default on CUDA, off on CPU) is switched off: with
  it, engine.step() returns the previous batch's tokens while the next batch
  runs, so a step could not be named by its outputs, and the per-step
  synchronize serialises the steps anyway;
- cumulative outputs are asked for where SamplingParams has output_kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any


def engine_arg_names() -> set[str]:
    """The fields of the installed vLLM's EngineArgs (what LLM(...) accepts
    besides its own named parameters)."""
    from vllm.engine.arg_utils import EngineArgs  # noqa: PLC0415

    return {f.name for f in dataclasses.fields(EngineArgs)}


def llm_kwargs(
    wanted: dict[str, Any], accepted: Iterable[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(the arguments for vllm.LLM, the names dropped): async scheduling off
    where the version has it, and only the names `accepted` (default: this
    vLLM's EngineArgs fields) kept."""
    names = set(engine_arg_names() if accepted is None else accepted)
    kw = dict(wanted)
    if "async_scheduling" in names:
        kw.setdefault("async_scheduling", False)
    dropped = sorted(k for k in kw if k not in names)
    return {k: v for k, v in kw.items() if k in names}, dropped


def cumulative_outputs(params: Any) -> Any:
    """`params` with cumulative outputs (each step's RequestOutput holds all
    tokens so far), where this vLLM's SamplingParams has output_kind."""
    try:
        from vllm.sampling_params import RequestOutputKind  # noqa: PLC0415
    except ImportError:
        return params
    if hasattr(params, "output_kind"):
        params.output_kind = RequestOutputKind.CUMULATIVE
    return params

# SPDX-License-Identifier: Apache-2.0
"""Child process of test_plugin_dispatch.py::test_vllm_ir_lowering_pipeline:
torch.compile (Inductor) with vLLM IR torch wrapping on and vLLM's own
post-grad IR passes (lowering, then clone elimination), the pipeline vLLM
runs in its default compiled mode on CUDA. The IR ops stay opaque through
Dynamo and AOTAutograd; the lowering pass then traces the chosen provider's
impl into the post-grad graph (an in-place impl on clones of its inputs) and
clone elimination asserts that each such clone has at most one writer.

    python -m tests.plugin._ir_lowering_run DEVICE
prints one line ``RESULT {json}``: per provider, the call counts (when
counting is on) and the max |difference| from the same function run eagerly
(with the largest |value|, for a relative bound).
"""

from __future__ import annotations

import json
import sys

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass


def main(device: str) -> None:
    from vllm import ir
    from vllm.compilation.passes.inductor_pass import pass_context
    from vllm.compilation.passes.ir.clone_elimination import (
        UnsafeCloneEliminationPass,
    )
    from vllm.compilation.passes.ir.lowering_pass import VllmIRLoweringPass
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.config.utils import Range

    import vllm_myops
    from vllm_myops.observability import counters, stats_files

    vllm_myops.register()
    config = VllmConfig()

    class VllmIrPasses(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            with set_current_vllm_config(config), pass_context(Range(1, 1 << 16)):
                VllmIRLoweringPass(config)(graph)
                UnsafeCloneEliminationPass(config)(graph)

        def uuid(self) -> None:  # no Inductor cache entry: always run the passes
            return None

    def f(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor):
        y = ir.ops.rms_norm(x, w, 1e-6)
        out, res = ir.ops.fused_add_rms_norm(y, r, w, 1e-6)
        return out * 2, res

    gen = torch.Generator(device="cpu").manual_seed(0)
    x, r = (torch.randn(5, 256, generator=gen) for _ in range(2))
    w = torch.randn(256, generator=gen)
    x, r, w = (t.to(device=device, dtype=torch.bfloat16) for t in (x, r, w))
    runs = 7
    result = {}
    for provider in ("myops", "native"):
        prio = [provider] if provider == "native" else [provider, "native"]
        with (
            ir.ops.rms_norm.set_priority(prio),
            ir.ops.fused_add_rms_norm.set_priority(prio),
        ):
            ir.set_default_torch_wrap(False)
            expected = f(x, r.clone(), w)
            ir.set_default_torch_wrap(True)
            torch._dynamo.reset()
            compiled = torch.compile(
                f,
                backend="inductor",
                fullgraph=True,
                options={"post_grad_custom_post_pass": VllmIrPasses()},
            )
            counters.reset()
            outs = [compiled(x, r.clone(), w) for _ in range(runs)]
            if device == "cuda":
                torch.cuda.synchronize()
        scale = max(e.float().abs().max().item() for e in expected)
        diff = max(
            (o.float() - e.float()).abs().max().item()
            for out in outs
            for o, e in zip(out, expected)
        )
        result[provider] = {
            "calls": stats_files.snapshot()["calls"] if counters.ENABLED else None,
            "max_abs_diff": diff,
            "max_abs_expected": scale,
            "runs": runs,
        }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

# SPDX-License-Identifier: Apache-2.0
"""The Hugging Face fp32 reference of a teacher-forced run (a script, not a
test): the checkpoint's weights (bf16 on disk) loaded as fp32 into
``transformers``, no vLLM in the process, and for each prompt the rows of
tests.plugin._teacher_forced computed from fp32 logits. Highest fp32 matmul
precision (no TF32 on CUDA), so the reference has no bf16 rounding anywhere
after the weights themselves.

Usage: python -m tests.plugin._hf_reference_run --model DIR
           --teacher-prompts FILE.json --device cpu|cuda --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import time


def load_fp32_model(model_dir: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    except TypeError:  # transformers 4.x before `dtype`
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, torch_dtype=torch.float32
        )
    # fp32 whatever the loader made of the argument (older versions may
    # ignore an unknown keyword rather than refuse it).
    return model.to(device=device, dtype=torch.float32).eval()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--teacher-prompts", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch

    from tests.plugin._engine_run import read_prompts
    from tests.plugin._teacher_forced import rows_from_logprobs

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    prompts = read_prompts(args.teacher_prompts)

    t0 = time.time()
    model = load_fp32_model(args.model, args.device)
    t_load = time.time() - t0
    teacher = []
    top_logits = []  # the size of the best logits sets their bf16 ulp
    with torch.inference_mode():
        for ids in prompts:
            x = torch.tensor([ids], device=args.device)
            logits = model(input_ids=x).logits[0].float()
            teacher.append(rows_from_logprobs(ids, torch.log_softmax(logits, dim=-1)))
            top_logits += logits[:-1].abs().amax(dim=-1).tolist()
    t_run = time.time() - t0 - t_load
    run = {
        "model": args.model,
        "provider": "hf-fp32",
        "device": args.device,
        "teacher": teacher,
        "max_abs_logit": max(top_logits),
        "median_max_abs_logit": sorted(top_logits)[len(top_logits) // 2],
        "time_load_s": round(t_load, 1),
        "time_requests_s": round(t_run, 1),
    }
    print(
        f"[hf-reference] {args.device}: load {t_load:.1f}s, {len(prompts)} prompts "
        f"in {t_run:.1f}s",
        flush=True,
    )
    with open(args.out, "w") as f:
        json.dump({"runs": [run]}, f)


if __name__ == "__main__":
    main()

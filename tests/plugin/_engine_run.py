# SPDX-License-Identifier: Apache-2.0
"""The engine-run plumbing of the plugin tests' vLLM scripts (imported as
tests.plugin._engine_run, inside a subprocess that may start vLLM): one
``vllm.LLM`` at a time with its own counters directory, teacher-forced
scoring of token-id prompts, and a runner that writes each finished run
at once. It knows no op family: the scripts say what to run and which
counters to read.

API (kept small and stable: other scripts build on it):

- ``started(**llm_kwargs)``: context manager; ``vllm.LLM(**llm_kwargs)``
  with a fresh ``MYOPS_STATS_DIR`` (read by the engine's spawned
  processes), yields an ``Engine``; the engine core is shut down on exit,
  so the next engine can start in the same process (one vLLM import).
  On the CPU the engine core runs in this process (vLLM's
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and the model in its usual worker
  process (``distributed_executor_backend="mp"`` unless given): one process
  start and vLLM import less per engine, the same worker, kernels and
  counters.
- ``Engine.llm``, ``Engine.stats_dir``, ``Engine.time_start_s``;
  ``Engine.counters()``: the plugin's counters summed over the engine's
  processes once they stopped changing.
- ``score(llm, prompt_ids, max_tokens=1)``: one request per prompt,
  ``prompt_logprobs=2`` (teacher forcing over the prompt) and
  ``max_tokens`` greedy tokens with ``logprobs=2`` (``ignore_eos``).
  Returns ``{"teacher", "generated", "time_requests_s"}``: per prompt the
  rows of tests.plugin._teacher_forced for the prompt and for the
  generated tokens.
- ``read_prompts(path)``: the token-id lists of ``{"prompts": [[id]]}``.
- ``wait_for(path, timeout_s)``: until a file appears (e.g. a checkpoint
  another process is writing).
- ``run_all(specs, run_one, out)``: ``run_one(spec)`` for each spec, the
  list of results written to ``out`` as ``{"runs": [...]}`` after every
  run (what finished survives a later failure).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

STATS_INTERVAL_ENV = "MYOPS_STATS_INTERVAL"
DEFAULT_STATS_INTERVAL_S = "0.25"


@dataclass
class Engine:
    llm: Any
    stats_dir: str
    time_start_s: float

    def counters(self, max_wait_s: float = 10) -> dict[str, Any]:
        from vllm_myops.observability.stats_files import read_settled

        interval = float(os.environ[STATS_INTERVAL_ENV])
        return read_settled(self.stats_dir, interval, max_wait_s=max_wait_s)


@contextlib.contextmanager
def started(**llm_kwargs: Any) -> Iterator[Engine]:
    os.environ.setdefault(STATS_INTERVAL_ENV, DEFAULT_STATS_INTERVAL_S)
    stats_dir = tempfile.mkdtemp(prefix="myops-stats-")
    os.environ["MYOPS_STATS_DIR"] = stats_dir  # read by the spawned processes

    from vllm import LLM
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        llm_kwargs.setdefault("distributed_executor_backend", "mp")
    t0 = time.time()
    llm = LLM(**llm_kwargs)
    engine = Engine(llm, stats_dir, round(time.time() - t0, 1))
    try:
        yield engine
    finally:
        llm.llm_engine.engine_core.shutdown()
        engine.llm = None
        del llm
        gc.collect()


def _generated_rows(completion: Any) -> list[dict]:
    from tests.plugin._teacher_forced import position_row

    rows = []
    for tok, lp in zip(completion.token_ids, completion.logprobs or []):
        ranked = sorted((v.rank, t, v.logprob) for t, v in lp.items() if v.rank)
        top = [(t, float(g)) for r, t, g in ranked if r in (1, 2)]
        second = top[1][1] if len(top) > 1 else None
        rows.append(position_row(tok, lp[tok].logprob, top[0][0], top[0][1], second))
    return rows


def score(llm: Any, prompt_ids: list[list[int]], max_tokens: int = 1) -> dict:
    from vllm import SamplingParams

    from tests.plugin._teacher_forced import rows_from_prompt_logprobs

    t0 = time.time()
    prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
    params = SamplingParams(
        temperature=0.0,
        max_tokens=max_tokens,
        ignore_eos=True,
        prompt_logprobs=2,
        logprobs=2,
    )
    outs = llm.generate(prompts, params, use_tqdm=False)
    return {
        "teacher": [
            rows_from_prompt_logprobs(ids, o.prompt_logprobs)
            for ids, o in zip(prompt_ids, outs)
        ],
        "generated": [_generated_rows(o.outputs[0]) for o in outs],
        "time_requests_s": round(time.time() - t0, 2),
    }


def read_prompts(path: str) -> list[list[int]]:
    with open(path) as f:
        return [list(map(int, ids)) for ids in json.load(f)["prompts"]]


def wait_for(path: str | None, timeout_s: float = 1200) -> None:
    t0 = time.time()
    while path and not os.path.exists(path):
        if time.time() - t0 > timeout_s:
            raise TimeoutError(f"wait_for: {path} did not appear in {timeout_s} s")
        time.sleep(0.5)


def run_all(specs: list[dict], run_one: Callable[[dict], dict], out: str) -> None:
    runs = []
    for spec in specs:
        runs.append(run_one(spec))
        with open(out, "w") as f:
            json.dump({"runs": runs}, f)

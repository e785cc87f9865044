# SPDX-License-Identifier: Apache-2.0
"""The counting op registers and counts on the installed torch, with no vLLM
(so the same test runs on every torch the project supports, including a GPU
machine's without vLLM): counting on from the environment defines it at
import, as in every vLLM process of `vllm-myops serve`."""

from __future__ import annotations

import json
import os

from tests.plugin._helpers import run_python

CHILD = r"""
import json, torch
from torch._subclasses.fake_tensor import FakeTensorMode
from vllm_myops.observability import counters as c
c.tick(torch.ones(4, 5), 0)                       # a real call: counted, 4 rows
c.tick(torch.empty(2, 3, device="meta"), 0)       # meta: never ran, not counted
with FakeTensorMode():
    c.tick(torch.empty(6, 7), 0)                  # traced: not counted
compiled = torch.compile(lambda t: c.tick(t, 1), fullgraph=True)
compiled(torch.ones(3, 8))                        # inside a compiled graph: counted
print(json.dumps({"calls": c.calls[:2], "rows": c.rows[:2]}))
"""


def _last_json_line(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_counting_op_defines_and_counts_when_enabled_at_import() -> None:
    env = dict(os.environ, MYOPS_STATS="1")
    env.pop("MYOPS_STATS_DIR", None)
    got = _last_json_line(run_python(CHILD, timeout=300, env=env).stdout)
    assert got == {"calls": [1, 1], "rows": [4, 3]}, got


FORK_CHILD = r"""
import json, multiprocessing as mp, os
from vllm_myops.observability import counters as c
first = c.STATS_DIR
os.environ["MYOPS_STATS_DIR"] = first + "-second"   # the next engine's directory

def child(q):
    q.put(c.STATS_DIR)

ctx = mp.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start(); got = q.get(timeout=60); p.join()
print(json.dumps({"first": first, "child": got}))
"""


def test_forked_child_writes_where_its_environment_says(tmp_path) -> None:
    """A process that starts two vLLM engines one after the other, each with
    its own MYOPS_STATS_DIR, and forks their processes: the second engine's
    processes must write into the second directory, not where the parent was
    when it imported the counters."""
    env = dict(os.environ, MYOPS_STATS_DIR=str(tmp_path / "first"))
    got = _last_json_line(run_python(FORK_CHILD, timeout=300, env=env).stdout)
    assert got["child"] == got["first"] + "-second", got

# SPDX-License-Identifier: Apache-2.0
"""Profiling triage (issue 14): `python -m tools.profile triage|system`.

- triage (tools/profile/triage.py, tree.py, ncu.py): an ncu report of a
  kernel + the case's bytes/FLOPs model + the measured ceilings -> the
  decision tree -> verdict, evidence and the next change to try.
- system (tools/profile/system.py): torch.profiler around a model's steps
  (vLLM in process, or any torch model) -> per kernel family time share,
  launches per step, idle gaps; table, Chrome trace, PNG.
"""

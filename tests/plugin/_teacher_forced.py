# SPDX-License-Identifier: Apache-2.0
"""Teacher-forced next-token statistics, shared by the vLLM runs and the
Hugging Face reference (imported as tests.plugin._teacher_forced).

A run is a list of sequences, a sequence a list of rows, one per predicted
position (every prompt token but the first):
``{"token", "lp", "top1", "top1_lp", "top2_lp"}``: the actual next token and
its logprob, the best token and the two best logprobs. Teacher forcing: every
position sees the true prefix, so one early difference cannot change every
later position, and two runs compare position by position.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

Row = dict[str, Any]


def position_row(
    token: int, lp: float, top1: int, top1_lp: float, top2_lp: float | None
) -> Row:
    return {
        "token": int(token),
        "lp": float(lp),
        "top1": int(top1),
        "top1_lp": float(top1_lp),
        "top2_lp": None if top2_lp is None else float(top2_lp),
    }


def rows_from_prompt_logprobs(ids: list[int], prompt_logprobs: Any) -> list[Row]:
    """Rows from vLLM's RequestOutput.prompt_logprobs (requested with
    prompt_logprobs >= 2): per position a {token: Logprob} dict holding the
    actual token and the ranked top tokens; None at position 0."""
    rows = []
    for pos, lp in enumerate(prompt_logprobs or []):
        if lp is None:  # the first position has no prediction
            continue
        ranked = sorted(
            (v.rank, t, v.logprob) for t, v in lp.items() if v.rank is not None
        )
        top = [(t, float(lg)) for r, t, lg in ranked if r in (1, 2)]
        rows.append(
            position_row(
                ids[pos],
                lp[ids[pos]].logprob,
                top[0][0],
                top[0][1],
                top[1][1] if len(top) > 1 else None,
            )
        )
    return rows


def rows_from_logprobs(ids: list[int], logprobs: Any) -> list[Row]:
    """Rows from full next-token log-probabilities (a torch tensor
    [len(ids), vocab]; row i predicts ids[i + 1])."""
    import torch

    top = torch.topk(logprobs[:-1], 2, dim=-1)
    targets = torch.tensor(ids[1:], device=logprobs.device)
    target_lp = logprobs[:-1].gather(-1, targets[:, None])[:, 0]
    return [
        position_row(t, lp, i1, v1, v2)
        for t, lp, (i1, _), (v1, v2) in zip(
            ids[1:],
            target_lp.tolist(),
            top.indices.tolist(),
            top.values.tolist(),
        )
    ]


def margin(row: Row) -> float:
    """Best minus second-best logprob (inf when only one token is known)."""
    return math.inf if row["top2_lp"] is None else row["top1_lp"] - row["top2_lp"]


def perplexity(run: list[list[Row]]) -> float:
    """exp(mean negative logprob of the actual tokens) over every position."""
    return math.exp(-statistics.fmean(r["lp"] for seq in run for r in seq))


def _quarter_means(diffs_by_seq: list[list[float]]) -> list[float]:
    """Mean of the diffs in each quarter of the sequences (by relative
    position, pooled over sequences)."""
    quarters: list[list[float]] = [[], [], [], []]
    for diffs in diffs_by_seq:
        for i, d in enumerate(diffs):
            quarters[min(4 * i // len(diffs), 3)].append(d)
    return [statistics.fmean(q) if q else math.nan for q in quarters]


def compare(
    mine: list[list[Row]], ref: list[list[Row]], decisive_margin: float
) -> dict:
    """Agreement of `mine` with `ref` over the same prompts: top-1 agreement
    (all positions, and decisive ones: ref margin > decisive_margin), the
    largest and mean |logprob difference| of the actual token and of the
    best token, the ref margins where top-1 flipped, perplexities, and drift
    by position (mean |actual-token logprob difference| per quarter of the
    sequences)."""
    assert len(mine) == len(ref), (len(mine), len(ref))
    n = agree = decisive = decisive_agree = 0
    lp_diffs: list[list[float]] = []
    top1_diffs: list[float] = []
    flips: list[float] = []
    for seq_m, seq_r in zip(mine, ref):
        assert len(seq_m) == len(seq_r), (len(seq_m), len(seq_r))
        seq_diffs = []
        for m, r in zip(seq_m, seq_r):
            assert m["token"] == r["token"]
            n += 1
            seq_diffs.append(abs(m["lp"] - r["lp"]))
            top1_diffs.append(abs(m["top1_lp"] - r["top1_lp"]))
            same = m["top1"] == r["top1"]
            agree += same
            if margin(r) > decisive_margin:
                decisive += 1
                decisive_agree += same
            if not same:
                flips.append(round(margin(r), 4))
        lp_diffs.append(seq_diffs)
    flat = [d for seq in lp_diffs for d in seq]
    quarters = _quarter_means(lp_diffs)
    return {
        "positions": n,
        "top1_agreement": agree / n,
        "decisive_margin": decisive_margin,
        "decisive_positions": decisive,
        "decisive_agreement": decisive_agree / max(decisive, 1),
        "max_lp_diff": max(flat),
        "mean_lp_diff": statistics.fmean(flat),
        "max_top1_lp_diff": max(top1_diffs),
        "mean_top1_lp_diff": statistics.fmean(top1_diffs),
        "flips_at_ref_margin": sorted(flips),
        "ppl": perplexity(mine),
        "ref_ppl": perplexity(ref),
        "mean_lp_diff_by_quarter": quarters,
    }


def report(tag: str, name: str, c: dict) -> str:
    """One log line of a compare() result: `[tag] name: top-1 ...`."""
    q = ", ".join(f"{v:.4f}" for v in c["mean_lp_diff_by_quarter"])
    return (
        f"[{tag}] {name}: top-1 {c['top1_agreement']:.4f} of {c['positions']}; "
        f"decisive (ref margin > {c['decisive_margin']}) {c['decisive_agreement']:.4f} "
        f"of {c['decisive_positions']}; |dlogprob| max {c['max_lp_diff']:.4f} mean "
        f"{c['mean_lp_diff']:.4f}; by quarter {q}; ppl {c['ppl']:.4f} vs ref "
        f"{c['ref_ppl']:.4f}; flips at ref margins <= {max(c['flips_at_ref_margin'] or [0])}"
    )


def drift(c: dict) -> float:
    """Mean |dlogprob| of the last quarter of the positions over the first's."""
    first, *_, last = c["mean_lp_diff_by_quarter"]
    return last / first


def greedy_agreement(
    mine: list[list[Row]],
    ref: list[list[Row]],
    *,
    max_tokens: int,
    max_lp_diff: float,
    decisive_margin: float,
) -> int:
    """Greedy sequences against a reference: each pair has `max_tokens`
    tokens; up to the first differing token the chosen tokens' logprobs are
    within `max_lp_diff`, and a differing token is allowed only where the
    reference's margin was at most `decisive_margin` (a near-tie: after it
    the sequences part). Returns the tokens compared equal."""
    compared = 0
    for seq_m, seq_r in zip(mine, ref, strict=True):
        assert len(seq_m) == len(seq_r) == max_tokens
        for m, r in zip(seq_m, seq_r):
            if m["token"] != r["token"]:
                assert margin(r) <= decisive_margin, (m, r)
                break
            assert abs(m["lp"] - r["lp"]) <= max_lp_diff, (m, r)
            compared += 1
    return compared


def gates_vs_native(
    native: list,
    hf: list,
    *,
    tag: str,
    label: str,
    decisive_margin: float,
    noisier_native: bool,
    max_lp_diff: float,
    calibrated_floor_max: float,
    max_ppl_rel_diff: float,
) -> tuple[float, float]:
    """(max |dlogprob|, |ppl ratio - 1|) bounds of a run against the native
    one (`native`, `hf`: the teacher-forced records of native and of the HF
    fp32 reference): the calibrated bounds, or where `noisier_native`
    (native on a path further from fp32 than the machine they were measured
    on) the bounds of native_gates_on_its_floor from native's measured
    distance to HF fp32, printed with `label` under `tag`."""
    if not noisier_native:
        return max_lp_diff, max_ppl_rel_diff
    floor = compare(native, hf, decisive_margin)
    print(report(tag, f"{label} vs HF fp32 (floor)", floor))
    max_lp, max_ppl_rel = native_gates_on_its_floor(
        floor,
        max_lp_diff=max_lp_diff,
        calibrated_floor_max=calibrated_floor_max,
        max_ppl_rel_diff=max_ppl_rel_diff,
    )
    print(f"[{tag}] vLLM-CPU AVX2 build: max {max_lp:.3f}, ppl {max_ppl_rel:.4f}")
    return max_lp, max_ppl_rel


def native_gates_on_its_floor(
    floor: dict,
    *,
    max_lp_diff: float,
    calibrated_floor_max: float,
    max_ppl_rel_diff: float,
) -> tuple[float, float]:
    """(max |dlogprob|, |ppl ratio - 1|) bounds of a run against the native
    one where native is noisier than on the machine the bounds were measured
    on. `floor`: compare(native, HF fp32). Two bf16 runs that differ in one
    kernel are each off fp32 by their own rounding, so their distance is
    bounded by both floors, not by one: the max bound scales with native's
    measured max against fp32 over the calibrated one (never below
    `max_lp_diff`), and the ppl bound adds native's own measured ppl offset
    from fp32. Neither depends on the run being checked."""
    scale = max(1.0, floor["max_lp_diff"] / calibrated_floor_max)
    ppl_off = abs(floor["ppl"] / floor["ref_ppl"] - 1)
    return max_lp_diff * scale, max_ppl_rel_diff + ppl_off

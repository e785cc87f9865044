# SPDX-License-Identifier: Apache-2.0
"""The teacher-forced statistics and comparisons (tests.plugin._teacher_forced)
the offline agreement gates rest on, on hand-made rows: no vLLM, no model."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from tests.plugin import _teacher_forced as tf


def _row(token: int, lp: float, top1: int, top1_lp: float, top2_lp: float) -> dict:
    return tf.position_row(token, lp, top1, top1_lp, top2_lp)


def test_rows_from_logprobs_predict_the_next_token() -> None:
    ids = [0, 2, 1]
    logits = torch.tensor([[0.0, 1.0, 3.0], [2.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    lp = torch.log_softmax(logits, dim=-1)
    rows = tf.rows_from_logprobs(ids, lp)
    assert len(rows) == 2  # the first token has no prediction, the last none to make
    assert rows[0]["token"] == 2 and rows[0]["top1"] == 2
    assert rows[0]["lp"] == pytest.approx(float(lp[0, 2]))
    assert rows[0]["top2_lp"] == pytest.approx(float(lp[0, 1]))
    assert rows[1]["token"] == 1 and rows[1]["top1"] == 0
    assert rows[1]["lp"] == pytest.approx(float(lp[1, 1]))


def test_rows_from_vllm_prompt_logprobs() -> None:
    def lp(v: float, rank: int) -> SimpleNamespace:
        return SimpleNamespace(logprob=v, rank=rank)

    # vLLM: None at position 0; then the actual token (any rank) and the top-2.
    prompt_logprobs = [
        None,
        {7: lp(-0.1, 1), 3: lp(-2.5, 2)},
        {5: lp(-4.0, 9), 3: lp(-0.2, 1), 7: lp(-1.9, 2)},
    ]
    rows = tf.rows_from_prompt_logprobs([1, 7, 5], prompt_logprobs)
    assert rows == [
        _row(7, -0.1, 7, -0.1, -2.5),
        _row(5, -4.0, 3, -0.2, -1.9),
    ]


def test_compare_counts_flips_decisive_positions_and_drift() -> None:
    ref = [
        [
            _row(1, -0.5, 1, -0.5, -3.0),  # decisive (margin 2.5), same top-1
            _row(2, -1.0, 3, -0.9, -1.0),  # near tie, flipped below
            _row(4, -2.0, 4, -0.2, -2.2),  # decisive
            _row(5, -0.3, 5, -0.3, -0.4),  # near tie
        ]
    ]
    mine = [
        [
            _row(1, -0.6, 1, -0.6, -3.0),
            _row(2, -0.9, 2, -0.9, -1.0),
            _row(4, -2.0, 4, -0.2, -2.2),
            _row(5, -0.7, 5, -0.3, -0.4),
        ]
    ]
    c = tf.compare(mine, ref, decisive_margin=0.5)
    assert c["positions"] == 4
    assert c["top1_agreement"] == 0.75
    assert c["decisive_positions"] == 2 and c["decisive_agreement"] == 1.0
    assert c["flips_at_ref_margin"] == [pytest.approx(0.1)]
    assert c["max_lp_diff"] == pytest.approx(0.4)
    assert c["mean_lp_diff"] == pytest.approx((0.1 + 0.1 + 0.0 + 0.4) / 4)
    # One position per quarter: the last quarter's difference is the largest.
    assert c["mean_lp_diff_by_quarter"] == pytest.approx([0.1, 0.1, 0.0, 0.4])
    assert c["ref_ppl"] == pytest.approx(math.exp((0.5 + 1.0 + 2.0 + 0.3) / 4))


def test_a_decisive_flip_is_reported_as_such() -> None:
    ref = [[_row(1, -0.1, 1, -0.1, -3.0)]]
    mine = [[_row(1, -3.0, 2, -0.1, -0.1)]]
    c = tf.compare(mine, ref, decisive_margin=0.5)
    assert c["decisive_positions"] == 1 and c["decisive_agreement"] == 0.0


def test_compare_refuses_runs_over_different_tokens() -> None:
    with pytest.raises(AssertionError):
        tf.compare([[_row(1, 0, 1, 0, -1)]], [[_row(2, 0, 2, 0, -1)]], 0.5)
    with pytest.raises(AssertionError):
        tf.compare([[_row(1, 0, 1, 0, -1)]], [[]], 0.5)


def test_report_line_and_drift() -> None:
    # The actual token's logprob drifts away linearly: drift = last / first quarter.
    mine = [[tf.position_row(1, -1.0 - 0.01 * i, 1, -1.0, -3.0) for i in range(8)]]
    ref = [[tf.position_row(1, -1.0, 1, -1.0, -3.0) for i in range(8)]]
    c = tf.compare(mine, ref, 0.5)
    line = tf.report("tag", "mine vs ref", c)
    assert line.startswith("[tag] mine vs ref: top-1 1.0000 of 8;")
    assert "|dlogprob| max 0.0700 mean 0.0350" in line
    assert (
        tf.drift(c)
        == c["mean_lp_diff_by_quarter"][-1] / c["mean_lp_diff_by_quarter"][0]
    )
    assert tf.drift(c) > 10


def test_greedy_agreement_allows_parting_only_at_a_near_tie() -> None:
    ref = [[_row(1, -0.1, 1, -0.1, -3.0), _row(2, -0.5, 2, -0.5, -0.55)]]
    parted = [[_row(1, -0.1, 1, -0.1, -3.0), _row(3, -0.55, 3, -0.55, -0.5)]]
    kw = {"max_tokens": 2, "max_lp_diff": 0.05, "decisive_margin": 0.5}
    assert tf.greedy_agreement(ref, ref, **kw) == 2
    assert tf.greedy_agreement(parted, ref, **kw) == 1
    decisive_ref = [[_row(1, -0.1, 1, -0.1, -3.0), _row(2, -0.1, 2, -0.1, -3.0)]]
    with pytest.raises(AssertionError):
        tf.greedy_agreement(parted, decisive_ref, **kw)
    drifted = [[_row(1, -0.3, 1, -0.3, -3.0), _row(2, -0.5, 2, -0.5, -0.55)]]
    with pytest.raises(AssertionError):
        tf.greedy_agreement(drifted, ref, **kw)


def test_gates_vs_native_scale_with_a_noisier_native() -> None:
    # native off HF fp32 by 0.8 at one position, its ppl below HF's.
    hf = [[_row(1, -1.0, 1, -1.0, -3.0), _row(2, -2.0, 2, -0.5, -2.5)]]
    native = [[_row(1, -0.2, 1, -0.2, -3.0), _row(2, -2.0, 2, -0.5, -2.5)]]
    kw = dict(
        tag="t",
        label="native",
        decisive_margin=0.5,
        max_lp_diff=0.75,
        calibrated_floor_max=0.4,
        max_ppl_rel_diff=0.002,
    )
    # Calibrated machine: the bounds as given, whatever native does.
    assert tf.gates_vs_native(native, hf, noisier_native=False, **kw) == (0.75, 0.002)
    max_lp, max_ppl_rel = tf.gates_vs_native(native, hf, noisier_native=True, **kw)
    assert max_lp == pytest.approx(0.75 * 0.8 / 0.4)
    floor = tf.compare(native, hf, 0.5)
    assert max_ppl_rel == pytest.approx(
        0.002 + abs(floor["ppl"] / floor["ref_ppl"] - 1)
    )
    # A native closer to fp32 than the calibrated floor never tightens the bound.
    assert tf.gates_vs_native(hf, hf, noisier_native=True, **kw) == (
        pytest.approx(0.75),
        pytest.approx(0.002),
    )

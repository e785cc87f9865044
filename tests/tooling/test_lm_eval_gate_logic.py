# SPDX-License-Identifier: Apache-2.0
"""The lm-eval gate's decision logic, without a server: ranking comparison,
sample parsing, the configs' schema and the tiny task's data. (The gate
itself runs as its own CI step: .buildkite/lm-eval-harness.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_lm_eval_correctness as gate  # on pytest's pythonpath
import yaml

from tools.ci.buildkite import validate_pipeline as vp

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / ".buildkite" / "lm-eval-harness"


def _doc(pred_lls: list[float], target: int = 0) -> dict:
    return {
        "pred": max(range(len(pred_lls)), key=lambda i: pred_lls[i]),
        "target": target,
        "logliks": pred_lls,
    }


def test_identical_rankings() -> None:
    a = {0: _doc([-1.0, -2.0]), 1: _doc([-3.0, -1.5])}
    b = {0: _doc([-1.1, -2.05]), 1: _doc([-3.2, -1.4])}
    r = gate.compare_rankings(a, b)
    assert r["agree"] == 2 and r["flips"] == [] and r["agreement"] == 1.0
    assert r["max_abs_loglik_diff"] == pytest.approx(0.2)


def test_a_flip_is_reported_with_the_native_margin() -> None:
    a = {0: _doc([-1.0, -0.9]), 1: _doc([-1.0, -2.0])}
    b = {0: _doc([-1.0, -1.3]), 1: _doc([-1.0, -2.0])}
    r = gate.compare_rankings(a, b)
    assert r["agree"] == 1
    (flip,) = r["flips"]
    assert flip["doc_id"] == 0 and flip["myops_pred"] == 1 and flip["native_pred"] == 0
    assert flip["native_margin"] == pytest.approx(0.3)


def test_missing_documents_are_reported() -> None:
    r = gate.compare_rankings(
        {0: _doc([-1.0, -2.0])}, {0: _doc([-1.0, -2.0]), 5: _doc([0.0])}
    )
    assert r["missing"] == [5]


def test_choices_by_doc_reads_lm_eval_samples() -> None:
    # lm-eval's multiple-choice samples: resps [[(loglik, is_greedy)], ...],
    # filtered_resps [(loglik, is_greedy), ...] per choice.
    results = {
        "samples": {
            "t": [
                {
                    "doc_id": 3,
                    "target": 1,
                    "filtered_resps": [(-5.0, False), (-2.0, True)],
                },
                {"doc_id": 4, "target": 0, "resps": [[(-1.0, True)], [(-7.0, False)]]},
            ]
        }
    }
    got = gate.choices_by_doc(results, "t")
    assert got[3]["pred"] == 1 and got[3]["logliks"] == [-5.0, -2.0]
    assert got[4]["pred"] == 0 and got[4]["logliks"] == [-1.0, -7.0]
    # generate_until samples (strings) are not rankings.
    gen = {"samples": {"g": [{"doc_id": 0, "filtered_resps": ["42"]}]}}
    assert gate.choices_by_doc(gen, "g") == {}


def test_provider_counts() -> None:
    stats = {
        "processes": [1, 2],
        "calls": {
            "rms_norm": {"myops": 3, "native": 0},
            "fused_add_rms_norm": {"myops": 4},
        },
        "graph_captured": {"rms_norm": {"myops": 1}},
    }
    assert gate.provider_counts(stats) == {"myops": 8, "native": 0}
    assert gate.provider_counts({"processes": []}) is None


def test_server_args_from_config() -> None:
    cfg = yaml.safe_load(
        (HARNESS / "configs" / "tiny-llama-myops-vs-native.yaml").read_text()
    )
    args = gate.server_args("tiny", cfg, "1")
    assert args[:2] == ["--served-model-name", "tiny"]
    assert "--enforce-eager" in args and "--dtype" in args
    assert args[-2:] == ["--kv-cache-memory-bytes", "268435456"]
    assert "--tensor-parallel-size" in gate.server_args(
        "m", {"enforce_eager": False}, "2"
    )


@pytest.mark.parametrize(
    "cfg", sorted((HARNESS / "configs").glob("*.yaml")), ids=lambda p: p.stem
)
def test_configs_follow_vllm_schema(cfg: Path) -> None:
    data = yaml.safe_load(cfg.read_text())
    assert vp.check_lm_eval_config(data, cfg.name) == []
    if data.get("required_device") != "cuda":
        assert "tiny_model" in data, "CPU configs must not download a model"


def test_tiny_task_vocabulary_and_documents(tmp_path: Path) -> None:
    gate.require_lm_eval()  # lm-eval brings `datasets`; a skip here, a failure in CI
    from vllm_myops.testing import tiny_mc
    from vllm_myops.testing.tiny_model import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny", "llama", 0)
    words = tiny_mc.vocabulary_words(model)
    assert len(words) >= 20 and all(w.isalpha() and w.isascii() for w in words)
    # Every word is one token, so every continuation has the same length.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    ctx, cont = tiny_mc.encode_pair(
        tok, " ".join(words[:8]), " " + " ".join(words[8:11])
    )
    assert len(cont) == 3 and ctx[0] == tok.bos_token_id
    docs = tiny_mc.build_docs(model, n_docs=8)
    assert [d["id"] for d in docs] == list(range(8))
    for d in docs:
        lls = d["ref_logliks"]
        assert d["label"] == max(range(4), key=lambda i: lls[i])
        assert d["ref_margin"] >= tiny_mc.MIN_MARGIN
    assert tiny_mc.build_docs(model, n_docs=8) == docs  # deterministic
    f = tiny_mc.write_docs(model, tmp_path / "docs.json", n_docs=8)
    ds = tiny_mc.load_dataset(docs_file=str(f))["test"]
    assert ds.num_rows == 8 and set(ds.column_names) == {
        "id",
        "context",
        "choices",
        "label",
    }
    assert json.loads(f.read_text())["min_margin"] == tiny_mc.MIN_MARGIN

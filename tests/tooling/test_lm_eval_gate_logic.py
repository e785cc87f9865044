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
        # CPU configs serve a generated model or a built-in one (a pinned,
        # hash-checked wheel from the package index), never a hub download.
        assert "tiny_model" in data or "real_model" in data
    if "real_model" in data:
        from vllm_myops.models import BUILTIN_MODELS

        assert data["real_model"] in BUILTIN_MODELS
    if "real_text" in data:
        assert (REPO / data["real_text"]).is_file()


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


def test_lower_is_better_metrics_gate_the_other_way() -> None:
    results = {"higher_is_better": {"t": {"word_perplexity": False, "acc": True}}}
    assert gate.higher_is_better(results, "t", {"name": "acc,none"})
    assert not gate.higher_is_better(results, "t", {"name": "word_perplexity,none"})
    # Unknown to lm-eval: higher is better (vLLM's one-sided rule); the
    # config can say otherwise.
    assert gate.higher_is_better({}, "t", {"name": "x,none"})
    assert not gate.higher_is_better(
        results, "t", {"name": "acc,none", "higher_is_better": False}
    )


def test_native_difference_is_equality_unless_bounded() -> None:
    assert gate.native_difference({"myops": 1.0, "native": 1.0}, {}) is None
    assert "!=" in gate.native_difference({"myops": 1.0, "native": 1.0001}, {})
    bounded = {"max_rel_diff_vs_native": 0.002}
    row = {"myops": 100.1, "native": 100.0}
    assert gate.native_difference(row, bounded) is None
    assert row["rel_diff_vs_native"] == pytest.approx(0.001)
    assert "> 0.002" in gate.native_difference(
        {"myops": 100.3, "native": 100.0}, bounded
    )


def test_enforce_eager_on_cpu_follows_vllms_platform(monkeypatch) -> None:
    import sys
    import types

    assert gate.wants_eager(True) and gate.wants_eager("true")
    assert not gate.wants_eager(False)
    for is_cpu in (True, False):
        platforms = types.ModuleType("vllm.platforms")
        platforms.current_platform = types.SimpleNamespace(is_cpu=lambda v=is_cpu: v)
        monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
        monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
        assert gate.wants_eager("on_cpu") is is_cpu


def test_real_text_task_documents(tmp_path: Path) -> None:
    gate.require_lm_eval()  # lm-eval brings `datasets`
    from vllm_myops.testing import real_text

    cfg = yaml.safe_load(
        (HARNESS / "configs" / "smollm2-real-text-myops-vs-native.yaml").read_text()
    )
    corpus = REPO / cfg["real_text"]
    docs = real_text.documents(corpus)
    assert "\n\n".join(docs) == real_text.corpus_text(corpus)  # nothing lost
    paragraph_words = [len(p.split()) for p in real_text.paragraphs(corpus)]
    limit = max(real_text.DOC_WORDS, max(paragraph_words))
    assert all(len(d.split()) <= limit for d in docs) and len(docs) > 1
    meta = gate.task_metadata(cfg, "unused-model-dir", tmp_path)
    ds = real_text.load_documents(**meta)["test"]
    assert ds["text"] == docs
    with pytest.raises(FileNotFoundError):
        gate.task_metadata({**cfg, "real_text": "no/such.txt"}, "m", tmp_path)


def test_real_text_windows_cover_every_token_once() -> None:
    from vllm_myops.testing import real_text

    ids = list(range(10))
    assert real_text.token_windows(ids, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(ValueError):
        real_text.token_windows(ids, 1)

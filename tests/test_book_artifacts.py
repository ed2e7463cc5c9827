"""The trained model's committed artifacts (``transformer_lib/book/runs/artifacts/``) and the module that writes them.

The committed file must be what it says: small, well-formed, from the run whose metrics are
committed beside it (its BLEU recomputed from its translations equals the reported one, where the
Multi30k references are available), with attention rows that are distributions and cross-attention
that aligns. The generator itself is tested end to end on a small random model and four sentences.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from test_translate_cli import GERMAN, checkpoint_dict, write_fake_multi30k
from transformer_lib.book.artifacts import (
    ARTIFACTS_FORMAT,
    KINDS,
    attention_weights,
    beam_alternatives,
    cross_attention_alignment,
    dumps,
    load_artifacts,
    main,
    sampled_translations,
    sources_digest,
)
from transformer_lib.evaluation import corpus_bleu
from transformer_lib.multi30k import load_multi30k
from transformer_lib.translator import Translator

RESULTS = Path(__file__).resolve().parents[1] / "transformer_lib" / "book" / "runs"
ARTIFACTS = RESULTS / "artifacts" / "multi30k_full.json"
METRICS = RESULTS / "multi30k_full_metrics.json"


@pytest.fixture(scope="module")
def committed() -> dict:
    artifacts = load_artifacts(ARTIFACTS)
    assert artifacts is not None, f"{ARTIFACTS} is missing"
    return artifacts


@pytest.fixture(scope="module")
def metrics() -> dict:
    return json.loads(METRICS.read_text(encoding="utf-8"))


# --- the committed file ------------------------------------------------------------------------


def test_the_committed_artifacts_are_small_text() -> None:
    size = ARTIFACTS.stat().st_size
    assert size < 700 * 1024, f"{ARTIFACTS.name} is {size / 1024:.0f} KB; keep it well under 1 MB"
    assert sum(p.stat().st_size for p in ARTIFACTS.parent.iterdir()) < 1024 * 1024
    assert ARTIFACTS.read_text(encoding="utf-8") == dumps(json.loads(ARTIFACTS.read_text(encoding="utf-8")))


def test_the_committed_artifacts_come_from_the_committed_run(committed: dict, metrics: dict) -> None:
    produced = committed["produced_by"]
    assert produced["command"].startswith("python -m transformer_lib.book.artifacts --checkpoint ")
    assert len(produced["generator_git_commit"]) == 40 and produced["generator_uncommitted_changes"] is False
    run = produced["run"]
    assert run["metrics_file"] == METRICS.name
    assert run["command"] == metrics["command"]
    assert run["git_commit"] == metrics["software"]["git_commit"]
    assert produced["model_config"] == metrics["model_config"]
    assert produced["parameters"] == metrics["parameters"]
    test = committed["test"]
    assert test["n_sentences"] == metrics["final"]["test"]["n_sentences"] == 1000
    for name in ("greedy", "beam 4"):
        assert len(test[name]["translations"]) == test["n_sentences"]
        assert all(isinstance(t, str) and t for t in test[name]["translations"])
        reported = metrics["bleu"]["test"][name]
        assert test[name]["bleu"] == pytest.approx(reported["cased"]["score"], abs=0.01)
        assert test[name]["bleu_lowercased"] == pytest.approx(reported["lowercased"]["score"], abs=0.01)
        assert test[name]["signature"] == reported["cased"]["signature"]


@pytest.mark.multi30k
def test_the_committed_translations_score_the_reported_bleu(committed: dict, metrics: dict, real_multi30k: Path) -> None:
    pairs = load_multi30k("test", real_multi30k)
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    assert committed["test"]["sources_sha256"] == sources_digest(sources)  # the same sentences, in order
    for name in ("greedy", "beam 4"):
        recomputed = corpus_bleu(committed["test"][name]["translations"], references).score
        assert recomputed == pytest.approx(metrics["bleu"]["test"][name]["cased"]["score"], abs=0.01)
    for entry in (*committed["beam_alternatives"], *committed["samples"], *committed["attention"]):
        assert entry["source"] == sources[entry["index"]]


def test_the_beam_alternatives_and_samples_are_complete(committed: dict) -> None:
    beam = committed["test"]["beam 4"]["translations"]
    assert len(committed["beam_alternatives"]) >= 4
    for entry in committed["beam_alternatives"]:
        hypotheses = entry["hypotheses"]
        assert 1 <= len(hypotheses) <= entry["beam_size"]
        assert hypotheses[0]["text"] == beam[entry["index"]]  # the best is the beam's translation
        assert [h["score"] for h in hypotheses] == sorted((h["score"] for h in hypotheses), reverse=True)
    for entry in committed["samples"]:
        assert entry["seed"] == 0 and len(entry["translations"]) == 5 and "temperature" in entry


def test_the_committed_attention_rows_are_distributions(committed: dict, metrics: dict) -> None:
    config = metrics["model_config"]
    assert 4 <= len(committed["attention"]) <= 8
    for entry in committed["attention"]:
        S, T = len(entry["source_tokens"]), len(entry["output_tokens"])
        assert entry["source_tokens"][-1] == "<eos>" and entry["output_tokens"][-1] == "<eos>"
        assert entry["decoder_input_tokens"] == ["<bos>", *entry["output_tokens"][:-1]]
        shapes = {"encoder_self": (config["n_encoder_layers"], config["n_heads"], S, S),
                  "decoder_self": (config["n_decoder_layers"], config["n_heads"], T, T),
                  "decoder_cross": (config["n_decoder_layers"], config["n_heads"], T, S)}
        for kind in KINDS:
            w = torch.tensor(entry[kind], dtype=torch.float64)
            assert tuple(w.shape) == shapes[kind], kind
            assert (w >= 0).all() and torch.allclose(w.sum(-1), torch.ones(w.shape[:-1], dtype=torch.float64), atol=0.01)
        assert (torch.tensor(entry["decoder_self"]).triu(1) == 0).all()  # the causal mask


def test_the_trained_cross_attention_aligns(committed: dict) -> None:
    """Chapter 6's claim: a trained model's cross-attention picks the source word it translates."""
    for entry in committed["attention"]:
        aligned = cross_attention_alignment(entry["decoder_cross"], entry["source_tokens"], entry["output_tokens"])
        assert aligned["ratio"] >= 3, (entry["source"], aligned)
        assert aligned["monotone"] >= 0.75, (entry["source"], aligned)


# --- the functions -----------------------------------------------------------------------------


def test_alignment_of_a_diagonal_and_of_uniform_attention() -> None:
    tokens = ["▁a", "▁b", "▁c", "▁d", ".", "<eos>"]
    diagonal = torch.eye(6).expand(2, 4, 6, 6)  # (N, H, T, S)
    sharp = cross_attention_alignment(diagonal, tokens, tokens)
    assert sharp == {"mass": 1.0, "uniform": 0.25, "ratio": 4.0, "monotone": 1.0}  # 4 words a side
    flat = cross_attention_alignment(torch.full((2, 4, 6, 6), 1 / 6), tokens, tokens)
    assert flat["ratio"] == pytest.approx(1.0)
    crossing = torch.eye(6)[[3, 2, 1, 0, 4, 5]].expand(2, 4, 6, 6)  # the words in reverse order
    assert cross_attention_alignment(crossing, tokens, tokens)["monotone"] == 0.0


def test_dumps_keeps_number_lists_on_one_line() -> None:
    data = {"a": [[0.1, 0.25], [1, 0]], "b": ["x", "y"], "c": -1.5e-05}
    text = dumps(data)
    assert "[0.1,0.25]" in text and "[1,0]" in text and '"x"' in text
    assert json.loads(text) == data


def test_load_artifacts(tmp_path: Path) -> None:
    assert load_artifacts(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_artifacts(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"command": "x"}')
    with pytest.raises(ValueError, match="not an artifacts file"):
        load_artifacts(tmp_path / "other.json")


@pytest.fixture
def translator(tmp_path: Path) -> Translator:
    path = tmp_path / "checkpoint.pt"
    torch.save(checkpoint_dict(max_len=40), path)
    return Translator.from_checkpoint(path)


def test_attention_weights_are_those_of_the_greedy_translation(translator: Translator) -> None:
    entry = attention_weights(translator, GERMAN[1])
    assert entry["translation"] == translator.translate([GERMAN[1]])[0]
    S, T = len(entry["source_tokens"]), len(entry["output_tokens"])
    assert S == len(translator.source_ids([GERMAN[1]])[0])
    assert torch.tensor(entry["decoder_cross"]).shape == (1, 4, T, S)
    assert torch.tensor(entry["encoder_self"]).shape == (1, 4, S, S)


def test_beam_alternatives_and_samples(translator: Translator) -> None:
    hypotheses = beam_alternatives(translator, GERMAN[0], beam_size=3)
    assert hypotheses[0]["text"] == translator.translate([GERMAN[0]], beam_size=3)[0]
    draws = sampled_translations(translator, GERMAN[0], n=4, seed=0, temperature=1.0)
    assert draws == sampled_translations(translator, GERMAN[0], n=4, seed=0, temperature=1.0) and len(draws) == 4


def test_the_command_writes_a_file_the_tests_above_accept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save(checkpoint_dict(max_len=40), path)
    data_dir = tmp_path / "multi30k"
    write_fake_multi30k(data_dir, monkeypatch)
    out = tmp_path / "results" / "artifacts.json"
    status = main(["--checkpoint", str(path), "--data-dir", str(data_dir), "--out", str(out), "--device", "cpu",
                   "--example", "1", "--beam", "2"])
    assert status == 0, capsys.readouterr().err
    artifacts = load_artifacts(out)
    assert artifacts["artifacts_format"] == ARTIFACTS_FORMAT
    assert artifacts["produced_by"]["command"].endswith("--beam 2 --example 1")
    assert artifacts["test"]["n_sentences"] == 4 and set(artifacts["test"]) >= {"greedy", "beam 2"}
    assert [e["index"] for e in artifacts["attention"]][0] == 1
    assert "wrote" in capsys.readouterr().out

"""Tests of transformer_lib.checkpoint: checkpoint files (format, atomic writes, safe loading) and averaging."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from errors import raises

from transformer_lib.tokenizers import SymbolTokenizer
from transformer_lib import checkpoint
from transformer_lib.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    CHECKPOINT_KEYS,
    CheckpointError,
    checkpoint_metadata,
    load_checkpoint,
    save_checkpoint,
    save_kept_weights,
)
from transformer_lib.toy_tasks import toy_vocab
from transformer_lib.model import Transformer
from transformer_lib.config import TransformerConfig
from transformer_lib.trainer import TrainConfig, make_optimizer
from transformer_lib.schedules import make_scheduler


def _tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.from_preset(
        "tiny", src_vocab_size=12, tgt_vocab_size=12, d_model=32, n_heads=2, d_ff=64,
        n_encoder_layers=1, n_decoder_layers=1, dropout=0.0,
    )
    return Transformer(config)


# --- checkpoint files ----------------------------------------------------------------------------


def _checkpoint(value: float = 1.0) -> dict:
    model = torch.nn.Linear(2, 2)
    torch.nn.init.constant_(model.weight, value)
    optimizer = make_optimizer(model)
    return {
        "format_version": CHECKPOINT_FORMAT_VERSION, "model_config": _tiny_model().config.to_dict() | {"src_vocab_size": 7, "tgt_vocab_size": 7},
        "model_state": model.state_dict(),
        "tokenizers": {side: SymbolTokenizer(toy_vocab(3)).to_dict() for side in ("src", "tgt")}, "task": "copy",
        "data": {"n_symbols": 3}, "optimizer_state": optimizer.state_dict(),
        "scheduler_state": make_scheduler(optimizer, "constant", warmup_steps=1, peak_lr=1e-3).state_dict(),
        "train_config": TrainConfig().to_dict(), "step": 3, "epoch": 1, "rng_state": {"torch": torch.get_rng_state()},
        "metrics": {"train": [{"step": 1, "loss": 2.5}], "val": []},
    }


def test_checkpoint_round_trip_with_weights_only(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "checkpoint.pt"
    save_checkpoint(path, _checkpoint(0.5))
    loaded = load_checkpoint(path)
    assert set(CHECKPOINT_KEYS) <= set(loaded) and loaded["step"] == 3
    assert torch.equal(loaded["model_state"]["weight"], torch.full((2, 2), 0.5))
    assert torch.load(path, weights_only=True)["task"] == "copy"
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.pt"]  # no temporary file left


def test_kept_weights_are_the_newest_files(tmp_path: Path) -> None:
    for step in (3, 6, 9, 12):
        save_kept_weights(tmp_path / "weights", step, {"w": torch.full((2,), float(step))}, keep=2)
    kept = checkpoint.kept_weights(tmp_path / "weights")
    assert [p.name for p in kept] == ["step_0000009.pt", "step_0000012.pt"]
    assert torch.load(kept[-1], weights_only=True)["step"] == 12


def test_checkpoint_metadata_holds_what_rebuilds_the_model() -> None:
    vocab = toy_vocab(3)
    config = _tiny_model().config
    symbols = SymbolTokenizer(vocab)
    metadata = checkpoint_metadata(config, symbols, symbols.to_dict(), "copy", {"n_symbols": 3}, run={"seed": 0})
    assert metadata == {
        "model_config": config.to_dict(), "tokenizers": {"src": symbols.to_dict(), "tgt": symbols.to_dict()},
        "task": "copy", "data": {"n_symbols": 3}, "run": {"seed": 0},
    }
    assert metadata["tokenizers"]["src"]["kind"] == "symbols"  # the kind is recorded
    with raises(TypeError, "Vocab"):  # a bare vocabulary is no tokenizer: its kind would be lost
        checkpoint_metadata(config, vocab, symbols, "copy")


def test_loading_a_missing_file_says_so(tmp_path: Path) -> None:
    with raises(FileNotFoundError, "nothing.pt"):
        load_checkpoint(tmp_path / "nothing.pt")
    with raises(FileNotFoundError, "folder"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("write", "named"),
    [
        (lambda p: p.write_bytes(b"certainly not a zip file"), ["zip"]),
        (lambda p: torch.save(torch.nn.Linear(2, 2).state_dict(), p), ["'format_version'"]),
        (lambda p: torch.save([1, 2, 3], p), ["list"]),
        (lambda p: torch.save({**_checkpoint(), "format_version": 3}, p), ["format_version 3"]),
        (lambda p: torch.save({"format_version": 1, "model_state": {}}, p), ["format 1", "0.2.0"]),
        (lambda p: torch.save({k: v for k, v in _checkpoint().items() if k != "tokenizers"}, p), ["'tokenizers'"]),
        (lambda p: torch.save({**_checkpoint(), "extra": torch.nn.Linear(2, 2)}, p), ["torch.nn.modules.linear.Linear"]),
    ],
)
def test_loading_other_files_fails_clearly(tmp_path: Path, write, named: list) -> None:
    path = tmp_path / "file.pt"
    write(path)
    with raises(CheckpointError, "file.pt", *named) as refused:
        load_checkpoint(path)
    assert "weights_only" not in str(refused.value), "never advise weights_only=False"


def test_saving_refuses_what_weights_only_cannot_load(tmp_path: Path) -> None:
    import numpy as np

    with raises(CheckpointError, "'metrics'", "'best'"):
        save_checkpoint(tmp_path / "c.pt", {**_checkpoint(), "metrics": {"best": np.float64(1.0)}})
    with raises(CheckpointError, "'tokenizers'"):
        save_checkpoint(tmp_path / "c.pt", {k: v for k, v in _checkpoint().items() if k != "tokenizers"})
    assert not any(tmp_path.iterdir())


def test_a_crash_while_saving_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, _checkpoint(1.0))
    before = path.read_bytes()

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", crashing_save)
    with raises(OSError, "checkpoint.pt"):
        save_checkpoint(path, _checkpoint(2.0))
    assert path.read_bytes() == before
    assert torch.equal(load_checkpoint(path)["model_state"]["weight"], torch.ones(2, 2))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_a_killed_process_mid_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    """A real crash: the process dies (no exception handler runs) halfway through writing."""
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, _checkpoint(1.0))
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import os, torch
        from transformer_lib import checkpoint
        def dying_save(obj, f, *args, **kwargs):
            f.write(b"PK\\x03\\x04 half a checkpoint")
            f.flush()
            os._exit(1)
        checkpoint.torch.save = dying_save
        loaded = checkpoint.load_checkpoint({str(path)!r})
        loaded["step"] = 99
        checkpoint.save_checkpoint({str(path)!r}, loaded)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert path.read_bytes() == before and load_checkpoint(path)["step"] == 3
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "checkpoint.pt"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".checkpoint.pt.")  # the dead temporary file, ignored


# --- checkpoint averaging ------------------------------------------------------------------------


def test_average_checkpoints_is_the_elementwise_mean() -> None:
    states = [_tiny_model(seed=seed).state_dict() for seed in range(3)]
    averaged = checkpoint.average_checkpoints(states)
    assert list(averaged) == list(states[0])
    for name in states[0]:
        expected = sum(s[name].double() for s in states) / 3
        torch.testing.assert_close(averaged[name], expected.to(states[0][name].dtype), rtol=0, atol=1e-7)
    same = checkpoint.average_checkpoints([states[1]] * 4)
    assert all(torch.equal(same[k], v) for k, v in states[1].items())  # the mean of copies is the copy


def test_averaged_weights_load_into_the_model_and_tied_weights_stay_tied() -> None:
    model = _tiny_model()
    model.load_state_dict(checkpoint.average_checkpoints([_tiny_model(seed=1).state_dict(), _tiny_model(seed=2).state_dict()]))
    assert model.output_layer.weight is model.tgt_embed.weight


def test_average_checkpoints_reads_files(tmp_path: Path) -> None:
    a, b = _checkpoint(1.0), _checkpoint(3.0)
    save_checkpoint(tmp_path / "a.pt", a)
    torch.save({"step": 7, "model_state": b["model_state"]}, tmp_path / "step_0000007.pt")
    averaged = checkpoint.average_checkpoints([tmp_path / "a.pt", tmp_path / "step_0000007.pt"])
    assert torch.equal(averaged["weight"], torch.full((2, 2), 2.0))


@pytest.mark.parametrize(
    ("states", "named"),
    [
        ([], []),
        ([{"w": torch.ones(2)}, {"v": torch.ones(2)}], ["'w'", "'v'"]),
        ([{"w": torch.ones(2)}, {"w": torch.ones(3)}], ["w", "(2,)", "(3,)"]),
        ([{"n": torch.tensor(1)}, {"n": torch.tensor(2)}], ["n"]),
    ],
)
def test_average_checkpoints_refuses_what_cannot_be_averaged(states: list, named: list) -> None:
    with raises(ValueError, *named):
        checkpoint.average_checkpoints(states)


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda s, n: s.update({n: s[n].t().contiguous()}), ["shape"]),
        (lambda s, n: s.pop(n), ["missing"]),
        (lambda s, n: s.update({"extra.weight": s[n]}), ["unexpected", "extra.weight"]),
        (lambda s, n: s.update({n: s[n].long()}), ["torch.int64"]),
    ],
    ids=["wrong-shape", "missing", "unexpected", "integer"],
)
def test_weights_that_do_not_fit_the_config_are_one_error_naming_the_weight(edit, named: list) -> None:
    """A pretrained file with the right checksum and a wrong-shape weight was torch's RuntimeError (issue 43)."""
    model = _tiny_model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    name = next(k for k, v in state.items() if v.dim() == 2 and v.size(0) != v.size(1))
    edit(state, name)
    with raises(checkpoint.CheckpointError, "model.safetensors", *named):
        checkpoint.load_weights(_tiny_model(seed=1), state, "model.safetensors")
    checkpoint.load_weights(fresh := _tiny_model(seed=1), model.state_dict(), "model.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))


def test_metadata_fields_missing_or_not_json_are_named() -> None:
    assert checkpoint.read_json_fields({"run": '{"steps": 3}', "x": "1"}, ["run"], "m.safetensors") == {"run": {"steps": 3}}
    with raises(checkpoint.CheckpointError, "m.safetensors", "'decoding'"):
        checkpoint.read_json_fields({"run": "{}"}, ["run", "decoding"], "m.safetensors")
    with raises(checkpoint.CheckpointError, "m.safetensors", "'run'", "not JSON"):
        checkpoint.read_json_fields({"run": "{steps"}, ["run"], "m.safetensors")

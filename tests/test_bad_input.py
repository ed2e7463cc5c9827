"""Every bad input of issue 14, one case each: the exit status or exception type, and the values the
message names (the offending value, the option or setting, the limit), not its wording. Command-line
cases also check that the error is one line, without a traceback, and that a run which never started
leaves no output folder behind."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from filelock import FileLock
import torch
from errors import raises

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.beam_search import beam_search
from transformer_lib.blocks import FeedForward, Residual
from transformer_lib.checkpoint import CheckpointError, load_checkpoint, model_config_from_file, parameter_count, save_checkpoint
from transformer_lib import pretrained
from transformer_lib.cli import export, nbest, train, translate
from transformer_lib.cli.common import DEBUG_ENV
from transformer_lib.cli.options import RunConfig
from transformer_lib.cli.profiles import DEFAULTS
from transformer_lib.config import FILE_PARAMETER_LIMIT, TransformerConfig
from transformer_lib.decoding import greedy_decode, next_token_logits, sample, sampling_distribution
from transformer_lib.device import parse_device
from transformer_lib.embeddings import TokenEmbedding
from transformer_lib.model import DecoderOnlyTransformer, Transformer, count_parameters
from transformer_lib.multi30k import MULTI30K_SHA256
from transformer_lib.normalization import RMSNorm
from transformer_lib.prepared import PreparedTranslation, prepare_multi30k
from transformer_lib.subword import SubwordTokenizer
from transformer_lib.tokenizers import SymbolTokenizer, WordTokenizer, tokenizer_from_dict
from transformer_lib.toy_tasks import MAX_LENGTH, MAX_PAIRS, MAX_SYMBOLS, toy_task
from transformer_lib.trainer import TrainConfig, Trainer
from transformer_lib.translator import TranslationError, TranslationWarning, Translator
from transformer_lib.vocab import Vocab

TOY = ["--task", "reverse", "--n-train", "200", "--n-heldout", "20", "--longest", "4", "--no-progress", "--device", "cpu"]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


def run(cli, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit status and standard error of a command line (argparse's own errors exit via SystemExit)."""
    try:
        code = cli(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def assert_one_line_error(code: int, err: str, *names: str, status: int = 2) -> None:
    """One line ``error: ...`` naming ``names``, and the exit status: 2 for a bad command line, 1 for a
    run that failed (a missing or bad file, input the model cannot take, a diverged run; issue 46)."""
    assert code == status, (code, err)
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if not line.startswith(("warning: ", "info: "))]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for name in names:
        assert name in lines[0], (name, lines[0])


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step reverse run (its folder), copied by each test that changes it."""
    out = tmp_path_factory.mktemp("trained") / "run"
    train.main([*TOY, "--max-steps", "4", "--eval-every", "2", "--out", str(out)])
    return out


@pytest.fixture
def run_copy(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


# --- 1. The trainer's options: one line, exit 2, no folder left behind -----------------------------

TRAIN_OPTIONS = [
    (["--batch-size", "0"], ["--batch-size", ">= 1", "0"]),
    (["--lr", "-1"], ["--lr", "(0, inf)", "-1"]),
    (["--lr", "inf"], ["--lr", "inf"]),
    (["--lr", "nan"], ["--lr", "nan"]),
    (["--dropout", "1.5"], ["--dropout", "[0, 1)", "1.5"]),
    (["--label-smoothing", "1.0"], ["--label-smoothing", "[0, 1)", "1.0"]),
    (["--clip-norm", "-1"], ["--clip-norm", "-1"]),
    (["--weight-decay", "-0.1"], ["--weight-decay", "[0, inf)", "-0.1"]),
    (["--target-exact-match", "2"], ["--target-exact-match", "(0, 1]", "2"]),
    (["--max-steps", "0"], ["--max-steps", ">= 1", "0"]),
    (["--epochs", "0"], ["--epochs", ">= 1", "0"]),
    (["--checkpoint-every", "0"], ["--checkpoint-every", ">= 1", "0"]),
    (["--warmup-steps", "0"], ["--warmup-steps", ">= 1", "0"]),
    (["--longest", "0"], ["--longest", ">= 1", "0"]),
    (["--device", "tpu9"], ["--device tpu9"]),
    (["--prepare-only"], ["--prepare-only", "reverse"]),
    (["--data", "somewhere.pt"], ["--data", "reverse"]),
    (["--tokenizer", "bpe"], ["--tokenizer", "reverse"]),
    (["--vocab-size", "8000"], ["--vocab-size", "reverse"]),
    (["--norm-first", "middle"], ["middle"]),
    (["--batch-size", "abc"], ["--batch-size", "'abc'"]),
    (["--schedule", "linear"], ["--schedule", "'linear'"]),
    # upper bounds: a typo must not allocate for hours (issue 27: --n-symbols 10**8 ran out of memory,
    # a --longest of 100000 hung)
    (["--n-symbols", "100000000"], ["--n-symbols", "100000000", "10,000"]),
    (["--longest", "100000"], ["--longest", "100000", "512"]),
    (["--batch-size", "10000000"], ["--batch-size", "10000000"]),
    (["--max-steps", "10000000000"], ["--max-steps", "10000000000"]),
    (["--keep-weights", "5000"], ["--keep-weights", "5000"]),
    (["--lr", "100"], ["--lr", "100"]),
    (["--seed", "-1"], ["--seed", "-1"]),
    (["--threads", "0"], ["--threads", "0"]),
    (["--threads", "5000"], ["--threads", "5000"]),
    (["--threads", "two"], ["--threads", "'two'"]),
]


@pytest.mark.parametrize(("options", "names"), TRAIN_OPTIONS, ids=[" ".join(o) for o, _ in TRAIN_OPTIONS])
def test_train_rejects_a_bad_option_in_one_line(tmp_path: Path, capsys, options: list[str], names: list[str]) -> None:
    out = tmp_path / "never"
    code, err = run(train.cli, [*TOY, "--out", str(out), *options], capsys)
    assert_one_line_error(code, err, *names)
    assert not out.exists(), "a run that never started left its output folder behind"


@pytest.mark.parametrize(("field", "value"), [("lowercase", "no"), ("compile", 1), ("norm_first", "False")])
def test_a_run_setting_that_should_be_yes_or_no_must_be_a_boolean(field: str, value: object) -> None:
    """A checkpoint's run settings are read with RunConfig.from_dict: "no" is not False (issue 27)."""
    settings = {**RunConfig(task="reverse", profile="fast", **DEFAULTS["toy"]["fast"]).to_dict(), field: value}
    with raises(ValueError, "--" + field.replace("_", "-"), repr(value)):
        RunConfig.from_dict(settings)


@NO_CUDA
def test_train_device_cuda_without_a_gpu(tmp_path: Path, capsys) -> None:
    code, err = run(train.cli, [*TOY, "--out", str(tmp_path / "x"), "--device", "cuda"], capsys)
    assert_one_line_error(code, err, "--device cuda", "CUDA")


def test_train_debug_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with raises(ValueError, "--batch-size", 0):
        train.cli([*TOY, "--out", str(tmp_path / "x"), "--batch-size", "0", "--debug"])
    monkeypatch.setenv(DEBUG_ENV, "1")
    with raises(ValueError, "--lr", -1):
        train.cli([*TOY, "--out", str(tmp_path / "x"), "--lr", "-1"])


def test_the_module_command_line_exits_2_or_1_without_a_traceback(tmp_path: Path) -> None:
    for module, argv, status in (
        ("transformer_lib.cli.train", [*TOY, "--out", str(tmp_path / "x"), "--lr", "inf"], 2),  # a bad command line
        ("transformer_lib.cli.translate", ["--checkpoint", str(tmp_path / "missing.pt"), "Hallo"], 1),  # a failed run
    ):
        result = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=300)
        assert result.returncode == status, result.stderr
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
        assert "Traceback" not in result.stderr


# --- 2. Data and output folders -----------------------------------------------------------------


def test_missing_multi30k_folder(tmp_path: Path, capsys) -> None:
    code, err = run(train.cli, ["--task", "multi30k", "--out", str(tmp_path / "o"), "--data-dir", str(tmp_path / "nowhere")], capsys)
    assert_one_line_error(code, err, str(tmp_path / "nowhere"), status=1)


def test_corrupt_multi30k_files(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    for name in MULTI30K_SHA256:
        (folder / name).write_bytes(b"not the data")
    code, err = run(train.cli, ["--task", "multi30k", "--out", str(tmp_path / "o"), "--data-dir", str(folder)], capsys)
    assert_one_line_error(code, err, "SHA-256", status=1)


@pytest.mark.parametrize("content", [b"plain text, not torch", None], ids=["not-prepared-data", "missing"])
def test_data_option_that_is_not_prepared_data(tmp_path: Path, capsys, content: bytes | None) -> None:
    path = tmp_path / "data.pt"
    if content is not None:
        path.write_bytes(content)
    code, err = run(train.cli, ["--task", "multi30k", "--out", str(tmp_path / "o"), "--data", str(path)], capsys)
    assert_one_line_error(code, err, str(path), "prepare-only", status=1)
    assert "weights_only=False" not in err  # torch's advice to unpickle an unknown file is not repeated


def test_unwritable_out(tmp_path: Path, capsys) -> None:
    (tmp_path / "a-file").write_text("x")
    code, err = run(train.cli, [*TOY, "--out", str(tmp_path / "a-file" / "run")], capsys)
    assert_one_line_error(code, err, "a-file", status=1)


def test_full_disk_keeps_the_previous_checkpoint(run_copy: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    before = (run_copy / "checkpoint.pt").read_bytes()

    def disk_full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:595] . unexpected pos 1207936 vs 1207824")

    monkeypatch.setattr(torch, "save", disk_full)
    code, err = run(train.cli, [*TOY, "--max-steps", "6", "--eval-every", "2", "--out", str(run_copy)], capsys)
    assert_one_line_error(code, err, "checkpoint.pt", status=1)
    assert (run_copy / "checkpoint.pt").read_bytes() == before
    assert not list(run_copy.glob(".*.tmp"))


def test_stale_temporary_files_are_removed_on_the_next_start(run_copy: Path) -> None:
    stale = run_copy / ".checkpoint.pt.k1ll3d.tmp"
    stale.write_bytes(b"half a checkpoint")
    train.main([*TOY, "--max-steps", "4", "--eval-every", "2", "--out", str(run_copy)])
    assert not stale.exists()


def test_a_second_run_into_a_locked_folder_is_refused(run_copy: Path, capsys) -> None:
    with FileLock(run_copy / ".lock"):  # another run holds the folder
        code, err = run(train.cli, [*TOY, "--max-steps", "6", "--out", str(run_copy)], capsys)
    assert_one_line_error(code, err, str(run_copy), status=1)


def test_restart_moves_earlier_results_aside(run_copy: Path) -> None:
    before = (run_copy / "checkpoint.pt").read_bytes()
    train.main([*TOY, "--max-steps", "2", "--out", str(run_copy), "--restart"])
    (aside,) = run_copy.glob("previous-*")
    assert (aside / "checkpoint.pt").read_bytes() == before and (aside / "metrics.json").is_file()
    assert load_checkpoint(run_copy / "checkpoint.pt")["step"] == 2


def test_metrics_json_is_strict_json(run_copy: Path) -> None:
    def refuse(name: str) -> None:
        raise AssertionError(f"metrics.json holds {name}, which JSON does not have")

    json.loads((run_copy / "metrics.json").read_text(), parse_constant=refuse)


# --- 3. Resuming --------------------------------------------------------------------------------


def test_resume_refuses_changed_settings_and_names_each(run_copy: Path, capsys) -> None:
    changed = ["--lr", "0.5", "--batch-size", "8", "--seed", "7", "--dropout", "0.3", "--preset", "multi30k"]
    code, err = run(train.cli, [*TOY, "--max-steps", "6", "--out", str(run_copy), *changed], capsys)
    toy = DEFAULTS["toy"]["fast"]  # what the run in the checkpoint was trained with
    assert_one_line_error(
        code, err, f"--lr 0.5 (the checkpoint has {toy['lr']:g})", f"--batch-size 8 (the checkpoint has {toy['batch_size']})",
        "--seed 7 (the checkpoint has 0)", "--dropout 0.3 (the checkpoint has 0.0)", "--preset multi30k", "--restart",
        status=1,
    )
    assert load_checkpoint(run_copy / "checkpoint.pt")["step"] == 4  # untouched


def test_resume_refuses_fewer_steps_than_done(run_copy: Path, capsys) -> None:
    code, err = run(train.cli, [*TOY, "--max-steps", "2", "--out", str(run_copy)], capsys)
    assert_one_line_error(code, err, "step 4", "2 steps", "--max-steps", status=1)


def test_resume_honours_more_steps(run_copy: Path) -> None:
    metrics = train.main([*TOY, "--max-steps", "6", "--eval-every", "2", "--out", str(run_copy)])
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 6 and metrics["settings"]["max_steps"] == 6


def test_a_misspelled_setting_in_a_checkpoint_is_an_error_not_ignored(run_copy: Path, capsys) -> None:
    """The run's settings are a typed RunConfig: an unknown key (an old name, a typo) is refused by name."""
    checkpoint = load_checkpoint(run_copy / "checkpoint.pt")
    run_settings = dict(checkpoint["run"])
    run_settings["warmup"] = run_settings.pop("warmup_steps")
    save_checkpoint(run_copy / "checkpoint.pt", {**checkpoint, "run": run_settings})
    code, err = run(train.cli, [*TOY, "--max-steps", "6", "--out", str(run_copy)], capsys)
    assert_one_line_error(code, err, "'warmup'", status=1)


def _as_format_1(checkpoint: dict) -> dict:
    """A checkpoint as the first format wrote it: vocabularies, no tokenizers, the output layer's old name."""
    old = {key: value for key, value in checkpoint.items() if key not in ("tokenizers", "checksum")}
    old.update(format_version=1, src_vocab={"tokens": checkpoint["tokenizers"]["src"]["tokens"], "unk_token": "<unk>"},
               tgt_vocab={"tokens": checkpoint["tokenizers"]["tgt"]["tokens"], "unk_token": "<unk>"},
               model_state={name.replace("output_layer.", "generator."): value
                            for name, value in checkpoint["model_state"].items()})
    return old


def test_a_format_1_checkpoint_is_refused_naming_the_version_that_reads_it(run_copy: Path, capsys) -> None:
    old = _as_format_1(load_checkpoint(run_copy / "checkpoint.pt"))
    torch.save(old, run_copy / "checkpoint.pt")  # no checksum, as the oldest files
    code, err = run(translate.main, ["--checkpoint", str(run_copy / "checkpoint.pt"), "--device", "cpu", "1 2 3"], capsys)
    assert_one_line_error(code, err, "checkpoint.pt", "format 1", "0.2.0", status=1)
    code, err = run(train.cli, [*TOY, "--max-steps", "6", "--out", str(run_copy)], capsys)
    assert_one_line_error(code, err, "checkpoint.pt", "format 1", "0.2.0", status=1)


def test_resume_refuses_another_task(run_copy: Path, capsys) -> None:
    code, err = run(train.cli, ["--task", "copy", "--out", str(run_copy), "--no-progress"], capsys)
    assert_one_line_error(code, err, "'reverse'", "--task", "'copy'", status=1)


# --- 4. Non-finite training and corrupt checkpoints ------------------------------------------------


def test_a_diverging_run_stops_and_keeps_the_last_good_checkpoint(run_copy: Path, capsys, monkeypatch) -> None:
    before = (run_copy / "checkpoint.pt").read_bytes()
    real_step = Trainer.train_step

    def poisoned(self: Trainer, batch):
        loss = real_step(self, batch)
        if self.step == 5:
            with torch.no_grad():
                next(self.model.parameters()).fill_(float("nan"))  # what --lr far too high does
        return loss

    monkeypatch.setattr(Trainer, "train_step", poisoned)
    code, err = run(train.cli, [*TOY, "--max-steps", "8", "--eval-every", "2", "--out", str(run_copy)], capsys)
    assert_one_line_error(code, err, "step", "NaN", "checkpoint.pt", status=1)
    assert (run_copy / "checkpoint.pt").read_bytes() == before


def test_a_corrupt_checkpoint_is_refused_by_resume_and_translate(run_copy: Path, capsys) -> None:
    path = run_copy / "checkpoint.pt"
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 400] = bytes(b ^ 0xFF for b in data[middle : middle + 400])
    path.write_bytes(bytes(data))
    code, err = run(train.cli, [*TOY, "--max-steps", "6", "--out", str(run_copy)], capsys)
    assert_one_line_error(code, err, str(path), "SHA-256", status=1)
    code, err = run(translate.main, ["--checkpoint", str(path), "--device", "cpu", "1 2 3"], capsys)
    assert_one_line_error(code, err, str(path), "SHA-256", status=1)


def test_a_changed_tensor_fails_the_checksum(trained: Path, tmp_path: Path) -> None:
    checkpoint = torch.load(trained / "checkpoint.pt", weights_only=True)
    name = next(iter(checkpoint["model_state"]))
    checkpoint["model_state"][name].view(-1)[0] += 1.0  # one weight, checksum left as it was
    torch.save(checkpoint, tmp_path / "edited.pt")
    with raises(CheckpointError, "edited.pt", "SHA-256"):
        load_checkpoint(tmp_path / "edited.pt")


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("max_len", 10**9, ["max_len=1000000000", "65536"]),
        ("n_encoder_layers", 10**6, ["n_encoder_layers=1000000", "128"]),
        ("layer_norm_eps", -100.0, ["layer_norm_eps", "-100.0"]),
        ("dropout", "0.1", ["dropout", "'0.1'"]),
        ("d_modle", 64, ["'d_modle'"]),
    ],
)
def test_a_checkpoint_config_out_of_bounds_is_refused(trained: Path, tmp_path: Path, capsys, field, value, named) -> None:
    checkpoint = load_checkpoint(trained / "checkpoint.pt")
    checkpoint["model_config"][field] = value
    save_checkpoint(tmp_path / "odd.pt", checkpoint)  # a valid file, with a valid checksum
    code, err = run(translate.main, ["--checkpoint", str(tmp_path / "odd.pt"), "--device", "cpu", "1 2"], capsys)
    assert_one_line_error(code, err, "odd.pt", *named, status=1)


def test_train_config_refuses_an_infinite_rate() -> None:
    with raises(ValueError, "lr", "inf"):
        TrainConfig(epochs=1, schedule="constant", lr=float("inf"))


# --- 5. The translator ----------------------------------------------------------------------------

TRANSLATE_CASES = [  # (options, named, exit status: 2 a bad command line, 1 input the model cannot take)
    (["--beam-size", "0", "1 2"], ["--beam-size", ">= 1", "0"], 2),
    (["--batch-size", "0", "1 2"], ["--batch-size", ">= 1", "0"], 2),
    ([], ["--eval"], 2),
    (["Ein Mann fährt Fahrrad."], ["sentence 1", "'Ein'", "0 1 2 3 4 5 6 7 8 9"], 1),
    (["1 2 \udcff"], ["sentence 1", "UTF-8"], 1),
    (["--beam-size", "x", "1 2"], ["--beam-size", "'x'"], 2),
    (["--device", "tpu9", "1 2"], ["tpu9"], 2),
]


@pytest.mark.parametrize(("argv", "names", "status"), TRANSLATE_CASES, ids=[" ".join(a)[:30] for a, _, _ in TRANSLATE_CASES])
def test_translate_rejects_bad_input_in_one_line(trained: Path, capsys, argv: list[str], names: list[str], status: int) -> None:
    code, err = run(translate.main, ["--checkpoint", str(trained / "checkpoint.pt"), *argv], capsys)
    assert_one_line_error(code, err, *names, status=status)


@NO_CUDA
def test_translate_device_cuda_without_a_gpu_is_not_called_a_bad_checkpoint(trained: Path, capsys) -> None:
    code, err = run(translate.main, ["--checkpoint", str(trained / "checkpoint.pt"), "--device", "cuda", "1 2"], capsys)
    assert_one_line_error(code, err, "'cuda'")
    assert "checkpoint" not in err


@pytest.mark.parametrize("content", [None, b"PK\x03\x04 not a zip"], ids=["missing", "not-a-checkpoint"])
def test_translate_checkpoint_that_is_missing_or_not_one(tmp_path: Path, capsys, content) -> None:
    path = tmp_path / "model.pt"
    if content is not None:
        path.write_bytes(content)
    code, err = run(translate.main, ["--checkpoint", str(path), "--device", "cpu", "1 2"], capsys)
    assert_one_line_error(code, err, str(path), status=1)


@pytest.fixture(scope="module")
def translator(trained: Path) -> Translator:
    return Translator.from_checkpoint(trained / "checkpoint.pt")


@pytest.mark.parametrize(
    ("call", "error", "named"),
    [
        (lambda t: t.translate(["1 2"], batch_size=-1), TranslationError, ["batch_size", -1]),
        (lambda t: t.translate(["1 2"], batch_size=0), TranslationError, ["batch_size", 0]),
        (lambda t: t.translate([None]), TranslationError, ["sentence 1", "NoneType"]),
        (lambda t: t.translate([]), TranslationError, []),
        (lambda t: t.translate(["1 2"], beam_size=0), TranslationError, ["beam_size", 0]),
        (lambda t: t.encode(["   "]), TranslationError, ["sentence 1"]),  # translate() passes a blank line through
    ],
    ids=["batch-negative", "batch-zero", "none", "no-sentences", "beam-zero", "blank-encoded"],
)
def test_translator_arguments(translator: Translator, call, error, named: list) -> None:
    with raises(error, *named):
        call(translator)


def test_translator_refuses_a_checkpoint_of_another_task(trained: Path) -> None:
    with raises(TranslationError, "'reverse'", "'multi30k'"):
        Translator.from_checkpoint(trained / "checkpoint.pt", task="multi30k")


def test_a_wide_beam_no_longer_ends_at_step_one(translator: Translator) -> None:
    """Beam 50 used to return empty translations: <eos> finished at step 1 and outscored the rest."""
    src, src_mask = translator.encode(["1 2 3", "4", "5 6"])
    eos = translator.tgt_vocab.eos_id
    assert not (translator.translate_ids(src, src_mask, beam_size=50)[:, 0] == eos).any()
    ids = dict(bos_id=translator.tgt_vocab.bos_id, eos_id=eos, pad_id=translator.tgt_vocab.pad_id)
    unguarded = beam_search(translator.model, src, src_mask, beam_size=50, max_new_tokens=8, **ids)  # min_len=0
    assert (unguarded.sequences[:, 0] == eos).any(), "the check must be able to fail"


def test_a_sentence_of_only_unknown_words_warns() -> None:
    pytest.importorskip("spacy")
    vocab = Vocab(["<pad>", "<unk>", "<bos>", "<eos>", "ein", "Mann"])
    model = Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=len(vocab), tgt_vocab_size=len(vocab)))
    translator = Translator(model.eval(), WordTokenizer(vocab, "de"), WordTokenizer(vocab, "en"), "multi30k",
                            {"src_lang": "de", "tgt_lang": "en"})
    with pytest.warns(UserWarning, match="你好"):  # the warning names the word; its wording is free
        translator.source_ids(["你好 🙂"])


# --- 6. Decoding functions ------------------------------------------------------------------------

V, BOS, EOS, PAD = 10, 2, 3, 0


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.from_preset("tiny", src_vocab_size=V, tgt_vocab_size=V)).eval()


SRC = torch.tensor([[5, 6, 7, EOS]])
IDS = dict(max_new_tokens=5, bos_id=BOS, eos_id=EOS, pad_id=PAD)


@pytest.mark.parametrize(
    ("call", "error", "named"),
    [
        (lambda m: greedy_decode(m, SRC, None, **{**IDS, "eos_id": V}), ValueError, ["eos_id=10", "[0, 9]"]),
        (lambda m: greedy_decode(m, SRC, None, **{**IDS, "bos_id": 99}), ValueError, ["bos_id=99", "[0, 9]"]),
        (lambda m: greedy_decode(m, SRC + 20, None, **IDS), ValueError, ["src", 27, "[0, 9]"]),
        (lambda m: greedy_decode(m, SRC[:, :0], None, **IDS), ValueError, ["src", "(1, 0)"]),
        (lambda m: beam_search(m, SRC[:0], None, beam_size=2, **IDS), ValueError, ["src", "(0, 4)"]),
        (lambda m: greedy_decode(m, SRC, None, **IDS, min_new_tokens=-1), ValueError, ["min_new_tokens", -1, ">= 0"]),
        (lambda m: greedy_decode(m, SRC.to(torch.uint8), None, **IDS), TypeError, ["src", "torch.uint8"]),
        (lambda m: sample(m, SRC, None, **IDS, temperature=float("nan")), ValueError, ["temperature", "nan"]),
    ],
    ids=["eos-outside", "bos-outside", "src-outside", "zero-length-source", "empty-batch", "min-len", "uint8", "nan-temperature"],
)
def test_decoding_arguments(model: Transformer, call, error, named: list) -> None:
    with raises(error, *named):
        call(model)


def test_sampling_from_all_minus_infinity_is_refused() -> None:
    with raises(ValueError, "-inf"):
        sampling_distribution(torch.full((2, 5), float("-inf")))


def test_a_nan_embedding_row_is_refused_not_decoded_to_padding(model: Transformer) -> None:
    broken = Transformer(model.config).eval()
    broken.load_state_dict(model.state_dict())
    with torch.no_grad():
        broken.src_embed.embedding.weight[5].fill_(float("nan"))
    for decode in (greedy_decode, sample):
        with raises(ValueError, "NaN"):
            decode(broken, SRC, None, **IDS)
    with raises(ValueError, "NaN", "step 1"):
        beam_search(broken, SRC, None, beam_size=2, **IDS)


def test_train_bpe_vocabulary_smaller_than_the_specials(tmp_path: Path, capsys) -> None:
    out = tmp_path / "never"
    code, err = run(train.cli, ["--task", "multi30k", "--tokenizer", "bpe", "--vocab-size", "4", "--no-progress",
                                "--device", "cpu", "--out", str(out)], capsys)
    assert_one_line_error(code, err, "--vocab-size", "4")
    assert not out.exists()


# --- 7. Issue 27: yes/no fields, sizes, inputs at the model's boundary ---------------------------------

TINY = dict(src_vocab_size=12, tgt_vocab_size=12)

CONSTRUCTORS = [
    (lambda: TransformerConfig.from_preset("tiny", **TINY, norm_first="no"), ["norm_first", "'no'"]),
    (lambda: TransformerConfig.from_preset("tiny", **TINY, share_embeddings="False"), ["share_embeddings", "'False'"]),
    (lambda: TransformerConfig.from_preset("tiny", **TINY, tie_output=1), ["tie_output", 1]),
    (lambda: TransformerConfig.from_preset("tiny", **TINY, d_model=-8), ["d_model", -8]),
    (lambda: TransformerConfig.from_preset("tiny", **TINY, d_model=8.0), ["d_model", 8.0]),
    (lambda: MultiHeadAttention(-8, 2), ["d_model", -8]),
    (lambda: MultiHeadAttention(8.0, 2), ["d_model", 8.0]),
    (lambda: MultiHeadAttention(8, 0), ["n_heads", 0]),
    (lambda: MultiHeadAttention(8, 2, dropout=1.5), ["dropout", 1.5]),
    (lambda: MultiHeadAttention(8, 2, kdim=-3), ["kdim", -3]),
    (lambda: FeedForward(8, -1), ["d_ff", -1]),
    (lambda: TokenEmbedding(10, 0), ["d_model", 0]),
    (lambda: Residual(8, norm_first="no"), ["norm_first", "'no'"]),
    (lambda: Vocab(["<pad>", "<unk>", 7]), ["token 2", "7", "int"]),
    (lambda: RMSNorm(0), ["d_model", 0]),
    (lambda: RMSNorm(8.0), ["d_model", 8.0]),
    (lambda: RMSNorm(8, eps=float("nan")), ["eps", "nan"]),
    (lambda: RMSNorm(8, eps=-1e-5), ["eps", -1e-5]),
]


@pytest.mark.parametrize(("build", "named"), CONSTRUCTORS, ids=[" ".join(map(str, n)) for _, n in CONSTRUCTORS])
def test_a_setting_of_the_wrong_type_or_size_is_refused_by_name(build, named: list) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        build()
    assert all(str(name) in str(info.value) for name in named), (str(info.value), named)
    assert "torch" not in type(info.value).__module__


def test_a_config_file_of_a_trillion_parameters_is_refused_before_it_is_built() -> None:
    """Every size under its own limit, about 1e12 parameters together: refused from the sizes alone."""
    huge = dict(TransformerConfig.from_preset("tiny", **TINY).to_dict(), d_model=16_384, n_heads=16, d_ff=65_536,
                n_encoder_layers=128, n_decoder_layers=128, src_vocab_size=1_000_000, tgt_vocab_size=1_000_000)
    with raises(ValueError, "994,", f"{FILE_PARAMETER_LIMIT:,}"):
        model_config_from_file(huge)


def test_the_parameter_count_from_the_sizes_is_the_model_s() -> None:
    for overrides in ({}, {"positional": "learned", "tie_output": False}, {"positional": "relative", "n_kv_heads": 2},
                      {"share_embeddings": True, "norm_first": False}, {"n_encoder_layers": 0, "positional": "rope"},
                      {"norm": "rmsnorm", "activation": "swiglu", "qk_norm": True}, {"qk_norm": True, "n_kv_heads": 2},
                      {"activation": "swiglu", "norm_first": False}):
        config = TransformerConfig.from_preset("tiny", **TINY, **overrides)
        assert parameter_count(config) == count_parameters(Transformer(config)), overrides


@pytest.fixture(scope="module")
def small() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.from_preset("tiny", **TINY)).eval()


MODEL_INPUTS = [
    (lambda m: m(torch.zeros(2, 0, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)), ValueError, ["src", "(2, 0)"]),
    (lambda m: m(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 0, dtype=torch.long)), ValueError, ["tgt", "(2, 0)"]),
    (lambda m: m(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long)), TypeError, ["src", "torch.float32"]),
    (lambda m: m(torch.ones(3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)), ValueError, ["src", "(3,)"]),
    (lambda m: MultiHeadAttention(8, 2)(*[torch.randn(1, 3, 8, dtype=torch.float64)] * 3), TypeError,
     ["query", "torch.float64", "torch.float32"]),
    (lambda m: MultiHeadAttention(8, 2)(*[torch.ones(1, 3, 8, dtype=torch.long)] * 3), TypeError, ["query", "torch.int64"]),
    (lambda m: MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), torch.randn(1, 3, 5), torch.randn(1, 3, 8)), ValueError,
     ["key", "(1, 3, 5)", 8]),
    (lambda m: DecoderOnlyTransformer(TransformerConfig.decoder_only("tiny", 12))(torch.zeros(1, 0, dtype=torch.long)),
     ValueError, ["tokens", "(1, 0)"]),
]


@pytest.mark.parametrize(("call", "error", "named"), MODEL_INPUTS, ids=[" ".join(map(str, n)) for _, _, n in MODEL_INPUTS])
def test_model_inputs_are_checked_at_the_public_boundary(small: Transformer, call, error, named: list) -> None:
    with raises(error, *named):
        call(small)


def test_float64_attention_works_once_the_module_is_float64_too() -> None:
    mha = MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    assert mha(x, x, x)[0].dtype == torch.float64


TOY_BOUNDS = [
    (dict(longest=100_000), ["longest=100000", MAX_LENGTH]),
    (dict(n_symbols=10**8), ["n_symbols=100000000", MAX_SYMBOLS]),
    (dict(n_train=10**9), [1_000_000_005, MAX_PAIRS]),
    (dict(n_symbols=2, longest=2, n_train=5), [10, 6]),
]


@pytest.mark.parametrize(("kwargs", "named"), TOY_BOUNDS, ids=[str(k) for k, _ in TOY_BOUNDS])
def test_toy_task_bounds_fail_at_once(kwargs: dict, named: list) -> None:
    arguments = {"n_train": 10, "n_heldout": 5, **kwargs}
    with raises(ValueError, *named):
        toy_task("reverse", arguments.pop("n_train"), arguments.pop("n_heldout"), **arguments)


# --- 8. Issue 27: checkpoints whose checksum is valid but whose contents are not -----------------------


def _odd(trained: Path, tmp_path: Path, edit) -> Path:
    """The trained checkpoint with ``edit(checkpoint)`` applied, saved with a valid checksum."""
    checkpoint = load_checkpoint(trained / "checkpoint.pt")
    edit(checkpoint)
    save_checkpoint(tmp_path / "odd.pt", checkpoint)
    return tmp_path / "odd.pt"


def _words(tokens: list, lang: object = "de", **extra) -> dict:
    return {"kind": "words", "tokens": tokens, "lang": lang, "lowercase": False, **extra}


def _tokens(checkpoint: dict, side: str = "src") -> list:
    return list(checkpoint["tokenizers"][side]["tokens"])


def _put(checkpoint: dict, side: str, tokenizer: dict) -> None:
    checkpoint["tokenizers"][side] = tokenizer


HUGE = dict(d_model=16_384, n_heads=16, d_ff=65_536, n_encoder_layers=128, n_decoder_layers=128)
CHECKPOINT_EDITS = [
    (lambda c: _put(c, "tgt", {**c["tokenizers"]["tgt"], "tokens": [t for t in _tokens(c, "tgt") if t != "<eos>"] + ["x"]}),
     ["tokenizers['tgt']", "<eos>"]),
    (lambda c: _put(c, "src", {**c["tokenizers"]["src"], "tokens": [*_tokens(c)[:5], 5, *_tokens(c)[6:]]}),
     ["tokenizers['src']['tokens'][5]", "int"]),
    (lambda c: _put(c, "src", _words(_tokens(c), "klingon")), ["tokenizers['src']['lang']", "'klingon'"]),
    (lambda c: _put(c, "src", _words(_tokens(c), 7)), ["tokenizers['src']['lang']", "7"]),
    (lambda c: _put(c, "src", {**c["tokenizers"]["src"], "normalizer": {"type": "Replace"}}),
     ["tokenizers['src']", "'normalizer'"]),
    (lambda c: _put(c, "tgt", {"kind": "bpe", "tokens": _tokens(c, "tgt"), "merges": [["1", "2"]], "lowercase": False}),
     ["tokenizers['tgt']['merges'][0]", "'12'"]),
    (lambda c: _put(c, "tgt", {"kind": "bpe", "tokens": _tokens(c, "tgt"), "merges": [], "lowercase": "yes"}),
     ["tokenizers['tgt']['lowercase']", "'yes'"]),
    (lambda c: _put(c, "src", {**c["tokenizers"]["src"], "kind": "sentencepiece"}), ["tokenizers['src']['kind']", "'sentencepiece'"]),
    (lambda c: c["tokenizers"].pop("tgt"), ["tokenizers", "'tgt'"]),
    (lambda c: _put(c, "src", {**c["tokenizers"]["src"], "tokens": [*_tokens(c), "9"]}), ["tokenizers['src']", "'9'", "twice"]),
    (lambda c: _put(c, "src", {**c["tokenizers"]["src"], "tokens": [*_tokens(c), "extra"]}), ["tokenizers['src']", "src_vocab_size"]),
    (lambda c: c["model_config"].update(pad_id=5), ["model_config.pad_id", "5"]),
    (lambda c: c["model_config"].update(norm_first="no"), ["model_config", "norm_first", "'no'"]),
    (lambda c: c["model_config"].update(HUGE), ["model_config", f"{FILE_PARAMETER_LIMIT:,}"]),
    (lambda c: c["rng_state"].update(torch=c["rng_state"]["torch"][:100]), ["rng_state['torch']", "(100,)"]),
    (lambda c: c["rng_state"].update(torch=c["rng_state"]["torch"].float()), ["rng_state['torch']", "torch.float32"]),
    (lambda c: c.update(rng_state=[1, 2]), ["rng_state"]),
    (lambda c: c.update(step=-1), ["step", "-1"]),
    (lambda c: c.update(epoch="2"), ["epoch", "'2'"]),
    (lambda c: c.update(task=5), ["task", "5"]),
    (lambda c: c.update(data=["de", "en"]), ["data", "['de', 'en']"]),
    (lambda c: c.update(model_config=[64, 4]), ["model_config", "list"]),
    (lambda c: _put(c, "src", "symbols 0 1 2"), ["tokenizers['src']", "str"]),
    (lambda c: _put(c, "src", _words(_tokens(c), "../de")), ["tokenizers['src']['lang']", "'../de'"]),
    (lambda c: _put(c, "src", {**c["tokenizers"]["src"], "tokens": "<pad> <unk> <bos> <eos>"}), ["tokenizers['src']['tokens']", "str"]),
]


@pytest.mark.parametrize(("edit", "named"), CHECKPOINT_EDITS, ids=[n[-1][:30] for _, n in CHECKPOINT_EDITS])
def test_a_checkpoint_with_a_valid_checksum_is_still_checked_entry_by_entry(trained: Path, tmp_path: Path, edit,
                                                                              named: list) -> None:
    path = _odd(trained, tmp_path, edit)
    with raises(CheckpointError, str(path), *named):
        load_checkpoint(path)
    with raises(TranslationError, str(path), *named):  # the translator reports it as it is
        Translator.from_checkpoint(path)


def test_the_edited_checkpoints_load_when_left_alone(trained: Path, tmp_path: Path) -> None:
    """The edits above are what fails: the same file, unedited, loads and translates."""
    translator = Translator.from_checkpoint(_odd(trained, tmp_path, lambda checkpoint: None))
    assert len(translator.translate(["1 2 3"])) == 1


def test_translate_reports_an_inconsistent_checkpoint_in_one_line(trained: Path, tmp_path: Path, capsys) -> None:
    path = _odd(trained, tmp_path, lambda c: c["model_config"].update(pad_id=5))
    code, err = run(translate.main, ["--checkpoint", str(path), "--device", "cpu", "1 2"], capsys)
    assert_one_line_error(code, err, str(path), "pad_id", status=1)


def test_a_pickle_that_runs_code_is_refused_without_advising_weights_only_false(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.makedirs, (str(marker),))

    torch.save({"format_version": 2, "model_state": Payload()}, tmp_path / "evil.pt")
    with raises(CheckpointError, str(tmp_path / "evil.pt"), "makedirs") as refused:
        load_checkpoint(tmp_path / "evil.pt")
    assert "weights_only" not in str(refused.value)
    assert not marker.exists(), "loading ran the file's code"
    with raises(TranslationError, "evil.pt") as refused:
        Translator.from_checkpoint(tmp_path / "evil.pt")
    assert "weights_only" not in str(refused.value)


def test_word_tokenizers_refuse_an_unknown_language_without_an_import_error() -> None:
    vocab = Vocab(["<pad>", "<unk>", "<bos>", "<eos>", "Qapla'"])
    with raises(ValueError, "'klingon'"):
        WordTokenizer(vocab, "klingon").tokenize("Qapla'")
    with raises(ValueError, "'klingon'"):
        tokenizer_from_dict(_words(list(vocab.tokens), "klingon"))


# --- 9. Issue 27: decoders and the translator's warnings ------------------------------------------


def _favouring(translator: Translator, token_id: int) -> Translator:
    """The translator with an output layer that scores ``token_id`` 50 above everything else."""
    model = Transformer(translator.model.config).eval()
    model.load_state_dict(translator.model.state_dict())
    biased = torch.nn.Linear(model.config.d_model, model.config.tgt_vocab_size)
    with torch.no_grad():
        biased.weight.copy_(model.output_layer.weight)
        biased.bias.zero_()
        biased.bias[token_id] = 50.0
    model.output_layer = biased
    return Translator(model, translator.src_tokenizer, translator.tgt_tokenizer, translator.task, translator.data)


@pytest.mark.parametrize("special", ["bos_id", "pad_id"])
@pytest.mark.parametrize("beam_size", [1, 4, 200])
def test_no_decoder_outputs_bos_or_pad(translator: Translator, special: str, beam_size: int) -> None:
    """An undertrained model's favourite may be <bos> or <pad>; it decoded to an empty translation."""
    vocab = translator.tgt_vocab
    biased = _favouring(translator, getattr(vocab, special))
    src, src_mask = biased.encode(["1 2 3", "4 5"])
    with torch.no_grad():
        start = torch.full((2, 1), vocab.bos_id)
        first = next_token_logits(biased.model, start, biased.model.encode(src, src_mask), src_mask)
    assert (first.argmax(-1) == getattr(vocab, special)).all(), "the check must be able to fail"
    for row in biased.translate_ids(src, src_mask, beam_size=beam_size).tolist():
        body = row[: row.index(vocab.eos_id)] if vocab.eos_id in row else row
        assert vocab.bos_id not in body and vocab.pad_id not in body, row
    assert all(text.strip() for text in biased.translate(["1 2 3", "4 5"], beam_size=beam_size))


def test_an_unknown_only_translation_warns_naming_the_sentence(translator: Translator) -> None:
    biased = _favouring(translator, translator.tgt_vocab.unk_id)
    with pytest.warns(TranslationWarning, match="sentence 2") as caught:
        biased.translate(["1 2", "3 4 5"])
    assert any("'3 4 5'" in str(w.message) for w in caught)


def test_a_sound_translation_does_not_warn(translator: Translator) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", TranslationWarning)
        translator.translate(["1 2 3"])


def test_translate_accepts_any_iterable_of_sentences(translator: Translator) -> None:
    sentences = ["1 2 3", "4 5", "6"]
    expected = translator.translate(sentences)
    assert translator.translate(s for s in sentences) == expected
    assert translator.translate(tuple(sentences)) == expected
    assert translator.translate(iter(sentences)) == expected


@pytest.mark.parametrize(("given", "named"), [(5, "int"), (b"1 2", "bytes"), ("1 2", "str")])
def test_translate_refuses_what_is_not_an_iterable_of_sentences(translator: Translator, given, named: str) -> None:
    with raises(TypeError, named):
        translator.translate(given)


def test_a_translator_refuses_tokenizers_that_do_not_fit_its_model(translator: Translator) -> None:
    bigger = SymbolTokenizer(Vocab([*translator.src_vocab.tokens, "extra"]))
    with raises(TranslationError, "src", len(translator.src_vocab) + 1, f"src_vocab_size={len(translator.src_vocab)}"):
        Translator(translator.model, bigger, translator.tgt_tokenizer, translator.task, translator.data)
    swapped = SymbolTokenizer(Vocab(["<unk>", "<pad>", *translator.tgt_vocab.tokens[2:]]))
    with raises(TranslationError, "tgt", "<pad> id 1", "pad_id=0"):
        Translator(translator.model, translator.src_tokenizer, swapped, translator.task, translator.data)


@pytest.mark.parametrize("device", ["meta", "xla"])
def test_a_device_the_library_does_not_run_on_is_refused_by_name(trained: Path, tmp_path: Path, capsys, device: str) -> None:
    """``--device meta`` was accepted and ended in a NotImplementedError from inside torch."""
    with raises(ValueError, f"'{device}'", "cpu"):
        parse_device(device)
    with raises(TranslationError, f"'{device}'"):
        Translator.from_checkpoint(trained / "checkpoint.pt", device=device)
    code, err = run(translate.main, ["--checkpoint", str(trained / "checkpoint.pt"), "--device", device, "1 2"], capsys)
    assert_one_line_error(code, err, device)
    out = tmp_path / "never"
    code, err = run(train.cli, [*TOY, "--out", str(out), "--device", device], capsys)
    assert_one_line_error(code, err, device)
    assert not out.exists()


YES_NO = [
    (lambda m: greedy_decode(m, SRC, None, **IDS, use_cache="no"), ["use_cache", "'no'"]),
    (lambda m: beam_search(m, SRC, None, beam_size=2, **IDS, use_cache="False"), ["use_cache", "'False'"]),
    (lambda m: MultiHeadAttention(8, 2, bias="no"), ["bias", "'no'"]),
    (lambda m: WordTokenizer(Vocab(["<pad>", "<unk>", "<bos>", "<eos>"]), "de", lowercase="no"), ["lowercase", "'no'"]),
    (lambda m: SubwordTokenizer.train(["ein Mann", "a man"] * 3, vocab_size=30, lowercase="no"), ["lowercase", "'no'"]),
]


@pytest.mark.parametrize(("call", "named"), YES_NO, ids=[n[0] for _, n in YES_NO])
def test_every_yes_no_argument_must_be_a_boolean(model: Transformer, call, named: list) -> None:
    """A string is truthy: "no" and "False" used to mean yes."""
    with raises(ValueError, *named):
        call(model)


def test_resuming_from_a_checkpoint_with_a_truncated_random_state_is_one_line(trained: Path, tmp_path: Path, capsys) -> None:
    """It was a RuntimeError from torch.set_rng_state, deep inside resuming; the checkpoint stays as it was."""
    run_dir = Path(shutil.copytree(trained, tmp_path / "run"))
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    checkpoint["rng_state"]["torch"] = checkpoint["rng_state"]["torch"][:-8]
    save_checkpoint(run_dir / "checkpoint.pt", checkpoint)
    before = (run_dir / "checkpoint.pt").read_bytes()
    code, err = run(train.cli, [*TOY, "--max-steps", "6", "--out", str(run_dir)], capsys)
    assert_one_line_error(code, err, "checkpoint.pt", "rng_state['torch']", status=1)
    assert (run_dir / "checkpoint.pt").read_bytes() == before


def test_an_unknown_language_is_refused_without_spacy_too() -> None:
    """Prepared data train on machines without spaCy: the language's form is still checked there."""
    code = ("import sys; sys.modules['spacy'] = None\n"
            "from transformer_lib.tokenizers import check_language\n"
            "check_language('de')\n"
            "try:\n    check_language('klingon')\nexcept ValueError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert result.returncode == 0 and "'klingon'" in result.stdout, result.stderr


# --- 10. Files written whole or not at all, and exports that fit what they replace (issue 43) ------

TUNING = {"chosen_by": "val BLEU", "chosen": {"beam": 2, "length_penalty": 0.6, "bleu": 1.0},
          "val": [{"beam": 2, "length_penalty": 0.6, "bleu": 1.0}], "test": [{"beam": 2, "length_penalty": 0.6, "bleu": 0.9}]}


@pytest.fixture
def shipped_copy(tmp_path: Path) -> Path:
    """The package's pretrained file and its SHA256SUMS, copied: what an export may replace."""
    folder = tmp_path / "weights"
    shutil.copytree(pretrained.shipped_path().parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder / pretrained.FILE_NAME


def _export(capsys, run_dir: Path, out: Path, tuning: object = TUNING) -> tuple[int, str]:
    path = out.parent / "tuning.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tuning if isinstance(tuning, str) else json.dumps(tuning))
    return run(export.main, [str(run_dir), "--tuning", str(path), "--out", str(out)], capsys)


def _unchanged(path: Path) -> tuple[bytes, bytes]:
    return path.read_bytes(), (path.parent / "SHA256SUMS").read_bytes()


def test_export_has_no_default_target(trained: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "t.json").write_text(json.dumps(TUNING))
    code, err = run(export.main, [str(trained), "--tuning", str(tmp_path / "t.json")], capsys)
    assert_one_line_error(code, err, "--out")


def test_export_refuses_to_replace_a_model_of_another_task(trained: Path, shipped_copy: Path, capsys) -> None:
    """The reverse toy run over the de->en model: `--pretrained "1 2 3"` printed `3 2 1` after it."""
    before = _unchanged(shipped_copy)
    code, err = _export(capsys, trained, shipped_copy)
    assert_one_line_error(code, err, str(shipped_copy), "'multi30k'", "de->en", "'reverse'", status=1)
    assert _unchanged(shipped_copy) == before
    pretrained.load(shipped_copy)  # still loads, checksum and all


def test_export_refuses_to_replace_a_file_that_is_not_a_model(trained: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "notes.txt"
    out.write_text("my notes\n")
    code, err = _export(capsys, trained, out)
    assert_one_line_error(code, err, str(out), status=1)
    assert out.read_text() == "my notes\n"


def test_an_export_over_the_size_limit_leaves_the_file_it_would_replace(trained: Path, tmp_path: Path, capsys,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "weights" / "reverse.safetensors"
    assert _export(capsys, trained, out)[0] == 0
    before = _unchanged(out)
    monkeypatch.setattr(pretrained, "MAX_BYTES", 1000)
    code, err = _export(capsys, trained, out)
    assert_one_line_error(code, err, "1,000", f"{out.stat().st_size:,}", status=1)
    assert _unchanged(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["SHA256SUMS", "reverse.safetensors", "tuning.json"]
    pretrained.load(out)


def test_an_export_replaces_a_model_of_its_own_task_and_lists_its_checksum(trained: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "weights" / "reverse.safetensors"
    (out.parent).mkdir()
    (out.parent / "SHA256SUMS").write_text("0" * 64 + "  other.safetensors\n")
    for _ in range(2):
        assert _export(capsys, trained, out)[0] == 0
    assert pretrained.load(out).translate(["1 2"])  # the checksum listed is the file's
    assert sorted(line.split()[1] for line in (out.parent / "SHA256SUMS").read_text().splitlines()) == [
        "other.safetensors", "reverse.safetensors"]


def test_export_refuses_an_unfinished_run(run_copy: Path, tmp_path: Path, capsys) -> None:
    metrics = json.loads((run_copy / "metrics.json").read_text())
    metrics.update(selection=None, final=None)  # what metrics.json holds between checkpoints, or after Ctrl-C
    (run_copy / "metrics.json").write_text(json.dumps(metrics))
    code, err = _export(capsys, run_copy, tmp_path / "out" / "m.safetensors")
    assert_one_line_error(code, err, str(run_copy), "unfinished", str(metrics["steps"]), status=1)
    assert not (tmp_path / "out" / "m.safetensors").exists()


BAD_TUNING = [
    ("not json", ["not JSON"]),
    ([1, 2], ["list"]),
    ({"chosen": {}}, ["chosen_by", "val", "test"]),
    ({**TUNING, "chosen": {"beam": 0, "length_penalty": 0.6}}, ["chosen.beam", "0"]),
    ({**TUNING, "chosen": {"beam": 2}}, ["chosen.length_penalty", "None"]),
    ({**TUNING, "test": []}, ["'test'"]),
    ({**TUNING, "val": [{"beam": "2", "length_penalty": 1}]}, ["val[0].beam", "'2'"]),
    ({**TUNING, "test": [{"beam": 3, "length_penalty": 0.6}]}, ["beam 2", "length penalty 0.6"]),
]


@pytest.mark.parametrize(("tuning", "named"), BAD_TUNING, ids=[n[0] for _, n in BAD_TUNING])
def test_export_refuses_a_bad_tuning_report_in_one_line(trained: Path, tmp_path: Path, capsys, tuning, named) -> None:
    out = tmp_path / "out" / "m.safetensors"
    code, err = _export(capsys, trained, out, tuning)
    assert_one_line_error(code, err, *named, status=1)
    assert not out.exists()


@pytest.mark.parametrize("name", ["same.txt", "same.txt.gz"])
def test_translate_input_and_output_may_be_the_same_file(trained: Path, tmp_path: Path, capsys, name: str) -> None:
    path = tmp_path / name
    with nbest.open_output(str(path)) as f:
        f.write("1 2 3\n4 5\n")
    code = translate.main(["--checkpoint", str(trained / "checkpoint.pt"), "--device", "cpu",
                           "--input", str(path), "--output", str(path)])
    assert code == 0, capsys.readouterr().err
    assert len(nbest.read_lines(str(path))) == 2


def test_a_failed_write_leaves_the_output_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("earlier translations\n")
    path.chmod(0o640)
    with pytest.raises(KeyboardInterrupt), nbest.open_output(str(path)) as f:
        f.write("half of the new ones\n")
        raise KeyboardInterrupt
    assert path.read_text() == "earlier translations\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    with nbest.open_output(str(path)) as f:
        f.write("new\n")
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == 0o640  # its mode kept


def test_an_output_through_a_symbolic_link_writes_its_target(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("old\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    with nbest.open_output(str(tmp_path / "link.txt")) as f:
        f.write("new\n")
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "real.txt").read_text() == "new\n"


# --- 11. Messages that said something else than what went wrong (issue 43) -------------------------

@pytest.mark.parametrize("data", [b"1 2\n3 \xe9 4\n", b"1 2\x00\xff\xfe\n"], ids=["latin-1", "binary"])
def test_input_that_is_not_utf8_on_a_strict_standard_input_is_named(trained: Path, capsys, monkeypatch, data: bytes) -> None:
    """A desktop locale decodes standard input strictly: the input was dropped and the error asked for a sentence."""
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict"))
    code, err = run(translate.main, ["--checkpoint", str(trained / "checkpoint.pt"), "--device", "cpu"], capsys)
    line = len(data.splitlines())
    assert_one_line_error(code, err, f"sentence {line}", "UTF-8", status=1)


@pytest.mark.parametrize("value", ["false", "0", "no", "off", "False"])
def test_a_debug_variable_that_says_no_leaves_debug_off(trained: Path, capsys, monkeypatch, value: str) -> None:
    monkeypatch.setenv(DEBUG_ENV, value)
    code, err = run(translate.main, ["--checkpoint", str(trained / "checkpoint.pt"), "--beam-size", "0", "1 2"], capsys)
    assert_one_line_error(code, err, "--beam-size")


def test_train_out_at_a_dangling_symbolic_link(tmp_path: Path, capsys) -> None:
    out = tmp_path / "link"
    out.symlink_to(tmp_path / "nowhere")
    code, err = run(train.cli, [*TOY, "--max-steps", "1", "--out", str(out)], capsys)
    assert_one_line_error(code, err, str(out), str(tmp_path / "nowhere"), status=1)
    assert out.is_symlink() and not (tmp_path / "nowhere").exists()


def test_train_out_that_is_a_file(tmp_path: Path, capsys) -> None:
    out = tmp_path / "notes.txt"
    out.write_text("mine\n")
    code, err = run(train.cli, [*TOY, "--max-steps", "1", "--out", str(out)], capsys)
    assert_one_line_error(code, err, str(out), status=1)
    assert out.read_text() == "mine\n"


def test_a_toy_sequence_longer_than_the_preset_allows_names_longest(tmp_path: Path, capsys) -> None:
    code, err = run(train.cli, [*TOY, "--longest", "300", "--max-steps", "1", "--out", str(tmp_path / "r")], capsys)
    assert_one_line_error(code, err, "--longest", "300", "127")
    assert not (tmp_path / "r").exists()


# --- 12. Inputs that changed results without a word (issue 43) ---------------------------------------

FIXTURE = Path(__file__).parent / "fixtures" / "multi30k"
FIXTURE_SHA256 = {line.split()[1]: line.split()[0] for line in (FIXTURE / "SHA256SUMS").read_text().splitlines()}


@pytest.fixture(scope="module")
def fixture_data(tmp_path_factory: pytest.TempPathFactory) -> PreparedTranslation:
    return prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, min_freq=1)


def _edited(prepared: PreparedTranslation, path: Path, **changes) -> Path:
    dataclasses.replace(prepared, **changes).save(path)
    return path


def test_resume_refuses_other_data_with_the_same_tokenizers(fixture_data: PreparedTranslation, tmp_path: Path, capsys) -> None:
    """Resuming with another --data trained on it without a word (only the tokenizers were compared)."""
    first = _edited(fixture_data, tmp_path / "a.pt")
    train_split = fixture_data.splits["train"]
    order = list(range(len(train_split)))[::-1]  # the same pairs in another order: other batches, other weights
    other = _edited(fixture_data, tmp_path / "b.pt", splits={**fixture_data.splits, "train": train_split.subset(order)},
                    text={**fixture_data.text, "train": [fixture_data.text["train"][i] for i in order]})
    run_args = ["--task", "multi30k", "--out", str(tmp_path / "run"), "--profile", "fast", "--batch-size", "16",
                "--no-progress", "--device", "cpu", "--bleu", "off", "--keep-weights", "0"]
    assert run(train.cli, [*run_args, "--data", str(first), "--max-steps", "2"], capsys)[0] == 0
    code, err = run(train.cli, [*run_args, "--data", str(other), "--max-steps", "4"], capsys)
    assert_one_line_error(code, err, str(other), "--data", "--restart", status=1)
    assert run(train.cli, [*run_args, "--data", str(first), "--max-steps", "4"], capsys)[0] == 0  # its own data resumes


def test_prepared_data_without_a_validation_split_is_one_line(fixture_data: PreparedTranslation, tmp_path: Path, capsys) -> None:
    path = _edited(fixture_data, tmp_path / "data.pt", splits={"train": fixture_data.splits["train"]},
                   text={"train": fixture_data.text["train"]})
    code, err = run(train.cli, ["--task", "multi30k", "--data", str(path), "--out", str(tmp_path / "run"), "--profile",
                                "fast", "--max-steps", "1", "--no-progress", "--device", "cpu"], capsys)
    assert_one_line_error(code, err, str(path), "'val'", status=1)


@pytest.mark.parametrize("side", [0, 1], ids=["sources", "references"])
def test_prepared_text_misaligned_with_its_ids_is_refused(fixture_data: PreparedTranslation, tmp_path: Path, side: int) -> None:
    """References shifted by one line against the sources (and their ids) passed every check."""
    pairs = fixture_data.text["val"]
    column = [pair[side] for pair in pairs]
    shifted = column[1:] + column[:1]
    text = [(new, t) if side == 0 else (s, new) for (s, t), new in zip(pairs, shifted)]
    path = _edited(fixture_data, tmp_path / "data.pt", text={**fixture_data.text, "val": text})
    with raises(ValueError, str(path), "'val'", "pair 1", ["source", "reference"][side]):
        PreparedTranslation.load(path)


def test_prepared_data_with_ids_but_no_text_for_a_split_is_refused(fixture_data: PreparedTranslation, tmp_path: Path) -> None:
    text = {name: pairs for name, pairs in fixture_data.text.items() if name != "test"}
    path = _edited(fixture_data, tmp_path / "data.pt", text=text)
    with raises(ValueError, str(path), "'test'"):
        PreparedTranslation.load(path)


# --- 13. Tracebacks that are now one line (issue 43) -----------------------------------------------

def _damaged_gz(path: Path, text: str = "1 2\n3 4\n" * 50) -> Path:
    import gzip

    data = bytearray(gzip.compress(text.encode()))
    data[12:20] = b"\xff" * 8  # inside the compressed blocks: zlib.error, not a bad header
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("option", ["--input", "--src"])
def test_a_damaged_gz_input_is_one_line(trained: Path, tmp_path: Path, capsys, option: str) -> None:
    path = _damaged_gz(tmp_path / "in.gz")
    extra = ["--ref", str(path)] if option == "--src" else []
    code, err = run(translate.main, ["--checkpoint", str(trained / "checkpoint.pt"), "--device", "cpu", option, str(path),
                                     *extra], capsys)
    assert_one_line_error(code, err, str(path), status=1)


def test_a_damaged_multi30k_gz_names_the_file(tmp_path: Path) -> None:
    from transformer_lib.multi30k import load_multi30k, sha256_file

    folder = tmp_path / "m30k"
    shutil.copytree(FIXTURE, folder)
    damaged = _damaged_gz(folder / "val.de.gz")
    sums = {**FIXTURE_SHA256, "val.de.gz": sha256_file(damaged)}  # the checksum of what is there: only gzip can tell
    with raises(ValueError, str(damaged)):
        load_multi30k("val", folder, checksums=sums)


def test_beam_times_batch_times_vocabulary_is_bounded_before_decoding() -> None:
    """--beam-size 100 --batch-size 4096 with the shipped model's 8,000 tokens: 13 GB of scores a step,
    an allocator's traceback; now refused before anything is allocated, naming the sizes and the limit."""
    from types import SimpleNamespace

    from transformer_lib.beam_search import MAX_BEAM_ELEMENTS, check_beam_work

    shipped_like = SimpleNamespace(config=SimpleNamespace(tgt_vocab_size=8000, d_model=256), decoder_layers=[None] * 3)
    with raises(ValueError, "4,096", "beam 100", "8,000", f"{MAX_BEAM_ELEMENTS:,}"):
        check_beam_work(shipped_like, 4096, 100, 12, 60)
    check_beam_work(shipped_like, 256, 4, 70, 120)  # the trainer's final BLEU: 256 sentences, beam 4, long ones


@pytest.mark.parametrize("n_best", [None, "2"])
def test_translate_refuses_a_beam_search_over_the_bound_in_one_line(trained: Path, capsys, monkeypatch, n_best) -> None:
    import transformer_lib.beam_search as beam_search_module

    monkeypatch.setattr(beam_search_module, "MAX_BEAM_ELEMENTS", 5000)
    argv = ["--checkpoint", str(trained / "checkpoint.pt"), "--device", "cpu", "--beam-size", "50", "--batch-size", "64",
            *(["--n-best", n_best] if n_best else []), "1 2", "3 4 5", "6"]
    code, err = run(translate.main, argv, capsys)
    assert_one_line_error(code, err, "3 sentences", "beam 50", "5,000", status=1)


def _rewritten_pretrained(tmp_path: Path, change) -> tuple[Path, str]:
    """The shipped file written again with ``change(tensors, metadata)`` applied, and its SHA-256: a file
    whose checksum is right but whose contents are not what this library writes."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(pretrained.shipped_path()), framework="pt") as file:
        tensors = {name: file.get_tensor(name) for name in file.keys()}
        metadata = dict(file.metadata())
    change(tensors, metadata)
    path = tmp_path / "given.safetensors"
    save_file(tensors, str(path), metadata=metadata)
    return path, pretrained.sha256_of(path)


def _wrong_shape(tensors: dict, metadata: dict) -> None:
    name = next(n for n, t in tensors.items() if t.dim() == 2)
    tensors[name] = tensors[name][:, :-1].contiguous()


@pytest.mark.parametrize("change, named", [
    (_wrong_shape, "shape"),
    (lambda tensors, metadata: metadata.pop("tied_parameters"), "tied_parameters"),
    (lambda tensors, metadata: metadata.pop("task"), "task"),
    (lambda tensors, metadata: metadata.update(model_config="{not json"), "model_config"),
    (lambda tensors, metadata: metadata.update(decoding="{}"), "decoding"),
])
def test_a_pretrained_file_with_a_right_checksum_but_wrong_contents_is_one_clear_error(tmp_path: Path, change,
                                                                                        named: str) -> None:
    """Issue 43: a wrong-shape weight or missing metadata gave torch's RuntimeError or a KeyError."""
    path, digest = _rewritten_pretrained(tmp_path, change)
    with pytest.raises(pretrained.PretrainedError, match=named) as error:
        pretrained.load(path, sha256=digest)
    assert str(path) in str(error.value)

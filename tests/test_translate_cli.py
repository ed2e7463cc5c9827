"""Tests of transformer_lib.translator: the command line translates, evaluates, and fails clearly.

Checkpoints are written here from small random models, in the format ``transformer_lib.trainer``
saves (every entry of ``CHECKPOINT_KEYS``; the translator reads them with its ``load_checkpoint``).
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from errors import raises

from transformer_lib import batching, multi30k
from transformer_lib.multi30k import MULTI30K_SHA256, load_multi30k, sha256_file
from transformer_lib.beam_search import beam_search
from transformer_lib.checkpoint import CHECKPOINT_FORMAT_VERSION, CHECKPOINT_KEYS, checkpoint_metadata
from transformer_lib.cli.translate import main
from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import greedy_decode
from transformer_lib.evaluation import corpus_bleu
from transformer_lib.model import Transformer
from transformer_lib.tokenizers import SymbolTokenizer, WordTokenizer, detokenize, word_splitter
from transformer_lib.translator import TranslationError, Translator, evaluate_bleu
from transformer_lib.vocab import Vocab

GERMAN = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde rennen durch den Schnee.",
    "Eine Frau singt auf einer Bühne.",
    "Kinder spielen im Park.",
]
ENGLISH = [
    "A man rides a bike.",
    "Two dogs run through the snow.",
    "A woman sings on a stage.",
    "Children play in the park.",
]
REPO = Path(__file__).resolve().parents[1]


def checkpoint_dict(task: str = "multi30k", max_len: int = 24, seed: int = 0) -> dict:
    if task == "multi30k":
        src = WordTokenizer(Vocab.build([word_splitter("de")(s) for s in GERMAN]), "de")
        tgt = WordTokenizer(Vocab.build([word_splitter("en")(s) for s in ENGLISH]), "en")
        data = {"src_lang": "de", "tgt_lang": "en", "lowercase": False, "source_format": "tokens+eos"}
    else:
        src = tgt = SymbolTokenizer(Vocab(["<pad>", "<unk>", "<bos>", "<eos>", *(str(i) for i in range(10))]))
        data = {"source_format": "tokens+eos"}
    config = TransformerConfig(
        src_vocab_size=len(src.vocab), tgt_vocab_size=len(tgt.vocab), d_model=32, n_heads=4,
        n_encoder_layers=1, n_decoder_layers=1, d_ff=64, max_len=max_len,
    )
    torch.manual_seed(seed)
    model = Transformer(config)
    return {
        "format_version": CHECKPOINT_FORMAT_VERSION,
        **checkpoint_metadata(config, src, tgt, task, data),
        "model_state": model.state_dict(),
        "optimizer_state": {},
        "scheduler_state": {},
        "train_config": {},
        "step": 0,
        "epoch": 0,
        "rng_state": {},
        "metrics": {},
    }


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoint.pt"
    torch.save(checkpoint_dict(), path)
    return path


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --------------------------------------------------------------------------------------------------
# Translating


def test_translate_prints_the_greedy_translation(checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    status, out, err = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", GERMAN[0], GERMAN[1])
    # Standard error says how many threads (1 for this tiny model); standard output holds only translations.
    assert status == 0 and err.splitlines() == ["info: 1 CPU thread (--threads), device cpu"], err
    # The same thing done by hand: tokenize, add <eos>, greedy decode, detokenize.
    translator = Translator.from_checkpoint(checkpoint)
    src_vocab, tgt_vocab = translator.src_vocab, translator.tgt_vocab
    expected = []
    for sentence in GERMAN[:2]:
        ids = src_vocab.encode(word_splitter("de")(sentence), add_eos=True)
        src = torch.tensor([ids])
        output = greedy_decode(translator.model, src, None, max_new_tokens=min(24, len(ids) + 50),
                               bos_id=2, eos_id=3, pad_id=0)
        expected.append(detokenize(tgt_vocab.decode(output[0].tolist()), "en"))
    assert out.splitlines() == expected


def test_the_thread_count_defaults_to_omp_num_threads(checkpoint: Path, capsys, monkeypatch) -> None:
    """``OMP_NUM_THREADS=N transformer-translate ...`` translates on N threads, as torch itself would (issue 46)."""
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        status, _, err = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", GERMAN[0])
        assert status == 0 and "info: 2 CPU threads (--threads)" in err and torch.get_num_threads() == 2, err
        status, _, err = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--threads", "1", GERMAN[0])
        assert status == 0 and "info: 1 CPU thread (--threads)" in err and torch.get_num_threads() == 1, err
        monkeypatch.delenv("OMP_NUM_THREADS")
        status, _, err = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", GERMAN[0])
        assert status == 0 and "info: 1 CPU thread (--threads)" in err, "a d_model 32 model's own default: 1"
    finally:
        torch.set_num_threads(before)


def test_translate_with_beam(checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    status, out, _ = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--beam-size", "3", GERMAN[2])
    assert status == 0
    translator = Translator.from_checkpoint(checkpoint)
    src, src_mask = translator.encode([GERMAN[2]])
    result = beam_search(translator.model, src, src_mask, beam_size=3, max_new_tokens=24, bos_id=2, eos_id=3, pad_id=0)
    assert out.strip() == detokenize(translator.tgt_vocab.decode(result.sequences[0].tolist()), "en")


def test_the_length_penalty_reaches_beam_search(checkpoint: Path, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    import transformer_lib.translator as translate_module

    seen: list[float] = []

    def recording_beam_search(*args, **kwargs):
        seen.append(kwargs["length_penalty"])
        return beam_search(*args, **kwargs)

    monkeypatch.setattr(translate_module, "beam_search", recording_beam_search)
    assert run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--beam-size", "3", GERMAN[0])[0] == 0
    assert run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--beam-size", "3",
                   "--length-penalty", "1.5", GERMAN[0])[0] == 0
    translator = Translator.from_checkpoint(checkpoint)
    evaluate_bleu(translator, list(zip(GERMAN, ENGLISH)), beam_sizes=(1, 3), batch_size=len(GERMAN), length_penalty=0.0)
    assert seen == [0.6, 1.5, 0.0]  # the default is the paper's 0.6; greedy (beam 1) does not call beam search


def test_batched_translation_keeps_the_input_order(checkpoint: Path) -> None:
    translator = Translator.from_checkpoint(checkpoint)
    together = translator.translate(GERMAN, batch_size=3)  # sorted by length inside, two batches
    alone = [translator.translate([sentence])[0] for sentence in GERMAN]
    assert together == alone


def test_translate_is_the_detokenized_translate_tokens(checkpoint: Path) -> None:
    translator = Translator.from_checkpoint(checkpoint)
    tokens = translator.translate_tokens(GERMAN, beam_size=2, batch_size=3)
    assert translator.translate(GERMAN, beam_size=2, batch_size=3) == [detokenize(t, "en") for t in tokens]
    assert not {"<eos>", "<bos>", "<pad>"} & {token for sentence in tokens for token in sentence}
    results = evaluate_bleu(translator, list(zip(GERMAN, ENGLISH)), beam_sizes=(2,), batch_size=3)
    assert results["beam 2"]["tokens"] == tokens


def test_bleu_of_prepared_ids_equals_bleu_of_the_text(checkpoint: Path) -> None:
    """The trainer scores prepared token ids (no word_splitter); the command line scores text: same numbers."""
    translator = Translator.from_checkpoint(checkpoint)
    ids = [translator.src_tokenizer.encode(sentence) for sentence in GERMAN]
    from_text = evaluate_bleu(translator, list(zip(GERMAN, ENGLISH)), beam_sizes=(1, 2), batch_size=3)
    from_ids = evaluate_bleu(translator, list(zip(ids, ENGLISH)), beam_sizes=(1, 2), batch_size=3)
    for name in ("greedy", "beam 2"):
        assert from_ids[name]["translations"] == from_text[name]["translations"]
        assert from_ids[name]["bleu"] == from_text[name]["bleu"]


def test_the_default_source_format_is_the_layout_collate_trains_on(checkpoint: Path) -> None:
    """translate.SOURCE_FORMATS[batching.SOURCE_FORMAT] adds the specials batching.collate adds to a source."""
    translator = Translator.from_checkpoint(checkpoint)
    vocab = translator.src_vocab
    batch = batching.collate([([7, 8, 9], [5])], pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
    assert translator.data["source_format"] == batching.SOURCE_FORMAT
    assert translator.with_specials([7, 8, 9]) == batch.src[0].tolist()


def test_toy_task_checkpoint_reads_and_writes_symbols(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "reverse.pt"
    torch.save(checkpoint_dict(task="reverse", seed=7), path)  # a seed whose random model writes symbols
    status, out, _ = run_cli(capsys, "--checkpoint", str(path), "--device", "cpu", "3 1 4 1 5")
    assert status == 0
    translator = Translator.from_checkpoint(path)
    src = torch.tensor([[4 + 3, 4 + 1, 4 + 4, 4 + 1, 4 + 5, 3]])  # symbol "k" has id 4 + k; then <eos>
    output = greedy_decode(translator.model, src, None, max_new_tokens=24, bos_id=2, eos_id=3, pad_id=0)
    assert out.strip() == " ".join(translator.tgt_vocab.decode(output[0].tolist()))
    assert out.split() and all(symbol in set("0123456789") for symbol in out.split())


def test_the_module_runs_as_a_program(tmp_path: Path) -> None:
    """``python -m transformer_lib.cli.translate`` reaches main() and reports errors without a traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "transformer_lib.cli.translate", "--checkpoint", str(tmp_path / "missing.pt"), "Hallo."],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120,
    )
    assert result.returncode == 1, "a failed run, not a bad command line"
    assert result.stderr.startswith("error: no checkpoint at") and "missing.pt" in result.stderr
    assert "Traceback" not in result.stderr


def test_checkpoints_written_here_have_every_entry_training_writes() -> None:
    assert set(checkpoint_dict()) == set(CHECKPOINT_KEYS)


# --------------------------------------------------------------------------------------------------
# Evaluating


def write_fake_multi30k(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four sentence pairs as the val and test splits, which the CLI's loader
    (``multi30k.load_multi30k``) accepts: it is given these files' checksums instead of the published ones."""
    folder.mkdir()
    for split in ("val", "test_2016_flickr"):
        for lang, lines in (("de", GERMAN), ("en", ENGLISH)):
            with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    checksums = {path.name: sha256_file(path) for path in folder.iterdir()}
    monkeypatch.setattr("transformer_lib.translator.load_multi30k", functools.partial(load_multi30k, checksums=checksums))


def test_eval_prints_bleu_for_greedy_and_beam(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    data_dir = tmp_path / "multi30k"
    write_fake_multi30k(data_dir, monkeypatch)
    status, out, _ = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--eval", "test",
                             "--data-dir", str(data_dir), "--beam-size", "2")
    assert status == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("Multi30k test: 4 sentences, de->en")
    assert any(line.strip().startswith("greedy: BLEU") for line in lines)
    assert any(line.strip().startswith("beam 2: BLEU") for line in lines)
    assert "BLEU signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in out
    assert "for comparison with older Multi30k papers" in out
    # the greedy number is sacrebleu's BLEU of the greedy translations against the raw references
    translator = Translator.from_checkpoint(checkpoint)
    expected = corpus_bleu(translator.translate(GERMAN), ENGLISH).score
    greedy_line = next(line for line in lines if line.strip().startswith("greedy"))
    assert f"BLEU {expected:5.2f}" in greedy_line


def test_eval_reads_multi30k_dir_from_the_environment(checkpoint: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    data_dir = tmp_path / "multi30k"
    write_fake_multi30k(data_dir, monkeypatch)
    monkeypatch.setenv("MULTI30K_DIR", str(data_dir))
    status, out, _ = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--eval", "val",
                             "--beam-size", "1", "--limit", "2")
    assert status == 0
    assert out.startswith("Multi30k val: 2 sentences")
    assert "beam" not in out.split("BLEU signature")[0].split("\n", 1)[1]


@pytest.mark.multi30k
def test_eval_on_the_real_test_set(checkpoint: Path, real_multi30k: Path, capsys) -> None:
    status, out, _ = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--eval", "test",
                             "--data-dir", str(real_multi30k), "--beam-size", "1", "--limit", "3")
    assert status == 0 and out.startswith("Multi30k test: 3 sentences, de->en")
    german, english = zip(*load_multi30k("test", real_multi30k)[:3])
    assert german[0].startswith("Ein Mann mit einem orangefarbenen Hut")  # the first test sentence
    expected = corpus_bleu(Translator.from_checkpoint(checkpoint).translate(list(german)), list(english)).score
    assert f"BLEU {expected:5.2f}" in out


# --------------------------------------------------------------------------------------------------
# Clear errors: exit status 1 (a failed run) or 2 (a bad command line), a message that names the problem, no traceback


def error_of(capsys: pytest.CaptureFixture, *argv: str, status: int = 1) -> str:
    """The one error line of a command that fails: exit status 1 for a failed run (a missing or bad
    file, input the model cannot take), 2 for a bad command line (issue 46: scripts tell them apart)."""
    code, out, err = run_cli(capsys, *argv)
    assert code == status and out == "", (code, err)
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_missing_checkpoint(tmp_path: Path, capsys) -> None:
    assert "nope.pt" in error_of(capsys, "--checkpoint", str(tmp_path / "nope.pt"), "Hallo.")


def test_a_folder_is_not_a_checkpoint(tmp_path: Path, capsys) -> None:
    assert str(tmp_path) in error_of(capsys, "--checkpoint", str(tmp_path), "Hallo.")


@pytest.mark.parametrize(
    "content, named",
    [
        (b"this is not a checkpoint", ["bad.pt"]),
        ("state_dict", ["bad.pt", "'format_version'"]),
        ("version 3", ["bad.pt", "format_version 3"]),
        ("missing tokenizers", ["bad.pt", "'tokenizers'"]),
        ("wrong weights", ["bad.pt"]),
        ("vocab size", ["bad.pt", "tgt", 4]),
        ("unknown kind", ["bad.pt", "'sentencepiece'"]),
        ("unknown config field", ["bad.pt", "n_experts"]),
    ],
)
def test_incompatible_checkpoints(tmp_path: Path, capsys, content, named: list) -> None:
    path = tmp_path / "bad.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        checkpoint = checkpoint_dict()
        if content == "state_dict":
            checkpoint = checkpoint["model_state"]
        elif content == "version 3":
            checkpoint["format_version"] = 3
        elif content == "missing tokenizers":
            del checkpoint["tokenizers"]
        elif content == "wrong weights":
            checkpoint["model_state"] = checkpoint_dict(task="reverse")["model_state"]
        elif content == "vocab size":
            checkpoint["tokenizers"]["tgt"] = {"kind": "words", "tokens": ["<pad>", "<unk>", "<bos>", "<eos>"], "lang": "en"}
        elif content == "unknown kind":
            checkpoint["tokenizers"]["src"]["kind"] = "sentencepiece"
        elif content == "unknown config field":
            checkpoint["model_config"]["n_experts"] = 8
        torch.save(checkpoint, path)
    err = error_of(capsys, "--checkpoint", str(path), "Hallo.")
    assert all(str(value) in err for value in named), (named, err)


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_a_blank_line_in_is_a_blank_line_out(checkpoint: Path, tmp_path: Path, capsys, monkeypatch, blank: str) -> None:
    """Line N of the output translates line N of the input: a blank line stays blank, the others are
    translated as they are alone (issue 46), from arguments, standard input, a file, or the library."""
    sentences = [blank, GERMAN[0], blank, blank, GERMAN[1], blank]
    translator = Translator.from_checkpoint(checkpoint)
    alone = translator.translate(GERMAN[:2])
    expected = ["", alone[0], "", "", alone[1], ""]
    assert translator.translate(sentences) == expected
    assert translator.translate(sentences, beam_size=2) == ["", *translator.translate([GERMAN[0]], beam_size=2), "", "",
                                                            *translator.translate([GERMAN[1]], beam_size=2), ""]
    assert translator.translate([blank, blank]) == ["", ""]
    status, out, err = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", *sentences)
    assert status == 0 and out.split("\n") == [*expected, ""], (out, err)
    source = tmp_path / "in.de"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    status, out, _ = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--input", str(source))
    assert status == 0 and out.split("\n") == [*expected, ""]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(sentences) + "\n"))
    status, out, _ = run_cli(capsys, "--checkpoint", str(checkpoint), "--device", "cpu")
    assert status == 0 and out.split("\n") == [*expected, ""]


def test_a_sentence_that_tokenizes_to_nothing_is_still_an_error(checkpoint: Path, capsys, monkeypatch) -> None:
    """Only a blank line is passed through; text the tokenizer drops entirely is named by its number."""
    translator = Translator.from_checkpoint(checkpoint)
    monkeypatch.setattr(translator.src_tokenizer, "tokenize", lambda text: [])
    with raises(TranslationError, "sentence 2", "empty"):
        translator.translate(["", "Hallo."])


def test_no_input(checkpoint: Path, capsys) -> None:
    assert "--eval" in error_of(capsys, "--checkpoint", str(checkpoint), status=2)


def test_input_longer_than_the_model_allows(checkpoint: Path, capsys) -> None:
    long_sentence = " ".join(["Hund"] * 30)  # 30 tokens + <eos> against config.max_len = 24
    err = error_of(capsys, "--checkpoint", str(checkpoint), long_sentence)
    assert "31 tokens" in err and "config.max_len=24" in err


def test_eval_needs_a_multi30k_checkpoint_and_data(tmp_path: Path, checkpoint: Path, capsys, monkeypatch) -> None:
    toy = tmp_path / "copy.pt"
    torch.save(checkpoint_dict(task="copy"), toy)
    assert "'copy'" in error_of(capsys, "--checkpoint", str(toy), "--eval", "test")
    # No folder given, none in MULTI30K_DIR, nothing in the cache and no network: say where to put the files.
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def no_network(url: str, destination: Path, timeout: float = 60.0) -> None:
        raise OSError("no network")

    monkeypatch.setattr(multi30k, "_download", no_network)
    err = error_of(capsys, "--checkpoint", str(checkpoint), "--eval", "test")
    assert "MULTI30K_DIR" in err and "no network" in err
    err = error_of(capsys, "--checkpoint", str(checkpoint), "--eval", "test", "--data-dir", str(tmp_path))
    assert str(tmp_path) in err


def test_eval_refuses_files_that_are_not_the_published_multi30k(tmp_path: Path, checkpoint: Path, capsys) -> None:
    for name in MULTI30K_SHA256:
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as f:
            f.write("Ein Mann.\n")
    err = error_of(capsys, "--checkpoint", str(checkpoint), "--eval", "test", "--data-dir", str(tmp_path))
    assert "SHA-256" in err and str(tmp_path) in err


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--beam-size", "0", "Hallo."], ["--beam-size", "0", ">= 1"]),
        (["--batch-size", "0", "Hallo."], ["--batch-size", "0", ">= 1"]),
        (["--limit", "0", "--eval", "test"], ["--limit", "0"]),
        (["--eval", "test", "Hallo."], ["--eval"]),
        (["--length-penalty", "-1", "Hallo."], ["--length-penalty", "-1.0", "[0, 10]"]),
        (["--device", "tpu9", "Hallo."], ["tpu9"]),
    ],
)
def test_bad_options(checkpoint: Path, capsys, argv: list[str], named: list[str]) -> None:
    err = error_of(capsys, "--checkpoint", str(checkpoint), *argv, status=2)
    assert all(value in err for value in named), (named, err)


def test_translator_raises_translation_error(checkpoint: Path) -> None:
    translator = Translator.from_checkpoint(checkpoint)
    with raises(TranslationError, "sentence 1"):
        translator.encode([""])  # translate() passes a blank line through as a blank translation
    with pytest.raises(TypeError):
        translator.translate("Ein Mann.")


def test_exit_statuses_tell_a_bad_command_line_from_a_failed_run_and_a_signal(checkpoint: Path, tmp_path: Path) -> None:
    """2: usage (argparse's errors and an abbreviated option too); 1: a failed run; 143: SIGTERM; 130: Ctrl-C
    (issue 46). The statuses are the ones --help's epilog states."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "transformer_lib.cli.translate", "--checkpoint", str(checkpoint), "--device", "cpu"]

    def status(*argv: str) -> int:
        return subprocess.run([*command, *argv], capture_output=True, text=True, env=env, timeout=120).returncode

    assert status("--beam-size", "0", "Hallo.") == 2 and status("--no-such-option", "Hallo.") == 2
    assert status("--beam", "2", "Hallo.") == 2, "no abbreviations: --beam is not --beam-size"
    assert status("--input", str(tmp_path / "missing.de")) == 1
    help_text = " ".join(subprocess.run([*command, "--help"], capture_output=True, text=True, env=env, timeout=120).stdout.split())
    assert "exit status: 0 success; 1 the run failed" in help_text and "130 interrupted (Ctrl-C); 143 terminated (SIGTERM)" in help_text
    for signum, expected in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        # Waiting on standard input (a pipe left open) when the signal comes.
        # SIGINT as a terminal delivers it: `make test` runs these tests in a background job, whose
        # commands start with SIGINT ignored (POSIX), and Python then keeps ignoring it.
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env, preexec_fn=_default_sigint)
        _wait_for_a_sigterm_handler(process)  # past the imports: the command line's own handler is in place
        _wait_until_it_reads_standard_input(process)  # not still loading (a loaded machine takes seconds)
        process.send_signal(signum)
        try:  # standard input stays open until it exits: only the signal can end it
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError(f"{signal.Signals(signum).name} did not stop the command waiting on its input") from None
        _, err = process.communicate()
        assert process.returncode == expected and "Traceback" not in err and len(err.splitlines()) == 1, (
            f"{signal.Signals(signum).name}: exit status {process.returncode}, stderr {err!r}")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_until_it_reads_standard_input(process: subprocess.Popen) -> None:
    """Until ``process`` is blocked in read(2) on file descriptor 0 (Linux on x86-64 tells:
    /proc/PID/syscall starts with the call's number, 0, and its first argument, the descriptor). Else
    (another system, or no permission) the handler's wait above has to do."""
    syscall = Path(f"/proc/{process.pid}/syscall")
    if platform.machine() != "x86_64" or not os.access(syscall, os.R_OK):
        return
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if syscall.read_text().split()[:2] == ["0", "0x0"]:
                return
        except (OSError, IndexError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"the command never waited on its standard input (exit status {process.poll()})")


def _wait_for_a_sigterm_handler(process: subprocess.Popen) -> None:
    """Until ``process`` catches SIGTERM (Linux tells: /proc/PID/status, SigCgt), then a moment more."""
    status = Path(f"/proc/{process.pid}/status")
    if not status.exists():
        time.sleep(10)
        return
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        caught = next(line for line in status.read_text().splitlines() if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1:
            time.sleep(0.5)
            return
        time.sleep(0.05)
    process.kill()
    raise AssertionError("the command never set its SIGTERM handler")

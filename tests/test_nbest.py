"""The translate command line as users of fairseq, OpenNMT or Marian use it
(``transformer_lib.cli.nbest`` and ``transformer_lib.cli.translate``): sentences from standard input
or ``--input`` (``.gz`` too), ``--output``, ``--n-best K`` with scores, and scores on any ``--src``/``--ref``
pair of files. A small random model stands in for a trained one; what is checked is that each way in
gives the same translations as the library's ``Translator``, and that the scores are sacreBLEU's."""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path

import pytest
import torch
from test_translate_cli import ENGLISH, GERMAN, checkpoint_dict

from transformer_lib.cli.nbest import n_best, read_lines
from transformer_lib.cli.translate import main
from transformer_lib.evaluation import corpus_bleu, corpus_chrf
from transformer_lib.translator import TranslationError, Translator


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoint.pt"
    torch.save(checkpoint_dict(), path)
    return path


def _main(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    try:
        status = main(list(argv))
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_standard_input_and_input_files_translate_as_arguments_do(checkpoint: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    expected = Translator.from_checkpoint(checkpoint).translate(GERMAN)
    plain, packed = tmp_path / "in.de", tmp_path / "in.de.gz"
    plain.write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(GERMAN) + "\n"))
    status, out, _ = _main(capsys, "--checkpoint", str(checkpoint))
    assert status == 0 and out.splitlines() == expected
    for source in (plain, packed):
        written = tmp_path / "out.en"
        status, out, _ = _main(capsys, "--checkpoint", str(checkpoint), "--input", str(source), "--output", str(written))
        assert status == 0 and out == "" and written.read_text(encoding="utf-8").splitlines() == expected


def test_n_best_lists_are_the_beams_hypotheses_best_first_in_moses_format(checkpoint: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    status, out, _ = _main(capsys, "--checkpoint", str(checkpoint), "--n-best", "3", *GERMAN[:2])
    assert status == 0
    rows = [line.split(" ||| ") for line in out.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 1, 1] and all(len(r) == 4 for r in rows)
    for sentence in (0, 1):
        scores = [float(r[3]) for r in rows if int(r[0]) == sentence]
        assert scores == sorted(scores, reverse=True), "best first"
    translator = Translator.from_checkpoint(checkpoint)
    # The best of a beam of 3 is what translate() gives with that beam.
    assert [r[1] for r in rows[::3]] == translator.translate(GERMAN[:2], beam_size=3)
    lists = n_best(translator, GERMAN[:2], 3, beam_size=3, length_penalty=0.6, batch_size=1)
    assert [round(score, 4) for _, _, score in lists[1]] == [float(r[3]) for r in rows[3:]], "batching changes nothing"


def test_a_blank_line_has_one_empty_entry_in_an_n_best_list(checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    """Sentence numbers stay the input's line numbers (issue 46): a blank line is one entry, the empty
    translation with log-probability and score 0; the other sentences' lists are as without it."""
    status, out, _ = _main(capsys, "--checkpoint", str(checkpoint), "--n-best", "2", "", GERMAN[0], "  ", GERMAN[1])
    assert status == 0, out
    rows = [line.split(" ||| ") for line in out.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 1, 1, 2, 3, 3]
    assert rows[0] == ["0", "", "log_prob=0.0000", "0.0000"] and rows[3] == ["2", "", "log_prob=0.0000", "0.0000"]
    status, alone, _ = _main(capsys, "--checkpoint", str(checkpoint), "--n-best", "2", *GERMAN[:2])
    assert [r[1:] for r in rows if r[0] in "13"] == [line.split(" ||| ")[1:] for line in alone.splitlines()]


def test_a_blank_source_line_is_scored_as_an_empty_hypothesis(checkpoint: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    """--src/--ref stay paired line by line: a blank source line's hypothesis is empty, scored against its reference."""
    src, ref = tmp_path / "test.de", tmp_path / "test.en"
    src.write_text("\n".join([GERMAN[0], "", GERMAN[2]]) + "\n", encoding="utf-8")
    ref.write_text("\n".join([ENGLISH[0], ENGLISH[1], ENGLISH[2]]) + "\n", encoding="utf-8")
    status, out, _ = _main(capsys, "--checkpoint", str(checkpoint), "--src", str(src), "--ref", str(ref), "--beam-size", "1")
    assert status == 0, out
    translator = Translator.from_checkpoint(checkpoint)
    hypotheses = [translator.translate([GERMAN[0]])[0], "", translator.translate([GERMAN[2]])[0]]
    bleu = corpus_bleu(hypotheses, ENGLISH[:3])
    assert f"BLEU {bleu.score:5.2f}" in out and "3 sentences" in out, out


def test_scores_on_a_pair_of_files_plain_or_gz_are_sacrebleus(checkpoint: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    src, ref = tmp_path / "test.de", tmp_path / "test.en.gz"
    src.write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
    ref.write_bytes(gzip.compress(("\n".join(ENGLISH) + "\n").encode()))
    status, out, _ = _main(capsys, "--checkpoint", str(checkpoint), "--src", str(src), "--ref", str(ref), "--beam-size", "1")
    assert status == 0, out
    hypotheses = Translator.from_checkpoint(checkpoint).translate(GERMAN)
    bleu, chrf = corpus_bleu(hypotheses, ENGLISH), corpus_chrf(hypotheses, ENGLISH)
    assert f"BLEU {bleu.score:5.2f}   chrF {chrf.score:5.2f}" in out
    assert f"BLEU signature: {bleu.signature}" in out and f"chrF signature: {chrf.signature}" in out


@pytest.mark.parametrize(("argv", "named"), [
    (["--n-best", "5", "--beam-size", "2", "x"], "--n-best 5"),
    (["--n-best", "0", "x"], "0"),
    (["--beam-size", "101", "x"], "101"),
    (["--batch-size", "100000", "x"], "100000"),
    (["--threads", "0", "x"], "--threads"),
    (["--threads", "5000", "x"], "5000"),
    (["--length-penalty", "11", "x"], "11"),
    (["--limit", "0", "--src", "a", "--ref", "b"], "--limit"),
    (["--src", "a"], "--src"),
    (["--src", "a", "--ref", "b", "x"], "--src"),
    (["--eval", "test", "--src", "a", "--ref", "b"], "--eval"),
    (["--input", "in.txt", "x"], "--input"),
    (["--limit", "5", "x"], "--limit 5"),
])
def test_options_out_of_bounds_or_in_conflict_are_refused_before_the_model_loads(
        argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = tmp_path / "never-read.pt"  # a checkpoint that does not exist: the option is refused first
    status, out, err = _main(capsys, "--checkpoint", str(missing), *argv)
    assert status == 2 and err.startswith("error: ") and named in err and str(missing) not in err, err


def test_a_file_pair_of_different_lengths_names_both_files(checkpoint: Path, tmp_path: Path, capsys) -> None:
    src, ref = tmp_path / "a.de", tmp_path / "b.en"
    src.write_text("Ein Mann.\nZwei Hunde.\n", encoding="utf-8")
    ref.write_text("A man.\n", encoding="utf-8")
    status, _, err = _main(capsys, "--checkpoint", str(checkpoint), "--src", str(src), "--ref", str(ref))
    assert status == 1 and str(src) in err and str(ref) in err and "2" in err and "1" in err, err  # a failed run


def test_unreadable_input_is_a_translation_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "latin1.txt").write_bytes("Bühne\n".encode("latin-1"))
    for path in (tmp_path / "missing.txt", tmp_path / "latin1.txt", tmp_path):
        with pytest.raises(TranslationError, match=str(path).replace(".", r"\.")):
            read_lines(str(path))


def test_the_version_is_the_package_s(capsys: pytest.CaptureFixture) -> None:
    """``--version`` of both commands prints the package's one version (in this process: that the
    commands run as programs, ``python -m`` and the console scripts, is tested in test_train_cli,
    test_translate_cli and test_install)."""
    import transformer_lib
    from transformer_lib.cli import train

    for name, cli in (("transformer-translate", main), ("transformer-train", train.cli)):  # the console scripts' functions
        with pytest.raises(SystemExit) as exit_:
            cli(["--version"])
        out = capsys.readouterr().out
        assert exit_.value.code == 0 and f"{name} {transformer_lib.__version__}" in out, out

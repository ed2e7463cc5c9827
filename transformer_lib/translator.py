"""Translate text with a trained model, and measure its BLEU (chapter 6).

From Python (the chapters do this)::

    translator = Translator.from_checkpoint("runs/multi30k/checkpoint.pt")
    translator.translate(["Ein Mann fährt Fahrrad."], beam_size=4)

:class:`Translator` joins the pieces: the model, its two tokenizers (any kind of
:data:`transformer_lib.tokenizers.TOKENIZERS`), decoding and evaluation. It is a boundary of the
library, so it checks what it is given: a missing or incompatible checkpoint, a sentence that
tokenizes to nothing, a sentence longer than the model allows, symbols a toy-task model does not know or a device this
machine lacks raise :class:`TranslationError`; a sentence of only unknown words warns. A blank
sentence (empty, or only white space) translates to an empty string, so a file's lines stay aligned
with their translations, as every MT tool keeps them. The command line is
:mod:`transformer_lib.cli.translate`.

Shapes: ``B`` sentences, ``S`` source tokens, ``T_out`` output tokens.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .batching import SOURCE_FORMAT, pad_sequences
from .beam_search import beam_search
from .checkpoint import load_checkpoint
from .config import TransformerConfig
from .decoding import greedy_decode
from .device import parse_device
from .distributed import get_rank, get_world_size
from .evaluation import bleu_scores
from .masking import padding_mask
from .model import Transformer
from .multi30k import load_multi30k
from .tokenizers import tokenizer_from_dict
from .validation import check_int, check_number
from .vocab import Tokenizer, TokenizerPair

__all__ = [
    "SOURCE_FORMATS",
    "EXTRA_OUTPUT_TOKENS",
    "LENGTH_PENALTY",
    "DECODING_DEFAULTS",
    "TranslationError",
    "TranslationWarning",
    "Translator",
    "is_blank",
    "read_multi30k_split",
    "evaluate_bleu",
]

# How a source sentence becomes the encoder's input, by the checkpoint's data["source_format"]:
# (add <bos>, add <eos>). Training writes batching.SOURCE_FORMAT (the layout batching.collate makes; a
# test checks the two agree), which is also the format of checkpoints that do not say.
SOURCE_FORMATS: dict[str, tuple[bool, bool]] = {
    "tokens+eos": (False, True),
    "bos+tokens+eos": (True, True),
    "tokens": (False, False),
}
# The decoder may write this many tokens more than the source has (t2t's decode_length default).
EXTRA_OUTPUT_TOKENS = 50
# Beam search's GNMT length penalty alpha (Wu et al. 2016; the Transformer paper's 0.6).
LENGTH_PENALTY = 0.6
# A model's decoding when it records none (Translator.decoding): greedy, and the paper's alpha for a beam.
DECODING_DEFAULTS: dict[str, Any] = {"beam_size": 1, "length_penalty": LENGTH_PENALTY}


class TranslationError(ValueError):
    """Input the translator cannot use: the message says what is wrong and what the limit is."""


class TranslationWarning(UserWarning):
    """A translation that is probably worthless: every source word unknown, or an output that is empty
    or only ``<unk>``. The message names the sentence; a command line can turn it into an exit status
    (``warnings.catch_warnings(record=True)``, then look for this class)."""


@dataclass
class Translator(TokenizerPair):
    """A trained model with everything needed to turn text into text.

    Attributes:
        model: the :class:`~transformer_lib.model.Transformer`, in eval mode.
        src_tokenizer, tgt_tokenizer: the tokenizers it was trained with (words, BPE pieces, or the
            toy tasks' symbols).
        task: what it was trained on: ``"multi30k"``, ``"copy"`` or ``"reverse"``.
        data: how text became ids in training (``src_lang``, ``tgt_lang``, ``source_format``, ...).
        decoding: the decoding chosen for this model (``beam_size``, ``length_penalty``), as a Hugging
            Face generation config carries it: :meth:`translate` uses it unless told otherwise
            (``beam_size=1`` asks for greedy decoding). The shipped model's file records the one chosen
            on validation (:func:`transformer_lib.pretrained.load`); empty: greedy.
    """

    model: Transformer
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    task: str
    data: dict[str, Any] = field(default_factory=dict)
    decoding: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """The tokenizers fit the model: their sizes are its vocabularies', their ``<pad>`` its ``pad_id``
        (else a real token would be masked as padding, or padding read as a token)."""
        config = self.model.config
        for side, tokenizer in (("src", self.src_tokenizer), ("tgt", self.tgt_tokenizer)):
            size = getattr(config, f"{side}_vocab_size")
            if len(tokenizer.vocab) != size or tokenizer.vocab.pad_id != config.pad_id:
                raise TranslationError(
                    f"the {side} tokenizer has {len(tokenizer.vocab)} tokens and <pad> id {tokenizer.vocab.pad_id}, "
                    f"but the model has {side}_vocab_size={size} and pad_id={config.pad_id}"
                )
        unknown = sorted(set(self.decoding) - set(DECODING_DEFAULTS))
        if unknown:
            raise TranslationError(f"decoding has {unknown}; it holds {sorted(DECODING_DEFAULTS)}")
        self.decoding_settings()  # its values checked once, here

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device = "cpu", task: str | None = None) -> Translator:
        """Rebuild the model from a checkpoint file; raises :class:`TranslationError` if it cannot.

        The file is read by :func:`transformer_lib.checkpoint.load_checkpoint` (``weights_only``, so
        no code runs while loading, and its checksum is verified); its errors become
        :class:`TranslationError` s. ``task``: refuse a checkpoint trained on another task.
        """
        try:
            device = parse_device(device)
            checkpoint = load_checkpoint(path, map_location=device)
        except (FileNotFoundError, ValueError) as error:  # CheckpointError is a ValueError
            raise TranslationError(str(error)) from None
        try:
            config = TransformerConfig.from_dict(dict(checkpoint["model_config"]))
            src, tgt = (tokenizer_from_dict(checkpoint["tokenizers"][side]) for side in ("src", "tgt"))
        except (TypeError, ValueError, KeyError) as error:
            raise TranslationError(f"{path} is an incompatible checkpoint: {error}") from None
        _check_sizes(path, config, src, tgt)
        if task is not None and checkpoint["task"] != task:
            raise TranslationError(f"{path} was trained on the {checkpoint['task']!r} task, not {task!r}")
        data = dict(checkpoint.get("data") or {})
        if data.get("source_format", SOURCE_FORMAT) not in SOURCE_FORMATS:
            raise TranslationError(
                f"{path} is an incompatible checkpoint: data['source_format']={data['source_format']!r}, "
                f"this version knows {sorted(SOURCE_FORMATS)}"
            )
        model = Transformer(config)
        try:
            model.load_state_dict(checkpoint["model_state"])
        except RuntimeError as error:
            reason = " ".join(str(error).split())[:300]
            raise TranslationError(f"{path} is an incompatible checkpoint: the weights do not fit its model_config ({reason})") from None
        return cls(model.to(device).eval(), src, tgt, checkpoint["task"], data)

    def decoding_settings(self, beam_size: int | None = None, length_penalty: float | None = None) -> tuple[int, float]:
        """The beam size and length penalty a translation uses: those given, else this model's chosen
        :attr:`decoding`, else greedy (beam 1) and :data:`LENGTH_PENALTY`. The translate command line
        resolves its defaults here too, so the library and the command line decode alike."""
        chosen = {**DECODING_DEFAULTS, **self.decoding}
        beam_size = chosen["beam_size"] if beam_size is None else beam_size
        length_penalty = chosen["length_penalty"] if length_penalty is None else length_penalty
        try:
            check_int("beam_size", beam_size)
            check_number("length_penalty", length_penalty, 0)
        except ValueError as error:
            raise TranslationError(str(error)) from None
        return beam_size, float(length_penalty)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_source_tokens(self) -> int:
        """The longest input, in tokens with the specials the source format adds."""
        return self.model.config.max_len

    def source_ids(self, sentences: Sequence[str], blanks: bool = False) -> list[list[int]]:
        """Each sentence as encoder input ids (with the specials of the checkpoint's source format).

        ``blanks=True``: a blank sentence (empty or white space) is an empty row, ``[]``, which
        :meth:`decode_rows` decodes to no tokens (what :meth:`translate` does with blank lines).

        Raises:
            TranslationError: a sentence is blank (unless ``blanks``) or tokenizes to nothing, is
                not text, has symbols a toy task does not know, or is longer than the model's
                ``config.max_len``.
        """
        sentences = _as_sentences(sentences)
        if len(sentences) == 0:
            raise TranslationError("there is nothing to translate: no input sentence was given")
        return [[] if blanks and is_blank(sentence) else self._source_row(sentence, i)
                for i, sentence in enumerate(sentences, start=1)]

    def _source_row(self, sentence: object, i: int) -> list[int]:
        try:
            tokens = self.src_tokenizer.tokenize(_check_text(sentence, i))
        except TranslationError:
            raise
        except ValueError as error:  # the toy tasks' closed alphabet
            raise TranslationError(f"input sentence {i}: {error}") from None
        if not tokens:
            raise TranslationError(f"input sentence {i} is empty; give some text to translate")
        self._warn_if_unknown(tokens, i)
        ids = self.with_specials(self.src_vocab.encode(tokens))
        if len(ids) > self.max_source_tokens:
            raise TranslationError(
                f"input sentence {i} is {len(ids)} tokens long (with its special tokens), more than this "
                f"model allows: config.max_len={self.max_source_tokens}; split it into shorter sentences"
            )
        return ids

    def with_specials(self, ids: Sequence[int]) -> list[int]:
        """Source token ids (as prepared data hold them) with the specials of the checkpoint's source format."""
        return self.src_vocab.with_specials(ids, *SOURCE_FORMATS[self.data.get("source_format", SOURCE_FORMAT)])

    def _warn_if_unknown(self, tokens: Sequence[str], i: int) -> None:
        """Warn when every word of a sentence is unknown: its translation is a guess."""
        unknown = [token for token in tokens if token not in self.src_vocab]
        if len(unknown) == len(tokens):
            warnings.warn(
                f"input sentence {i}: every word is unknown to the model's {len(self.src_vocab)}-token source "
                f"vocabulary (e.g. {unknown[0]!r}), so its translation is a guess; is it in the source language "
                f"({self.data.get('src_lang', '?')})?",
                TranslationWarning, stacklevel=5,
            )

    def encode(self, sentences: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Sentences to a padded source batch ``(B, S)`` and its padding mask ``(B, 1, 1, S)``."""
        return self._pad(self.source_ids(sentences))

    def _pad(self, rows: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
        src = pad_sequences(rows, self.src_vocab.pad_id).to(self.device)  # (B, S)
        return src, padding_mask(src, self.src_vocab.pad_id)  # (B, S), (B, 1, 1, S)

    def output_tokens(self, ids: Sequence[int]) -> list[str]:
        """Decoder output ids to target tokens (stops at ``<eos>``, drops padding)."""
        return self.tgt_vocab.decode(ids)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Output tokens to text, by the target tokenizer (BLEU needs plain text)."""
        return self.tgt_tokenizer.detokenize(tokens)

    def translate_ids(self, src: Tensor, src_mask: Tensor, beam_size: int = 1, length_penalty: float = LENGTH_PENALTY) -> Tensor:
        """Decode one encoded batch: greedy for ``beam_size=1``, else beam search with this length
        penalty. ``(B, T_out)``."""
        max_new_tokens = min(self.model.config.max_len, src.size(1) + EXTRA_OUTPUT_TOKENS)
        # min_new_tokens=1: an empty output never translates a sentence; without it a wide beam (50+)
        # keeps the empty hypothesis finished at step 1, which then outscores every longer one.
        vocab = self.tgt_vocab
        ids: dict[str, Any] = dict(max_new_tokens=max_new_tokens, bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                                   pad_id=vocab.pad_id, min_new_tokens=1)
        if beam_size == 1:
            return greedy_decode(self.model, src, src_mask, **ids)
        return beam_search(self.model, src, src_mask, beam_size=beam_size, length_penalty=length_penalty, **ids).sequences

    def translate_tokens(self, sentences: Iterable[str], beam_size: int | None = None, batch_size: int = 64,
                         length_penalty: float | None = None) -> list[list[str]]:
        """Translate sentences (in batches of similar length); the output tokens of each, in order.

        ``beam_size`` and ``length_penalty`` default to this model's chosen :attr:`decoding`
        (:meth:`decoding_settings`). Each list stops before ``<eos>``; :meth:`translate` turns them into text.
        """
        sentences = _as_sentences(sentences)
        beam_size, length_penalty = self.decoding_settings(beam_size, length_penalty)
        try:
            check_int("batch_size", batch_size)
        except ValueError as error:
            raise TranslationError(str(error)) from None
        rows = self.source_ids(sentences, blanks=True)  # checks every sentence first
        outputs = self.decode_rows(rows, beam_size, batch_size, length_penalty)
        for i, (sentence, row, tokens) in enumerate(zip(sentences, rows, outputs), start=1):
            if row:  # a blank sentence's empty translation is what was asked for
                self._warn_if_worthless(sentence, tokens, i)
        return outputs

    def _warn_if_worthless(self, sentence: str, tokens: Sequence[str], i: int) -> None:
        """Warn (:class:`TranslationWarning`) when a translation is empty or only ``<unk>``."""
        unk = self.tgt_vocab.unk_token
        if all(token == unk for token in tokens):
            what = "empty" if not tokens else f"only {unk}"
            warnings.warn(f"input sentence {i} ({sentence[:80]!r}): its translation is {what}", TranslationWarning,
                          stacklevel=4)

    def decode_rows(self, rows: Sequence[Sequence[int]], beam_size: int = 1, batch_size: int = 64,
                    length_penalty: float = LENGTH_PENALTY) -> list[list[str]]:
        """Decode encoder inputs (ids with their specials) in batches of similar length; output tokens, in
        order. An empty row (a blank sentence, :meth:`source_ids` with ``blanks=True``) gives no tokens."""
        # Sorting by length puts similar lengths in a batch: less padding, fewer wasted steps.
        order = sorted((i for i in range(len(rows)) if len(rows[i]) > 0), key=lambda i: len(rows[i]))
        out: list[list[str]] = [[] for _ in rows]
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src, src_mask = self._pad([rows[i] for i in chunk])
            output = self.translate_ids(src, src_mask, beam_size, length_penalty).tolist()
            for i, row in zip(chunk, output):
                out[i] = self.output_tokens(row)
        return out

    def translate(self, sentences: Iterable[str], beam_size: int | None = None, batch_size: int = 64,
                  length_penalty: float | None = None) -> list[str]:
        """Translate sentences (any iterable of them, in batches of similar length) and return detokenized
        text, in order. A blank sentence (empty or white space) gives an empty string, so the outputs
        stay aligned with the inputs; another sentence whose translation is empty or only ``<unk>``
        warns (:class:`TranslationWarning`).

        Decodes with this model's chosen :attr:`decoding` unless ``beam_size`` or ``length_penalty``
        say otherwise: ``beam_size=1`` is greedy decoding, more is beam search."""
        return [self.detokenize(t) for t in self.translate_tokens(sentences, beam_size, batch_size, length_penalty)]


def _check_sizes(path: str | Path, config: TransformerConfig, src: Tokenizer, tgt: Tokenizer) -> None:
    for side, tokenizer, size in (("src", src, config.src_vocab_size), ("tgt", tgt, config.tgt_vocab_size)):
        if len(tokenizer.vocab) != size:
            raise TranslationError(
                f"{path} is an incompatible checkpoint: its {side} tokenizer has {len(tokenizer.vocab)} tokens but "
                f"model_config.{side}_vocab_size is {size}"
            )


def is_blank(sentence: object) -> bool:
    """A blank input line: an empty string or only white space (translated to an empty line)."""
    return isinstance(sentence, str) and not sentence.strip()


def _as_sentences(sentences: object) -> list[str]:
    """Any iterable of sentences (a list, a generator, a file's lines) as a list; a bare string is refused."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(f"expected sentences, got one {type(sentences).__name__}; wrap a single sentence in a list")
    if not isinstance(sentences, Iterable):
        raise TypeError(f"expected an iterable of sentences (a list, a generator), got {type(sentences).__name__}")
    return list(sentences)


def _check_text(sentence: object, i: int) -> str:
    if not isinstance(sentence, str):
        raise TranslationError(f"input sentence {i} is a {type(sentence).__name__}, not text (str)")
    try:
        sentence.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes from the command line arrive as lone surrogates
        raise TranslationError(f"input sentence {i} is not valid UTF-8 text: {ascii(sentence)[:80]}") from None
    return sentence


def read_multi30k_split(split: str, data_dir: str | Path | None, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    """``(source, reference)`` pairs of a Multi30k split, by :func:`transformer_lib.multi30k.load_multi30k`.

    That function finds the files (``data_dir``, else the folder in ``MULTI30K_DIR``, else the
    download cache) and checks their SHA-256; here its errors become :class:`TranslationError` s,
    which the command line reports without a traceback.

    Args:
        split: ``"val"``, ``"test"`` (test_2016_flickr) or ``"train"``.
        data_dir: the folder with the ``.gz`` files, or ``None``.
    """
    try:
        return load_multi30k(split, data_dir, src_lang=src_lang, tgt_lang=tgt_lang)
    except (FileNotFoundError, ValueError) as error:  # missing files, bad checksums, unknown split
        raise TranslationError(str(error)) from None


@torch.no_grad()
def evaluate_bleu(
    translator: Translator,
    pairs: Sequence[tuple[str | Sequence[int], str]],
    beam_sizes: Sequence[int] = (1, 4),
    batch_size: int = 64,
    length_penalty: float = LENGTH_PENALTY,
) -> dict[str, dict[str, Any]]:
    """Translate the sources with each beam size and score against the raw references (sacrebleu).

    Args:
        pairs: ``(source, reference)``; the source is a sentence, or its token ids without specials
            (prepared data, as the trainer holds them: no tokenizer runs). A blank sentence gets an
            empty hypothesis, scored against its reference like any other line.
        beam_sizes: 1 is greedy decoding, more is beam search.
        length_penalty: beam search's GNMT length penalty alpha.

    With several processes (a process group), each decodes every ``world_size``-th sentence and all
    of them get every translation back, so each returns the same scores.

    Returns:
        For each decoding (keys ``"greedy"``, ``"beam N"``) a dict: ``bleu`` and ``bleu_lowercased``
        (sacreBLEU's ``BleuScore``), ``seconds`` (a float), ``translations`` (list[str]: detokenized,
        what BLEU scores) and ``tokens`` (list[list[str]]: the same as the model's tokens).
    """
    sources = [source for source, _ in pairs]
    references = [reference for _, reference in pairs]
    kinds = {isinstance(source, str) for source in sources}
    if len(kinds) > 1:
        raise TypeError("pairs mix sentences and token-id lists as sources: give one kind")
    if kinds == {True}:
        rows = translator.source_ids(sources, blanks=True)  # type: ignore[arg-type]  # a blank line: an empty hypothesis
    else:
        rows = [translator.with_specials(source) for source in sources]  # type: ignore[arg-type]
    results: dict[str, dict[str, Any]] = {}
    for beam_size in beam_sizes:
        start = time.perf_counter()
        tokens = _decode_shared(translator, rows, beam_size, batch_size, length_penalty)
        hypotheses = [translator.detokenize(t) for t in tokens]
        seconds = time.perf_counter() - start  # decoding time, without scoring
        scores = bleu_scores(hypotheses, references)
        name = "greedy" if beam_size == 1 else f"beam {beam_size}"
        results[name] = {
            "bleu": scores["cased"],
            "bleu_lowercased": scores["lowercased"],
            "seconds": seconds,
            "translations": hypotheses,
            "tokens": tokens,
        }
    return results


def _decode_shared(translator: Translator, rows: list[list[int]], beam_size: int, batch_size: int,
                   length_penalty: float = LENGTH_PENALTY) -> list[list[str]]:
    """:meth:`Translator.decode_rows`, the work shared among the processes of a process group, if any."""
    rank, world_size = get_rank(), get_world_size()
    if world_size == 1:
        return translator.decode_rows(rows, beam_size, batch_size, length_penalty)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))[rank::world_size]  # similar lengths per process
    mine = dict(zip(order, translator.decode_rows([rows[i] for i in order], beam_size, batch_size, length_penalty)))
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, mine)
    tokens = {i: row for part in gathered for i, row in part.items()}
    return [tokens[i] for i in range(len(rows))]

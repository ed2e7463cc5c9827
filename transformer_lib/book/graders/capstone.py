"""The capstone (section 6.8): an encoder-decoder Transformer assembled from the reader's own pieces,
trained on the reverse task, and graded as a whole.

The pieces are the answers to the book's write-it-yourself exercises: attention (with a mask), the
padding mask (the decoder's mask is it AND the causal mask), the sinusoidal table, the Pre-LN residual connection, the label-smoothed
loss and greedy decoding with the cache. :func:`choose_pieces` grades each answer with its own
grader and keeps it only if it passes (otherwise the library's piece stands in, and the table says
so); :func:`assemble` builds the library's :class:`~transformer_lib.model.Transformer` and puts the
reader's pieces in where theirs are used (through the seams the library has: the attention's
``attend``, the layers' residual modules, the positional table); :class:`PiecesLoss` trains with the
reader's masks and loss; :func:`grade_transformer` checks the trained model by the properties of
:mod:`transformer_lib.properties` (causality, padding invariance), cache = recompute, and held-out
exact match length by length, and answers with a :class:`~.report.GradeReport`.

Shapes: ``B`` sentences, ``S`` source length, ``T`` target length, ``D`` width, ``V`` vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import pandas as pd
import torch
from torch import Tensor, nn

from transformer_lib.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lib.batching import TranslationData, collate
from transformer_lib.blocks import Residual
from transformer_lib.config import TransformerConfig
from transformer_lib.decoding import greedy_decode
from transformer_lib.embeddings import sinusoidal_table
from transformer_lib.losses import label_smoothed_cross_entropy
from transformer_lib.masking import CausalMask, causal_mask, padding_mask
from transformer_lib.model import Transformer, init_parameters
from transformer_lib.properties import assert_causal, assert_padding_invariant

from .blocks import grade_pre_ln_residual
from .decoding import grade_greedy_decode
from .masking import grade_masked_attention, grade_padding_mask
from .positions import grade_sinusoidal_table
from .report import GradeReport, Grading, Problem, fmt, property_check
from .training import grade_label_smoothed_loss

__all__ = ["PIECES", "Pieces", "PiecesAttention", "PiecesResidual", "PiecesLoss", "choose_pieces", "assemble", "grade_transformer"]


def _library_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> Tensor:
    return scaled_dot_product_attention(query, key, value, mask)[0]


def _library_residual(d_model: int, dropout: float = 0.0) -> nn.Module:
    return Residual(d_model, dropout, norm_first=True)


def _library_greedy(model: Any, src: Tensor, src_mask: Tensor, max_new_tokens: int, bos_id: int,
                    eos_id: int, pad_id: int) -> Tensor:
    return greedy_decode(cast(Transformer, model), src, src_mask, max_new_tokens=max_new_tokens, bos_id=bos_id,
                         eos_id=eos_id, pad_id=pad_id)


@dataclass(frozen=True)
class Piece:
    """One piece of the model: the exercise that asks for it, its grader, and the library's version."""

    what: str
    exercise: str
    grader: Callable[..., GradeReport]
    library: Callable[..., Any]


# The pieces in the order the model uses them; the keys are choose_pieces' arguments.
PIECES: dict[str, Piece] = {
    "attention": Piece("attention, with a mask", "1.1 and 2.1", grade_masked_attention, _library_attention),
    "padding_mask": Piece("the padding mask", "2.1", grade_padding_mask, padding_mask),
    "positional_table": Piece("the sinusoidal table", "3.4", grade_sinusoidal_table, sinusoidal_table),
    "residual": Piece("the Pre-LN residual connection", "4.2", grade_pre_ln_residual, _library_residual),
    "loss": Piece("the label-smoothed loss", "5.2", grade_label_smoothed_loss, label_smoothed_cross_entropy),
    "greedy_decode": Piece("greedy decoding with the cache", "6.2", grade_greedy_decode, _library_greedy),
}


@dataclass(frozen=True)
class Pieces:
    """The functions the model is assembled from (the reader's or the library's), and which are whose.

    ``yours``: the names of the pieces that are the reader's; ``reports``: each graded answer's report.
    """

    attention: Callable[..., Any]
    padding_mask: Callable[..., Tensor]
    positional_table: Callable[..., Tensor]
    residual: Callable[..., nn.Module]
    loss: Callable[..., Tensor]
    greedy_decode: Callable[..., Tensor]
    yours: frozenset[str] = frozenset()
    reports: dict[str, GradeReport] = dataclasses.field(default_factory=dict)

    def target_mask(self, tgt: Tensor, pad_id: int) -> Tensor:
        """The decoder's self-attention mask: the padding mask's keys AND the causal mask, ``(B, 1, T, T)``."""
        return self.padding_mask(tgt, pad_id) & causal_mask(tgt.size(1), device=tgt.device)

    def replace(self, **pieces: Callable[..., Any]) -> Pieces:
        """These pieces put in as they are, ungraded (to see what a wrong one does to the model)."""
        changes: dict[str, Any] = dict(pieces)
        return dataclasses.replace(self, yours=self.yours | set(pieces), **changes)

    def table(self) -> pd.DataFrame:
        """One row per piece: its exercise, whose is used, and why."""
        rows = []
        for name, piece in PIECES.items():
            report = self.reports.get(name)
            if name in self.yours:
                why = (f"yours: all {len(report.passed_checks)} checks of {piece.grader.__name__} passed" if report
                       else "yours, put in ungraded")
            elif report is None:
                why = "the library's: no answer given"
            elif report.failed_checks == ["not_implemented"]:
                why = "the library's: yours is not written yet"
            else:
                why = f"the library's: yours fails {', '.join(report.failed_checks)}"
            rows.append({"piece": piece.what, "exercise": piece.exercise, "used": why})
        return pd.DataFrame(rows)


def choose_pieces(**answers: Callable[..., Any] | None) -> Pieces:
    """Grade each given answer with its exercise's grader (from scratch); keep those that pass, and
    the library's piece for the rest. Keys: those of :data:`PIECES`."""
    unknown = set(answers) - set(PIECES)
    if unknown:
        raise ValueError(f"no piece called {', '.join(sorted(unknown))}; the pieces are {', '.join(PIECES)}")
    chosen: dict[str, Callable[..., Any]] = {}
    yours: set[str] = set()
    reports: dict[str, GradeReport] = {}
    for name, piece in PIECES.items():
        answer = answers.get(name)
        chosen[name] = piece.library
        if answer is None:
            continue
        reports[name] = report = piece.grader(answer)
        if report.passed:
            chosen[name], yours = answer, yours | {name}
    return Pieces(**chosen, yours=frozenset(yours), reports=reports)


class PiecesAttention(MultiHeadAttention):
    """:class:`~transformer_lib.attention.MultiHeadAttention` (projections, heads) whose attention is a
    given function ``attention(q, k, v, mask)`` over ``(B, H, T, Dk)`` queries: the one seam,
    :meth:`attend`, overridden. It computes no weights to return (``need_weights`` gives ``None``)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, *, attention: Callable[..., Any]) -> None:
        super().__init__(d_model, n_heads, dropout)
        self.attention = attention

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | CausalMask | None, need_weights: bool,
               bias: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        if isinstance(mask, CausalMask):  # the library's teacher-forced default: the causal mask itself
            mask = mask.materialise(q.size(2), k.size(2), q.device)  # (1, 1, T, L)
        out = self.attention(q, k, v, mask)
        return (out[0] if isinstance(out, (tuple, list)) else out), None  # (B, H, T, Dv)


class PiecesResidual(nn.Module):
    """A residual module with only ``forward(x, sublayer)`` (the exercise's interface) behind the library's
    two steps, which the layers use around attention (it returns its weights too):
    ``sublayer_input(x)`` is what the module hands its sublayer, ``add(x, out)`` what it returns when the
    sublayer's output is ``out``."""

    def __init__(self, residual: nn.Module) -> None:
        super().__init__()
        self.residual = residual

    def sublayer_input(self, x: Tensor) -> Tensor:
        seen: list[Tensor] = []

        def capture(h: Tensor) -> Tensor:
            seen.append(h)
            return torch.zeros_like(h)

        self.residual(x, capture)
        return seen[0]  # (B, L, D): LayerNorm(x) in Pre-LN

    def add(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        return self.residual(x, lambda h: sublayer_output)  # x + dropout(output) in Pre-LN

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return self.residual(x, sublayer)


def assemble(config: TransformerConfig, pieces: Pieces, seed: int = 0) -> Transformer:
    """The library's Transformer (seeded: with the library's pieces, the model of section 5.4), with the
    reader's attention, residual connections and positional table put in where they are used."""
    if not config.norm_first or config.positional != "sinusoidal":
        raise ValueError("the capstone's pieces are a Pre-LN residual and a sinusoidal table: use a config with "
                         f"norm_first=True and positional='sinusoidal', got {config.norm_first}, {config.positional!r}")
    D, H = config.d_model, config.n_heads
    with torch.random.fork_rng(devices=[]):  # the notebook's random numbers stay as they were
        torch.manual_seed(seed)
        model = Transformer(config)
        for layer in [*model.encoder.layers, *model.decoder.layers]:
            for name, child in list(layer.named_children()):
                if isinstance(child, MultiHeadAttention) and "attention" in pieces.yours:
                    mine: nn.Module = PiecesAttention(D, H, config.attn_dropout, attention=pieces.attention)
                    mine.load_state_dict(child.state_dict())  # the same weights
                    setattr(layer, name, mine)
                elif isinstance(child, Residual) and "residual" in pieces.yours:
                    residual = PiecesResidual(pieces.residual(D, config.dropout))
                    init_parameters(residual)  # its LayerNorm as the library's starts
                    setattr(layer, name, residual)
    if "positional_table" in pieces.yours:
        table = pieces.positional_table(config.max_len, D).reshape(config.max_len, D)
        model.src_positions.pe = model.tgt_positions.pe = table.float()
    return model


class PiecesLoss:
    """The trainer's loss (``loss(model, batch) -> (summed loss, target tokens)``) from the pieces: the
    logits under the pieces' masks, scored by the pieces' loss (a mean over the target tokens)."""

    def __init__(self, pieces: Pieces, label_smoothing: float, pad_id: int) -> None:
        self.pieces, self.label_smoothing, self.pad_id = pieces, label_smoothing, pad_id

    def __call__(self, model: nn.Module, batch: Any) -> tuple[Tensor, Any]:
        src_mask = self.pieces.padding_mask(batch.src, self.pad_id)  # (B, 1, 1, S)
        tgt_mask = self.pieces.target_mask(batch.tgt_in, self.pad_id)  # (B, 1, T, T): padding AND causal
        logits = model(batch.src, batch.tgt_in, src_mask, tgt_mask)  # (B, T, V)
        mean = self.pieces.loss(logits, batch.tgt_out, self.label_smoothing, self.pad_id)
        return mean * batch.n_tokens, batch.n_tokens


# --- Grading the trained model ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Setting:
    model: Transformer
    pieces: Pieces
    heldout: TranslationData
    pad_id: int
    bos_id: int
    eos_id: int
    symbols: tuple[int, int]  # the symbols' ids: [first, last]


def _sample(setting: _Setting, n: int = 8) -> tuple[Tensor, Tensor]:
    """``n`` held-out pairs of different lengths (the longest first), as ``(src, tgt_in)``."""
    order = sorted(range(len(setting.heldout)), key=lambda i: -len(setting.heldout.src[i]))
    batch = collate([setting.heldout[i] for i in order[:: max(1, len(order) // n)][:n]], setting.pad_id,
                    setting.bos_id, setting.eos_id)
    return batch.src, batch.tgt_in


def _device(setting: _Setting) -> torch.device:
    return next(setting.model.parameters()).device


def _symbols(setting: _Setting) -> Callable[[Tensor, torch.Generator], Tensor]:
    low, high = setting.symbols
    return lambda x, g: torch.randint(low, high + 1, x.shape, generator=g).to(x.device)


def _causal(setting: _Setting) -> None:
    src, tgt = (t.to(_device(setting)) for t in _sample(setting))
    pieces, pad = setting.pieces, setting.pad_id
    src_mask = pieces.padding_mask(src, pad)
    tgt = torch.where(tgt == pad, setting.symbols[0], tgt)  # every position real: causality alone is checked
    logits = lambda t: setting.model(src, t, src_mask, pieces.target_mask(t, pad))  # noqa: E731
    property_check("causality", lambda: assert_causal(logits, tgt, perturb=_symbols(setting), atol=1e-4),
                   example=f"{src.size(0)} held-out sources and their targets (B = {src.size(0)}, T = {tgt.size(1)}); "
                           "every target token after position t replaced by another symbol",
                   hint="the decoder sees a later target token: check the target mask (a causal part) and "
                        "that the attention applies it")


def _padding_invariant(setting: _Setting) -> None:
    src, tgt = (t.to(_device(setting)) for t in _sample(setting))
    pieces, pad = setting.pieces, setting.pad_id
    src_mask, tgt_mask = pieces.padding_mask(src, pad), pieces.target_mask(tgt, pad)
    real = src != pad

    def padded_source(memory_and_logits: Tensor) -> Tensor:
        return setting.model.encode(memory_and_logits, src_mask)  # (B, S, D); the mask stays that of src

    property_check("padding_invariance", lambda: assert_padding_invariant(
        padded_source, src, real, perturb=_symbols(setting), atol=1e-4),
        example=f"{src.size(0)} held-out sources, shorter ones padded to S = {src.size(1)}; the pads replaced by "
                "symbols, the mask unchanged",
        hint="the encoder reads what the pads hold: check the padding mask (pads are keys to hide) and that "
             "the attention applies it")
    with torch.no_grad():
        changed = torch.where(real, src, _symbols(setting)(src, torch.Generator().manual_seed(1)))
        before = setting.model(src, tgt, src_mask, tgt_mask)
        after = setting.model(changed, tgt, src_mask, tgt_mask)
    if not torch.allclose(before, after, atol=1e-4):
        raise Problem("padding_invariance", "what the source's pads hold changes the decoder's logits: "
                      "cross-attention reads the pads", example=f"{src.size(0)} held-out sources, padded, the pads "
                      "replaced by symbols", hint="cross-attention must use the source's padding mask too")


def _decoded(setting: _Setting, decode: Callable[..., Tensor], batch: Any) -> Tensor:
    device = _device(setting)
    src = batch.src.to(device)
    width = batch.tgt_out.size(1)
    try:
        with torch.no_grad():
            out = decode(setting.model, src, setting.pieces.padding_mask(src, setting.pad_id), width,
                         setting.bos_id, setting.eos_id, setting.pad_id).cpu()  # (B, <= width)
    except Exception as error:  # noqa: BLE001 (a piece may fail on what its grader did not try)
        raise Problem("decoding_raises", f"greedy decoding of the held-out set raises {type(error).__name__}: "
                      f"{str(error).strip().splitlines()[0] if str(error).strip() else '(no message)'}",
                      hint="with the cache, a new token's attention gets mask=None (it may see every cached key): "
                           "your attention must accept it") from None
    return torch.nn.functional.pad(out, (0, width - out.size(1)), value=setting.pad_id)  # (B, width)


def _cache_equals_recompute(setting: _Setting, state: dict[str, Any]) -> None:
    setting.model.eval()
    batch = collate(list(setting.heldout), setting.pad_id, setting.bos_id, setting.eos_id)
    cached = _decoded(setting, setting.pieces.greedy_decode, batch)
    state["decoded"], state["batch"] = cached, batch
    recomputed = _decoded(setting, _uncached_greedy, batch)
    differ = (cached != recomputed).any(dim=1)
    if bool(differ.any()):
        i = int(differ.nonzero()[0])
        writes_specials = bool((cached[i] == setting.bos_id).any())
        raise Problem("cache_equals_recompute", f"greedy decoding with the cache and without it differ on "
                      f"{int(differ.sum())} of {len(differ)} held-out sources", example=fmt(batch.src[i]),
                      expected=fmt(recomputed[i]), got=fmt(cached[i]),
                      hint="your decoding writes <bos>, which greedy_decode never chooses: leave <bos> and <pad> "
                           "out of the argmax (logits[:, [bos_id, pad_id]] = float('-inf'))" if writes_specials else
                           "the cached path places or masks a new token differently: check that your attention "
                           "takes mask=None (a new token sees every cached key) and the positions of new tokens")


def _uncached_greedy(model: Any, src: Tensor, src_mask: Tensor, max_new_tokens: int, bos_id: int, eos_id: int,
                     pad_id: int) -> Tensor:
    return greedy_decode(cast(Transformer, model), src, src_mask, max_new_tokens=max_new_tokens, bos_id=bos_id,
                         eos_id=eos_id, pad_id=pad_id, use_cache=False)


def _by_length(setting: _Setting, state: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """``{source length: (right, pairs)}`` of the decoded held-out set."""
    right = (state["decoded"] == state["batch"].tgt_out).all(dim=1)  # (B,)
    lengths = [len(s) for s in setting.heldout.src]
    return {n: (sum(bool(r) for r, m in zip(right, lengths) if m == n), lengths.count(n)) for n in sorted(set(lengths))}


def _exact_match(setting: _Setting, state: dict[str, Any]) -> None:
    if "decoded" not in state:
        state["batch"] = batch = collate(list(setting.heldout), setting.pad_id, setting.bos_id, setting.eos_id)
        state["decoded"] = _decoded(setting, setting.pieces.greedy_decode, batch)
    by_length = _by_length(setting, state)
    short = {n: (r, m) for n, (r, m) in by_length.items() if r < m}
    if short:
        batch, decoded = state["batch"], state["decoded"]
        wrong = [i for i in range(len(setting.heldout)) if not bool((decoded[i] == batch.tgt_out[i]).all())]
        i = min(wrong, key=lambda j: len(setting.heldout.src[j]))  # the shortest sequence it gets wrong
        listed = ", ".join(f"length {n}: {r} of {m}" for n, (r, m) in short.items())
        raise Problem("heldout_exact_match", f"not every held-out sequence is reversed exactly ({listed})",
                      example=f"source {setting.heldout.src[i]} (the shortest it gets wrong)",
                      expected=fmt(batch.tgt_out[i]), got=fmt(decoded[i]),
                      hint="if every other check passes, the model needs more training (the full profile, or more "
                           "steps); if one failed, fix that piece first")


class _ModelGrading(Grading):
    """A grading of a trained model: only its own checks (no call of an answer to watch for side effects)."""

    def _whole_run_checks(self, stopped: bool) -> None:
        pass


def grade_transformer(model: Transformer, pieces: Pieces, heldout: TranslationData, *, pad_id: int, bos_id: int,
                      eos_id: int, symbols: tuple[int, int]) -> GradeReport:
    """Grade the trained capstone model: causality and padding invariance (:mod:`transformer_lib.properties`),
    greedy decoding with the cache equal to decoding without it, and 100% exact match on every length of
    the held-out set (decoded with the pieces' greedy decoding). ``symbols``: the first and last id of
    the task's symbols (the properties replace tokens by symbols)."""
    setting = _Setting(model.eval(), pieces, heldout, pad_id, bos_id, eos_id, symbols)
    state: dict[str, Any] = {}
    whose = "yours" if pieces.yours else "the library's"
    grading = _ModelGrading(f"Your Transformer ({len(pieces.yours)} of {len(PIECES)} pieces yours)" if pieces.yours
                      else "The Transformer of the library's pieces")
    with grading:
        grading.check("causal: later target tokens change no earlier logits (transformer_lib.properties)",
                      partial(_causal, setting))
        grading.check("padding invariant: what the source's pads hold changes neither the encoder's states at "
                      "real positions nor the logits", partial(_padding_invariant, setting))
        grading.check(f"greedy decoding with the cache ({whose}) gives the tokens of decoding without it",
                      partial(_cache_equals_recompute, setting, state))
        grading.check(f"100% held-out exact match on every length ({len(heldout):,} sequences never seen in "
                      "training)", partial(_exact_match, setting, state))
    return grading.report

"""Masked-token prediction (BERT, Devlin et al. 2019) and the encoder-only model it trains (chapter 7).

- :func:`mask_tokens`: pick 15% of the tokens; of those, 80% become ``<mask>``, 10% a random word,
  10% stay; only the picked ones are scored.
- :class:`EncoderOnlyTransformer`: chapter 4's encoder stack, no causal mask, with an output layer
  tied to the embedding; :meth:`TransformerConfig.encoder_only <transformer_lib.config.TransformerConfig.encoder_only>`
  makes its configuration, :func:`transformer_lib.model.build_encoder` its stack.
- :func:`masked_token_loss`: the loss on the picked positions only.
- :func:`masked_token_accuracy`: top-1 accuracy on the picked positions; :func:`corruption_kinds` and
  :func:`masked_token_accuracy_by_kind` split it by what the input showed there (``<mask>``, a random
  word, the word itself), since only the first are words actually hidden.

Shapes::

    B  batch size    T  sequence length    D  model width    H  heads    V  vocabulary size
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import TransformerConfig
from .dropout import Dropout
from .embeddings import TokenEmbedding
from .language_models import IGNORE_INDEX
from .masking import padding_mask
from .model import build_encoder, init_parameters

__all__ = ["MASK", "CORRUPTIONS", "MaskedTokens", "mask_tokens", "EncoderOnlyTransformer", "masked_token_loss",
           "masked_token_accuracy", "corruption_kinds", "masked_token_accuracy_by_kind"]

MASK = "<mask>"
CORRUPTIONS = ("masked", "random", "unchanged")  # what a picked position's input shows (80/10/10)


@dataclass
class MaskedTokens:
    """The model's input, the scored targets (:data:`~transformer_lib.language_models.IGNORE_INDEX`
    where not picked) and which positions were picked, each ``(B, T)``."""

    inputs: Tensor
    targets: Tensor
    picked: Tensor


def mask_tokens(tokens: Tensor, *, mask_id: int, vocab_size: int, special_ids: Sequence[int],
                pick_rate: float = 0.15, generator: torch.Generator | None = None) -> MaskedTokens:
    """BERT's corruption: pick each ordinary token with probability ``pick_rate``; of the picked,
    80% become ``mask_id``, 10% a random ordinary token, 10% stay as they are.

    Specials (padding, ``<bos>``, ``<mask>``...: ``special_ids``) are never picked, and random
    replacements are never specials. The kept 10% make the model predict every input word, not only
    masked ones: at test time there is no ``<mask>`` (Devlin et al. 2019, appendix A.1).

    Args:
        tokens: ids ``(B, T)``.
        mask_id: the ``<mask>`` id (it must be in ``special_ids``).
        vocab_size: ``V``; random replacements are drawn from the ids below it that are not special.
        special_ids: ids that are never picked.
        pick_rate: share of the ordinary tokens that are scored, in ``(0, 1]``.
        generator: for reproducible masks.
    """
    if not 0.0 < pick_rate <= 1.0:
        raise ValueError(f"pick_rate must be in (0, 1], got {pick_rate}")
    specials, words = _special_and_word_ids(mask_id, vocab_size, special_ids)
    cpu = tokens.cpu()
    draw = torch.rand(cpu.shape, generator=generator)  # (B, T) picks
    kind = torch.rand(cpu.shape, generator=generator)  # (B, T) what happens to a pick
    random_words = words[torch.randint(len(words), cpu.shape, generator=generator)]  # (B, T)
    picked = (draw < pick_rate) & ~torch.isin(cpu, specials)  # (B, T) scored positions
    inputs = torch.where(picked & (kind < 0.8), mask_id, cpu)  # 80%: <mask>
    inputs = torch.where(picked & (kind >= 0.8) & (kind < 0.9), random_words, inputs)  # 10%: a random word
    targets = torch.where(picked, cpu, IGNORE_INDEX)
    return MaskedTokens(inputs.to(tokens.device), targets.to(tokens.device), picked.to(tokens.device))


def _special_and_word_ids(mask_id: int, vocab_size: int, special_ids: Sequence[int]) -> tuple[Tensor, Tensor]:
    """The special ids as a tensor, and the ids below ``vocab_size`` that are not special."""
    specials = torch.as_tensor(list(special_ids), dtype=torch.long)
    if mask_id not in specials.tolist():
        raise ValueError(f"mask_id={mask_id} must be one of special_ids={specials.tolist()}")
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[specials[specials < vocab_size]] = False
    if not ordinary.any():
        raise ValueError(f"every id below vocab_size={vocab_size} is special: nothing to replace with")
    return specials, ordinary.nonzero().squeeze(1)


class EncoderOnlyTransformer(nn.Module):
    """An encoder-only model (BERT, Devlin et al. 2019): every position attends to every other.

    Token embedding, positions, chapter 4's encoder layers under a padding mask only (no causal
    mask: each output sees the words after it as well as before), a final LayerNorm (Pre-LN), and an
    output layer tied to the embedding that predicts the token at each position.

    Args:
        config: a :class:`TransformerConfig` with ``n_decoder_layers=0`` and one vocabulary
            (:meth:`TransformerConfig.encoder_only` makes one).

    Shape:
        tokens ``(B, T)``; mask broadcastable to ``(B, H, T, T)`` (default: padding only) -> logits ``(B, T, V)``.

    Example:
        >>> model = EncoderOnlyTransformer(TransformerConfig.encoder_only("tiny", vocab_size=11))
        >>> model(torch.randint(1, 11, (2, 5))).shape
        torch.Size([2, 5, 11])
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        if c.n_decoder_layers != 0 or c.src_vocab_size != c.tgt_vocab_size:
            raise ValueError(
                f"an encoder-only model has no decoder and one vocabulary, got n_decoder_layers={c.n_decoder_layers}, "
                f"src_vocab_size={c.src_vocab_size}, tgt_vocab_size={c.tgt_vocab_size}; "
                "make the config with TransformerConfig.encoder_only(preset, vocab_size, ...)"
            )
        self.config = c
        self.embed = TokenEmbedding(c.src_vocab_size, c.d_model)
        self.positions, encoder = build_encoder(c, c.n_encoder_layers)
        self.embed_dropout = Dropout(c.dropout)
        self.encoder = encoder
        self.output_layer = nn.Linear(c.d_model, c.src_vocab_size, bias=False)
        init_parameters(self)
        self.output_layer.weight = self.embed.weight  # tied: one Parameter (chapter 3)

    def make_mask(self, tokens: Tensor) -> Tensor:
        """``padding_mask(tokens)`` with ``config.pad_id``: every real token may attend to every other."""
        return padding_mask(tokens, self.config.pad_id)

    def encode(
        self, tokens: Tensor, mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor | None]]:
        """Token ids ``(B, T)`` -> states ``(B, T, D)`` and, with ``need_weights``, each layer's attention."""
        mask = self.make_mask(tokens) if mask is None else mask
        x = self.embed_dropout(self.positions(self.embed(tokens)))  # (B, T, D)
        return self.encoder(x, mask, need_weights=need_weights)

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.output_layer(self.encode(tokens, mask)[0])  # (B, T, V)

    def attention_maps(self, tokens: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        """Self-attention weights of every layer, ``(B, H, T, T)`` each (for figures; use ``eval()``)."""
        return [weights for weights in self.encode(tokens, mask, need_weights=True)[1] if weights is not None]


def masked_token_loss(model: EncoderOnlyTransformer, inputs: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy on the picked positions only (``targets`` from :func:`mask_tokens`).

    The output layer runs on the picked positions alone: about 15% of the work of all of them.
    (Picking them by a boolean index is the one step in the library whose shape depends on the
    data, so on a GPU it waits once per batch for the mask to be counted.)
    """
    states, _ = model.encode(inputs)  # (B, T, D)
    scored = targets != IGNORE_INDEX  # (B, T)
    logits = model.output_layer(states[scored])  # (N, V), N picked positions
    return F.cross_entropy(logits, targets[scored])


def masked_token_accuracy(model: EncoderOnlyTransformer, batches: Sequence[tuple[Tensor, Tensor]], device: torch.device | str = "cpu") -> float:
    """Share of the picked positions whose most likely token is the original one (top-1).

    The picked positions include the 10% left unchanged, where the input shows the answer:
    :func:`masked_token_accuracy_by_kind` scores the hidden ones on their own.
    """
    correct, count = _picked_right(model, batches, device)
    if count.sum() == 0:
        raise ValueError("no picked positions in the batches: accuracy is undefined")
    return int(correct.sum()) / int(count.sum())


def corruption_kinds(inputs: Tensor, targets: Tensor, mask_id: int) -> dict[str, Tensor]:
    """Split the picked positions (``targets`` not ignored) by what the input shows there.

    Returns ``{"masked", "random", "unchanged"}`` (:data:`CORRUPTIONS`) -> ``(B, T)`` booleans that
    partition the picked positions: the input is ``mask_id``; another word; the original word (a
    random replacement that drew the original word counts as unchanged: the input shows the answer).
    """
    picked = targets != IGNORE_INDEX  # (B, T)
    masked = picked & (inputs == mask_id)  # (B, T)
    unchanged = picked & (inputs == targets)  # (B, T)
    return {"masked": masked, "random": picked & ~masked & ~unchanged, "unchanged": unchanged}


def masked_token_accuracy_by_kind(model: EncoderOnlyTransformer, batches: Sequence[tuple[Tensor, Tensor]],
                                  mask_id: int, device: torch.device | str = "cpu") -> dict[str, float]:
    """Top-1 accuracy on the picked positions (``"picked"``) and on each kind of
    :func:`corruption_kinds` (``"masked"``: the words actually hidden, ``"random"``, ``"unchanged"``).

    A kind with no position in the batches is left out.
    """
    correct, count = _picked_right(model, batches, device, mask_id)
    if count.sum() == 0:
        raise ValueError("no picked positions in the batches: accuracy is undefined")
    kinds = {"picked": (int(correct.sum()), int(count.sum()))}
    kinds |= {kind: (int(correct[i]), int(count[i])) for i, kind in enumerate(CORRUPTIONS)}
    return {kind: right / n for kind, (right, n) in kinds.items() if n > 0}


@torch.no_grad()
def _picked_right(model: EncoderOnlyTransformer, batches: Sequence[tuple[Tensor, Tensor]],
                  device: torch.device | str, mask_id: int | None = None) -> tuple[Tensor, Tensor]:
    """Right top-1 guesses and positions, per kind of :data:`CORRUPTIONS` (all in the first when
    ``mask_id`` is None), each ``(3,)``."""
    was_training = model.training
    model.eval()
    correct, count = torch.zeros(len(CORRUPTIONS), dtype=torch.long), torch.zeros(len(CORRUPTIONS), dtype=torch.long)
    try:
        for inputs, targets in batches:
            inputs, targets = inputs.to(device), targets.to(device)
            right = model(inputs).argmax(-1) == targets  # (B, T), False where not picked
            if mask_id is None:
                kinds = [targets != IGNORE_INDEX]
            else:
                kinds = list(corruption_kinds(inputs, targets, mask_id).values())
            for i, where in enumerate(kinds):
                correct[i] += int(right[where].sum())
                count[i] += int(where.sum())
    finally:
        model.train(was_training)
    return correct, count

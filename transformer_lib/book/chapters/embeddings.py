"""Chapter 3's example: eight German-English caption pairs in Multi30k's style, their tokens, one
vocabulary per language, and a padded batch of the first four German sentences.

Section 3.1 builds all of it step by step; later sections start from :func:`caption_example`,
which makes the same objects the same way, so the chapter needs no data files until its subword
section.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from transformer_lib.vocab import Vocab
from transformer_lib.tokenizers import word_splitter

__all__ = ["CAPTION_PAIRS", "CaptionExample", "caption_example"]

CAPTION_PAIRS = (
    ("Zwei junge Männer spielen Fußball im Park.", "Two young men are playing soccer in the park."),
    ("Eine Frau in einem roten Mantel geht die Straße entlang.", "A woman in a red coat is walking down the street."),
    ("Ein kleines Mädchen klettert auf ein Klettergerüst.", "A little girl is climbing on a jungle gym."),
    ("Ein Hund rennt durch den Schnee.", "A dog is running through the snow."),
    ("Ein Mann fährt mit dem Fahrrad eine Straße entlang.", "A man is riding a bike down a road."),
    ("Drei Kinder sitzen auf einer Bank und essen Eis.", "Three children are sitting on a bench eating ice cream."),
    ("Ein Mann mit Hut spielt Gitarre auf der Bühne.", "A man in a hat is playing guitar on stage."),
    ("Zwei Hunde spielen im Wasser.", "Two dogs are playing in the water."),
)


@dataclass(frozen=True)
class CaptionExample:
    """The captions' tokens (spaCy's rule-based tokenizers), a ``Vocab`` per language, and ``src``
    ``(B, S)``: the first four German captions between ``<bos>`` and ``<eos>``, padded."""

    de_tokens: list[list[str]]
    en_tokens: list[list[str]]
    vocab_de: Vocab
    vocab_en: Vocab
    src: torch.Tensor


def caption_example() -> CaptionExample:
    """Section 3.1's objects, made as section 3.1 makes them."""
    de_tokens = [word_splitter("de")(de) for de, _ in CAPTION_PAIRS]
    en_tokens = [word_splitter("en")(en) for _, en in CAPTION_PAIRS]
    vocab_de, vocab_en = Vocab.build(de_tokens), Vocab.build(en_tokens)
    sentences = [vocab_de.encode(t, True, True) for t in de_tokens[:4]]  # bos, eos
    src = nn.utils.rnn.pad_sequence([torch.tensor(ids) for ids in sentences], batch_first=True,
                                    padding_value=vocab_de.pad_id)  # (B, S)
    return CaptionExample(de_tokens, en_tokens, vocab_de, vocab_en, src)

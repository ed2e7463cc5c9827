"""Subword tokenization: one byte-pair-encoding (BPE) vocabulary for both languages (chapter 3).

A word-level vocabulary maps every word it never saw in training to ``<unk>``, and the model can
neither read nor write such a word. BPE (Sennrich et al. 2016) starts from characters and merges the
most frequent adjacent pair, again and again, until the vocabulary has the size asked for: frequent
words become one token, rare ones are spelled with a few pieces, and almost nothing is unknown.

The merges are learned by Hugging Face ``tokenizers`` (fast, maintained, and its learned merges are
plain data the book can compare with a hand-written BPE). Words are split on spaces and punctuation
first; a piece that starts a word carries the marker ``▁`` (as in SentencePiece), so decoding is
exact: join the pieces, turn each ``▁`` back into a space. A joint German+English vocabulary lets
the source and target embeddings be one matrix, tied to the output layer too (Press & Wolf 2017),
as the paper does with its shared 37,000-token vocabulary.

What a checkpoint stores is the learned part only, the vocabulary and the merges
(:meth:`SubwordTokenizer.to_dict`); how text is normalised and split before the merges always comes
from this module (:func:`_pipeline`), never from a file. It imports nothing from the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .validation import check_bool
from .vocab import SPECIALS, UNK, Tokenizer, Vocab

__all__ = ["WORD_START", "SubwordTokenizer", "check_merge_order"]

# Marks the first piece of a word: "▁Fahr" "rad" is one word, "▁Fahr" "▁rad" two.
WORD_START = "\u2581"


def check_merge_order(tokens: Sequence[str], merges: Sequence[Sequence[str]]) -> None:
    """Refuse merges that are not in the order BPE learned them, or a vocabulary not numbered by it.

    BPE applies its merges by rank, so a reordered list splits text differently from the tokenizer a
    model trained with, silently. Training numbers each new token as it is made: the token of the
    ``i``-th merge that makes a new one gets the next id after the characters (a merge may also make a
    token an earlier one made). That numbering is checked, so no checksum is needed (files written
    before this check pass it, as they come from training).

    Raises:
        ValueError: naming the first merge out of order, its token and the ids.
    """
    ids = {token: i for i, token in enumerate(tokens)}
    made = {"".join(pair) for pair in merges}
    next_id = len(tokens) - len(made)  # the first token a merge made
    seen: set[int] = set()
    for i, (first, second) in enumerate(merges):
        joined = first + second
        token_id, parts = ids.get(joined), (ids.get(first), ids.get(second))
        if token_id is None or None in parts:
            missing = next(piece for piece in (first, second, joined) if piece not in ids)
            raise ValueError(f"merges[{i}]={[first, second]!r} uses {missing!r}, which is not in the vocabulary")
        if token_id == next_id:
            seen.add(token_id)
            next_id += 1
        elif token_id not in seen:
            raise ValueError(
                f"merges[{i}]={[first, second]!r} makes {joined!r} (id {token_id}) where BPE's order makes id {next_id}: "
                "the merges are not in the order they were learned (reordered or edited), and would split text "
                "differently from the tokenizer the model trained with"
            )
        if max(parts) >= token_id:  # type: ignore[type-var,operator]
            raise ValueError(f"merges[{i}]={[first, second]!r} makes {joined!r} (id {token_id}) from a token made "
                             "later: the merges are not in the order they were learned")


def _pipeline(model: Any = None) -> Any:
    """The tokenizer around a BPE ``model`` (untrained if ``None``): how text is normalised and split
    before any merge, and how pieces are joined again."""
    from tokenizers import Regex, Tokenizer as HFTokenizer, decoders, models, normalizers, pre_tokenizers  # lazily

    tokenizer = HFTokenizer(model if model is not None else models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.NFKC(),  # one code point per accented letter
        normalizers.Replace(Regex(r"\s+"), " "),  # runs of spaces, tabs, newlines: one space
        normalizers.Strip(),
    ])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="always"),
        pre_tokenizers.Punctuation(behavior="isolated"),  # "Fahrrad." -> "▁Fahrrad", "."
    ])
    tokenizer.decoder = decoders.Metaspace(replacement=WORD_START, prepend_scheme="always")
    return tokenizer


class SubwordTokenizer(Tokenizer):
    """A trained BPE tokenizer: text to subword pieces and back (kind ``"bpe"``).

    Build one with :meth:`train`; save it inside a checkpoint with :meth:`to_dict` (its vocabulary
    and merges) and rebuild it with :meth:`from_dict`. Ids 0-3 are the specials of
    :data:`~transformer_lib.vocab.SPECIALS`, so :attr:`vocab` gives the same ids as the tokenizer itself.

    Example:
        >>> bpe = SubwordTokenizer.train(["ein Mann.", "ein Hund.", "a man.", "a dog."] * 5, vocab_size=40)
        >>> pieces = bpe.tokenize("ein  Hund und ein Mann.")
        >>> pieces
        ['▁ein', '▁Hund', '▁', 'u', 'nd', '▁ein', '▁Mann', '.']
        >>> bpe.detokenize(pieces)
        'ein Hund und ein Mann.'
    """

    kind = "bpe"

    def __init__(self, tokenizer: Any, lowercase: bool = False) -> None:
        check_bool("lowercase", lowercase)
        self._tokenizer = tokenizer
        self.lowercase = lowercase
        by_id = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1])
        if [i for _, i in by_id] != list(range(len(by_id))) or tuple(t for t, _ in by_id[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a SubwordTokenizer needs ids 0..V-1 with the specials {SPECIALS} first")
        self.vocab = Vocab([token for token, _ in by_id])

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2,
              lowercase: bool = False) -> SubwordTokenizer:
        """Learn BPE merges on ``texts`` until the vocabulary (specials included) has ``vocab_size`` tokens.

        Pass the training split only (both languages for a joint vocabulary): a vocabulary learned
        on validation or test text would leak them into the model. ``min_frequency``: a pair seen
        fewer times is never merged. ``lowercase``: lower-case every text first (and when tokenizing).
        """
        if vocab_size <= len(SPECIALS):
            raise ValueError(f"vocab_size must be more than the {len(SPECIALS)} special tokens, got {vocab_size}")
        from tokenizers import trainers

        tokenizer = _pipeline()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS), show_progress=False,
        )
        tokenizer.train_from_iterator((text.lower() if lowercase else text for text in texts), trainer)
        return cls(tokenizer, lowercase)

    @classmethod
    def from_vocab_and_merges(cls, tokens: Sequence[str], merges: Sequence[Sequence[str]],
                              lowercase: bool = False) -> SubwordTokenizer:
        """The tokenizer with this vocabulary (tokens in id order, the specials first) and these
        merges (pairs, first learned first), around this module's normalisation and splitting."""
        from tokenizers import models

        check_merge_order(tokens, merges)
        model = models.BPE(vocab={token: i for i, token in enumerate(tokens)},
                           merges=[(first, second) for first, second in merges], unk_token=UNK)
        tokenizer = _pipeline(model)
        tokenizer.add_special_tokens(list(SPECIALS))  # as training does: they are never split
        return cls(tokenizer, lowercase)

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "bpe", "tokens": [...], "merges": [[a, b], ...], "lowercase": ...}``: plain data only."""
        return {"kind": self.kind, "tokens": list(self.vocab.tokens), "merges": [list(pair) for pair in self.merges],
                "lowercase": self.lowercase}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SubwordTokenizer:
        return cls.from_vocab_and_merges(values["tokens"], values["merges"], bool(values.get("lowercase", False)))

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def merges(self) -> list[tuple[str, str]]:
        """The learned merges, first learned first."""
        merges = json.loads(self._tokenizer.to_str())["model"]["merges"]
        return [tuple(pair) if isinstance(pair, list) else tuple(pair.split(" ")) for pair in merges]

    def tokenize(self, text: str) -> list[str]:
        """Text to pieces, e.g. ``"Fahrräder."`` -> ``["▁Fahr", "räder", "."]``."""
        return self._tokenizer.encode(text.lower() if self.lowercase else text).tokens

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[str]]:
        texts = [text.lower() for text in texts] if self.lowercase else list(texts)
        return [encoding.tokens for encoding in self._tokenizer.encode_batch(texts)]

    def detokenize(self, pieces: Sequence[str]) -> str:
        """Pieces back to text: the exact inverse of :meth:`tokenize` (up to NFKC and repeated spaces)."""
        return self._tokenizer.decoder.decode(list(pieces))

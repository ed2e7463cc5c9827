"""Words and ids: spaCy word tokenizers and the :class:`Vocab` that numbers their tokens (chapter 3).

This module replaces what ``torchtext`` used to provide (its last release does not import with
current PyTorch): spaCy's rule-based tokenizers and a plain-Python vocabulary. Subword pieces are in
:mod:`transformer_lib.subword`, which numbers them with the same :class:`Vocab`. It imports nothing
from the model.

- Specials: ``PAD``, ``UNK``, ``BOS``, ``EOS``, in that order in every vocabulary (:data:`SPECIALS`).
- Text to tokens: :func:`tokenizer`, :func:`tokenize_corpus`.
- Tokens to ids and back: :class:`Vocab`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from pathlib import Path

__all__ = ["SPECIALS", "PAD", "UNK", "BOS", "EOS", "tokenizer", "tokenize_corpus", "Vocab"]

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
# Specials come first, so their ids are the same in every vocabulary: <pad>=0, <unk>=1, <bos>=2, <eos>=3.
SPECIALS: tuple[str, ...] = (PAD, UNK, BOS, EOS)


@lru_cache(maxsize=None)
def _blank_pipeline(lang: str):
    import spacy  # imported lazily: only the text pipeline needs it

    return spacy.blank(lang)


def tokenizer(lang: str) -> Callable[[str], list[str]]:
    """A rule-based word tokenizer for ``lang`` (``"de"``, ``"en"``, ...), from ``spacy.blank``.

    ``spacy.blank`` needs no model download: it holds only the language's tokenization rules
    (punctuation, abbreviations such as "z.B.", contractions such as "isn't" -> "is", "n't").

    Example:
        >>> tokenizer("de")("Ein Mann fährt Fahrrad.")
        ['Ein', 'Mann', 'fährt', 'Fahrrad', '.']
    """
    nlp = _blank_pipeline(lang)

    def tokenize(text: str) -> list[str]:
        return [token.text for token in nlp.tokenizer(text.strip())]

    return tokenize


def tokenize_corpus(texts: Iterable[str], lang: str, lowercase: bool = False) -> list[list[str]]:
    """Tokenize many sentences with :func:`tokenizer` (``spacy.blank``), lower-casing first if asked."""
    tokenize = tokenizer(lang)
    return [tokenize(text.lower() if lowercase else text) for text in texts]


class Vocab:
    """A bidirectional map between tokens and integer ids.

    The special tokens come first (``<pad>``=0, ``<unk>``=1, ``<bos>``=2, ``<eos>``=3 by default);
    unknown tokens map to ``<unk>``.

    Args:
        tokens: every token in id order, specials included.
        unk_token: the token that unknown tokens map to.

    Example:
        >>> vocab = Vocab.build([["a", "b", "a"], ["c"]], min_freq=2)
        >>> vocab.tokens
        ['<pad>', '<unk>', '<bos>', '<eos>', 'a']
        >>> vocab.encode(["a", "zzz"])
        [4, 1]
    """

    def __init__(self, tokens: Sequence[str], unk_token: str = UNK) -> None:
        self.tokens: list[str] = list(tokens)
        self.index: dict[str, int] = {}
        for i, token in enumerate(self.tokens):
            if token in self.index:
                raise ValueError(f"token {token!r} appears twice (ids {self.index[token]} and {i})")
            self.index[token] = i
        if unk_token not in self.index:
            raise ValueError(f"the unknown token {unk_token!r} must be in the vocabulary")
        self.unk_token = unk_token

    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        min_freq: int = 1,
        max_size: int | None = None,
        specials: Sequence[str] = SPECIALS,
    ) -> Vocab:
        """Count tokens and keep those seen at least ``min_freq`` times, most frequent first.

        Ties are broken alphabetically, so the same corpus always gives the same ids.
        ``max_size`` caps the number of non-special tokens.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be at least 1, got {min_freq}")
        counts = Counter(token for sentence in sentences for token in sentence)
        for special in specials:
            counts.pop(special, None)
        kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        return cls([*specials, *kept])

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.tokens == other.tokens and self.unk_token == other.unk_token

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, first={self.tokens[:6]})"

    @property
    def unk_id(self) -> int:
        return self.index[self.unk_token]

    @property
    def pad_id(self) -> int:
        return self.index[PAD]

    @property
    def bos_id(self) -> int:
        return self.index[BOS]

    @property
    def eos_id(self) -> int:
        return self.index[EOS]

    def token_to_id(self, token: str) -> int:
        return self.index.get(token, self.unk_id)

    def id_to_token(self, token_id: int) -> str:
        if not 0 <= token_id < len(self.tokens):
            raise ValueError(f"id {token_id} is outside the vocabulary [0, {len(self.tokens) - 1}]")
        return self.tokens[token_id]

    def encode(self, tokens: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Tokens to ids, optionally wrapped in ``<bos>`` ... ``<eos>``."""
        return self.with_specials([self.token_to_id(token) for token in tokens], add_bos, add_eos)

    def with_specials(self, ids: Sequence[int], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """``ids`` wrapped in ``<bos>`` ... ``<eos>`` as asked."""
        return [self.bos_id] * add_bos + list(ids) + [self.eos_id] * add_eos

    def decode(self, ids: Iterable[int], strip_specials: bool = True) -> list[str]:
        """Ids to tokens; stops at ``<eos>`` and drops ``<pad>``/``<bos>`` when ``strip_specials``."""
        tokens = []
        for token_id in ids:
            token_id = int(token_id)
            if strip_specials:
                if token_id == self.eos_id:
                    break
                if token_id in (self.pad_id, self.bos_id):
                    continue
            tokens.append(self.id_to_token(token_id))
        return tokens

    def to_dict(self) -> dict[str, object]:
        """Plain types only (for JSON files and ``weights_only`` checkpoints)."""
        return {"tokens": list(self.tokens), "unk_token": self.unk_token}

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> Vocab:
        return cls(values["tokens"], values.get("unk_token", UNK))  # type: ignore[arg-type]

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

"""Tokens and ids (chapter 3): the :class:`Vocab` that numbers tokens, and :class:`Tokenizer`, the one
interface from text to ids and back that every kind of tokenizer implements.

This module replaces what ``torchtext`` used to provide (its last release does not import with
current PyTorch): a plain-Python vocabulary. The tokenizers are in :mod:`transformer_lib.tokenizers`
(words, symbols) and :mod:`transformer_lib.subword` (BPE pieces); all number their tokens with a
:class:`Vocab`. It imports nothing from the model.

- Specials: ``PAD``, ``UNK``, ``BOS``, ``EOS``, in that order in every vocabulary (:data:`SPECIALS`).
- Tokens to ids and back: :class:`Vocab`.
- Text to ids and back: :class:`Tokenizer`.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["SPECIALS", "PAD", "UNK", "BOS", "EOS", "Vocab", "Tokenizer", "TokenizerPair"]

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
# Specials come first, so their ids are the same in every vocabulary: <pad>=0, <unk>=1, <bos>=2, <eos>=3.
SPECIALS: tuple[str, ...] = (PAD, UNK, BOS, EOS)


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
            if not isinstance(token, str):
                raise TypeError(f"tokens must be str, but token {i} is {token!r} ({type(token).__name__})")
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
        """Write :meth:`to_dict` as JSON, whole or not at all (a temporary file beside ``path``, renamed)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            tmp.write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)  # after an error; after the rename it is gone already

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


class Tokenizer(ABC):
    """Text to token ids and back: what every tokenizer of the library is.

    A tokenizer splits text into tokens (:meth:`tokenize`), numbers them with its :attr:`vocab`
    (:meth:`encode`), and turns ids back into text (:meth:`decode`, through :meth:`detokenize`).
    It saves to a plain dict (:meth:`to_dict`, holding its ``kind``) that a ``weights_only``
    checkpoint can carry, and :func:`transformer_lib.tokenizers.tokenizer_from_dict` rebuilds it
    from that dict, refusing a kind it does not know.

    Attributes:
        kind: the name the dict records (``"words"``, ``"bpe"``, ``"symbols"``).
        vocab: the :class:`Vocab` of its tokens.
        lowercase: lower-case text before splitting it.
    """

    kind: ClassVar[str]
    vocab: Vocab
    lowercase: bool = False

    @abstractmethod
    def tokenize(self, text: str) -> list[str]:
        """Text to tokens (lower-cased first when :attr:`lowercase`)."""

    @abstractmethod
    def detokenize(self, tokens: Sequence[str]) -> str:
        """Tokens back to text."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """Plain values only, ``kind`` among them."""

    @classmethod
    @abstractmethod
    def from_dict(cls, values: dict[str, Any]) -> Tokenizer:
        """The tokenizer :meth:`to_dict` described."""

    def encode(self, text: str) -> list[int]:
        """Text to token ids (no specials; unknown tokens are ``<unk>``)."""
        return self.vocab.encode(self.tokenize(text))

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids to text: stops at ``<eos>``, drops ``<pad>`` and ``<bos>``."""
        return self.detokenize(self.vocab.decode(ids))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and type(other) is type(self) and other.to_dict() == self.to_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, vocab_size={len(self.vocab)})"


class TokenizerPair:
    """What holds a source and a target tokenizer (a prepared corpus, a translator) and so has their
    vocabularies: a base class that adds :attr:`src_vocab` and :attr:`tgt_vocab`.

    Attributes:
        src_tokenizer, tgt_tokenizer: set by the subclass (a dataclass's fields, for instance).
    """

    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer

    @property
    def src_vocab(self) -> Vocab:
        return self.src_tokenizer.vocab

    @property
    def tgt_vocab(self) -> Vocab:
        return self.tgt_tokenizer.vocab

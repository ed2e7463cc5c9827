"""Text to ids and back (chapter 3): word tokenizers (spaCy's rules, Moses' detokenizer), the toy
tasks' symbols, and the table of every kind of tokenizer, :data:`TOKENIZERS`.

Every tokenizer implements :class:`transformer_lib.vocab.Tokenizer`: ``tokenize``/``encode`` text,
``detokenize``/``decode`` tokens, and ``to_dict``/``from_dict`` for checkpoints, whose dict records
its ``kind``. :func:`tokenizer_from_dict` rebuilds any of them and refuses a kind it does not know.

- Words: :func:`word_splitter` (``spacy.blank``, rules only, no model download),
  :func:`tokenize_corpus`, :func:`detokenize` (their inverse), :class:`WordTokenizer`. spaCy is
  the ``[words]`` extra (:data:`WORDS_EXTRA`); without it, splitting words raises a
  ``ModuleNotFoundError`` that says what to install.
- Symbols separated by spaces (the copy and reverse tasks): :class:`SymbolTokenizer`.
- Subword pieces: :class:`~transformer_lib.subword.SubwordTokenizer` (BPE).

It imports nothing from the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .subword import SubwordTokenizer
from .validation import check_bool
from .vocab import SPECIALS, Tokenizer, Vocab

__all__ = [
    "WORDS_EXTRA",
    "word_splitter",
    "tokenize_corpus",
    "detokenize",
    "WordTokenizer",
    "SymbolTokenizer",
    "TokenizerKind",
    "TOKENIZERS",
    "learned_tokenizers",
    "check_language",
    "tokenizer_from_dict",
]


# What to install for word-level tokenization: spaCy is an extra, not a base dependency (225 MB of
# the install; the shipped BPE model and prepared data need none of it).
WORDS_EXTRA = "tested-transformer[words]"


@lru_cache(maxsize=None)
def _blank_pipeline(lang: str) -> Any:
    try:
        import spacy  # imported lazily: only the word-level text pipeline needs it
    except ImportError as error:
        raise ModuleNotFoundError(
            f"word-level tokenization (--tokenizer words, WordTokenizer) needs spaCy, which is not installed "
            f"({error}); install it with: pip install '{WORDS_EXTRA}' (BPE models, such as the pretrained one, "
            "need no spaCy)", name="spacy") from None
    check_language(lang)
    return spacy.blank(lang)


_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")  # spaCy's codes: "de", "en", "grc", "xx" (multi-language)


def check_language(lang: object, name: str = "lang") -> None:
    """``lang`` is a language code spaCy has rules for (``spacy.blank(lang)`` works), or a ``ValueError``
    naming it: spaCy itself would raise an ``ImportError`` for ``"klingon"``, as if it were not installed.
    Without spaCy (data prepared elsewhere need none) only the code's form is checked."""
    known = isinstance(lang, str) and _LANGUAGE_CODE.fullmatch(lang) is not None
    if known:
        try:
            from spacy.util import get_lang_class  # imported lazily: only the text pipeline needs it
        except ImportError:  # no spaCy (a GPU box training on prepared ids): the code's form is all we check
            return
        try:
            get_lang_class(str(lang))
        except ImportError:
            known = False
    if not known:
        raise ValueError(f"{name}={lang!r} is not a language spaCy knows; use a code such as 'de' or 'en'")


def word_splitter(lang: str) -> Callable[[str], list[str]]:
    """A rule-based word tokenizer for ``lang`` (``"de"``, ``"en"``, ...), from ``spacy.blank``.

    ``spacy.blank`` needs no model download: it holds only the language's tokenization rules
    (punctuation, abbreviations such as "z.B.", contractions such as "isn't" -> "is", "n't").

    Example:
        >>> word_splitter("de")("Ein Mann fährt Fahrrad.")
        ['Ein', 'Mann', 'fährt', 'Fahrrad', '.']
    """
    nlp = _blank_pipeline(lang)

    def split(text: str) -> list[str]:
        return [token.text for token in nlp.tokenizer(text.strip())]

    return split


def tokenize_corpus(texts: Iterable[str], lang: str, lowercase: bool = False) -> list[list[str]]:
    """Split many sentences with :func:`word_splitter` (``spacy.blank``), lower-casing first if asked."""
    split = word_splitter(lang)
    return [split(text.lower() if lowercase else text) for text in texts]


_WORD_END = re.compile(r"[^\W_]$")  # the token ends with a letter or digit
_WORD_START = re.compile(r"^[^\W_]")  # the token starts with a letter or digit


@lru_cache(maxsize=None)
def _moses_detokenizer(lang: str) -> Any:
    from sacremoses import MosesDetokenizer  # imported lazily: only detokenizing needs it

    return MosesDetokenizer(lang=lang)


def _undo_spacy_splits(tokens: Sequence[str]) -> list[str]:
    """Re-join the two splits spaCy makes inside words, which Moses' rules do not know.

    - ``"n't"`` belongs to the word before it: spaCy splits "isn't" into ``is`` + ``n't`` and
      "can't" into ``ca`` + ``n't``, so gluing gives back the original spelling.
    - spaCy's English tokenizer splits hyphens *inside* words ("t-shirt" -> ``t`` ``-`` ``shirt``).
      A ``-`` token between two word tokens is re-joined. This also joins a dash that stood between
      spaces in the original ("a - b"), but in Multi30k's English training text hyphens inside
      words outnumber such dashes 200 to 1.
    """
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.lower() == "n't" and out:
            out[-1] += token
        elif (
            token == "-"
            and out
            and i + 1 < len(tokens)
            and _WORD_END.search(out[-1])
            and _WORD_START.search(tokens[i + 1])
        ):
            out[-1] += "-" + tokens[i + 1]
            i += 1
        else:
            out.append(token)
        i += 1
    return out


def detokenize(tokens: Sequence[str], lang: str = "en") -> str:
    """Turn a list of tokens back into ordinary text, the inverse of the spaCy tokenizer.

    A model outputs tokens without the whitespace between them, so joining on spaces gives
    ``"A man 's bike ."`` where the reference says ``"A man's bike."``; sacrebleu would then count
    mismatches that are only spacing. We use the Moses detokenizer (``sacremoses``, the reference
    rules of the Moses SMT toolkit: punctuation, quotes, brackets, clitics such as ``'s``) after
    re-joining the two splits spaCy makes inside words (``n't`` and intra-word hyphens).

    On Multi30k's 1,000 English test sentences, ``detokenize(word_splitter("en")(s)) == s`` holds for
    more than 99% of them (checked in ``tests/test_evaluation.py``).

    Args:
        tokens: the tokens of one sentence, e.g. from :meth:`transformer_lib.vocab.Vocab.decode`.
        lang: language code for Moses' language-specific rules (``"en"``, ``"de"``, ...).

    Returns:
        The sentence as a string.

    Example:
        >>> detokenize(["A", "man", "'s", "t", "-", "shirt", "is", "n't", "red", "."])
        "A man's t-shirt isn't red."
    """
    if isinstance(tokens, str):
        raise TypeError("detokenize expects a list of tokens, not a string; split it first or use it as is")
    joined = _undo_spacy_splits(tokens)
    # unescape=False: our tokens are plain text, not Moses' XML-escaped tokens (&amp; stays &amp;).
    return _moses_detokenizer(lang).detokenize(joined, unescape=False)


class WordTokenizer(Tokenizer):
    """Words of one language (kind ``"words"``): spaCy's rules to split, :func:`detokenize` to join,
    a :class:`~transformer_lib.vocab.Vocab` of the training words (rarer ones are ``<unk>``).

    Example:
        >>> words = WordTokenizer(Vocab.build([["Ein", "Mann", "."]]), "de")
        >>> words.encode("Ein Mann läuft."), words.decode([5, 6, 1, 4])
        ([5, 6, 1, 4], 'Ein Mann <unk>.')
    """

    kind = "words"

    def __init__(self, vocab: Vocab, lang: str, lowercase: bool = False) -> None:
        check_bool("lowercase", lowercase)
        self.vocab, self.lang, self.lowercase = vocab, lang, lowercase

    def tokenize(self, text: str) -> list[str]:
        return word_splitter(self.lang)(text.lower() if self.lowercase else text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        return detokenize(tokens, self.lang)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tokens": list(self.vocab.tokens), "lang": self.lang, "lowercase": self.lowercase}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> WordTokenizer:
        return cls(Vocab(values["tokens"]), values["lang"], values.get("lowercase", False))


class SymbolTokenizer(Tokenizer):
    """Symbols separated by spaces, as the copy and reverse tasks write them (kind ``"symbols"``).

    The alphabet is closed: a symbol outside the vocabulary is an error, not ``<unk>``.

    Example:
        >>> symbols = SymbolTokenizer(Vocab(["<pad>", "<unk>", "<bos>", "<eos>", "0", "1"]))
        >>> symbols.encode("1 0 1"), symbols.decode([5, 5, 3])
        ([5, 4, 5], '1 1')
    """

    kind = "symbols"

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    def tokenize(self, text: str) -> list[str]:
        symbols = text.split()
        unknown = [symbol for symbol in symbols if symbol not in self.vocab]
        if unknown:
            known = " ".join(t for t in self.vocab.tokens if not t.startswith("<"))
            raise ValueError(f"{len(unknown)} symbol(s) are not in the alphabet, e.g. {unknown[0]!r}; the symbols are {known}")
        return symbols

    def detokenize(self, tokens: Sequence[str]) -> str:
        return " ".join(tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tokens": list(self.vocab.tokens)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SymbolTokenizer:
        return cls(Vocab(values["tokens"]))


TextPairs = Mapping[str, Sequence[tuple[str, str]]]  # split name -> (source, target) sentence pairs
SplitTokens = dict[str, tuple[list[list[str]], list[list[str]]]]  # split name -> (source, target) token lists


def _check_words_dict(values: Mapping[str, Any], where: str) -> None:
    check_language(values.get("lang"), f"{where}['lang']")


def _check_bpe_dict(values: Mapping[str, Any], where: str) -> None:
    _check_merges(values.get("merges"), set(values["tokens"]), f"{where}['merges']")


def _learn_words(text: TextPairs, src_lang: str, tgt_lang: str, lowercase: bool, min_freq: int,
                 vocab_size: int | None) -> tuple[SplitTokens, Tokenizer, Tokenizer]:
    """Split every split into spaCy words, and build one vocabulary per language on the training split."""
    tokens = {
        split: (tokenize_corpus((s for s, _ in pairs), src_lang, lowercase), tokenize_corpus((t for _, t in pairs), tgt_lang, lowercase))
        for split, pairs in text.items()
    }
    src = WordTokenizer(Vocab.build(tokens["train"][0], min_freq=min_freq), src_lang, lowercase)
    tgt = WordTokenizer(Vocab.build(tokens["train"][1], min_freq=min_freq), tgt_lang, lowercase)
    return tokens, src, tgt


def _learn_bpe(text: TextPairs, src_lang: str, tgt_lang: str, lowercase: bool, min_freq: int,
               vocab_size: int | None) -> tuple[SplitTokens, Tokenizer, Tokenizer]:
    """Learn one BPE vocabulary on the training split (both sides) and split every split into pieces."""
    train = text["train"]
    if vocab_size is None:
        raise ValueError("a BPE vocabulary needs vocab_size: how many tokens to learn")
    bpe = SubwordTokenizer.train([*(s for s, _ in train), *(t for _, t in train)], vocab_size=vocab_size,
                                 min_frequency=min_freq, lowercase=lowercase)
    tokens = {split: (bpe.tokenize_batch([s for s, _ in pairs]), bpe.tokenize_batch([t for _, t in pairs]))
              for split, pairs in text.items()}
    return tokens, bpe, bpe


@dataclass(frozen=True)
class TokenizerKind:
    """Everything about one kind of tokenizer, the entry of :data:`TOKENIZERS`.

    Args:
        tokenizer: the class (``from_dict`` rebuilds one from a checkpoint).
        fields: the entries its dict holds (``to_dict``); anything else in a file (a normalizer, a
            pre-tokenizer, a regex) is refused, since how text is split comes from this library.
        check: checks a file's dict beyond the fields every kind has (``kind``, ``tokens``, ``lowercase``).
        learn: for kinds learned from a corpus (``prepare_multi30k``, the training command's
            ``--tokenizer``): ``learn(text, src_lang, tgt_lang, lowercase, min_freq, vocab_size)`` gives
            every split's tokens and the source and target tokenizers.
        joint: one vocabulary for both languages, so the model shares (and ties) its embeddings and
            ``vocab_size`` sets its size.
    """

    tokenizer: type[Tokenizer]
    fields: tuple[str, ...]
    check: Callable[[Mapping[str, Any], str], None] | None = None
    learn: Callable[..., tuple[SplitTokens, Tokenizer, Tokenizer]] | None = None
    joint: bool = False


# Every kind of tokenizer by the name its dict records. A new kind is one entry here.
TOKENIZERS: dict[str, TokenizerKind] = {
    "words": TokenizerKind(WordTokenizer, ("kind", "tokens", "lang", "lowercase"), _check_words_dict, _learn_words),
    "bpe": TokenizerKind(SubwordTokenizer, ("kind", "tokens", "merges", "lowercase"), _check_bpe_dict, _learn_bpe,
                         joint=True),
    "symbols": TokenizerKind(SymbolTokenizer, ("kind", "tokens")),
}


def learned_tokenizers() -> tuple[str, ...]:
    """The kinds of :data:`TOKENIZERS` that learn from a corpus (the training command's ``--tokenizer``)."""
    return tuple(name for name, kind in TOKENIZERS.items() if kind.learn is not None)


def tokenizer_from_dict(values: Mapping[str, Any], where: str = "tokenizer") -> Tokenizer:
    """The tokenizer a checkpoint's dict describes (see :meth:`Tokenizer.to_dict`), every field checked
    first: the kind, the tokens (strings, the specials first and in order, none twice), the language
    of word tokenizers, the merges of BPE (pairs of tokens whose join is a token), ``lowercase``.

    Args:
        where: what the dict is, for the messages (``"tokenizers['src']"``).

    Raises:
        ValueError: a field is missing or wrong; the message names ``where`` and the field.
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"{where} must be a dict, got {type(values).__name__}")
    kind = values.get("kind")
    if kind not in TOKENIZERS:
        raise ValueError(f"{where}['kind']={kind!r} is not a tokenizer kind this library knows: {sorted(TOKENIZERS)}")
    entry = TOKENIZERS[kind]
    unknown = sorted(str(key) for key in set(values) - set(entry.fields))
    if unknown:
        raise ValueError(f"{where} has entries {unknown} that a {kind!r} tokenizer does not have (it has {list(entry.fields)})")
    tokens = _checked_tokens(values.get("tokens"), f"{where}['tokens']")
    if not isinstance(values.get("lowercase", False), bool):
        raise ValueError(f"{where}['lowercase'] must be True or False, got {values['lowercase']!r}")
    if entry.check is not None:
        entry.check(values, where)
    return entry.tokenizer.from_dict(dict(values))


def _checked_tokens(tokens: object, where: str) -> list[str]:
    """A vocabulary read from a file: a list of distinct strings, :data:`SPECIALS` first."""
    if not isinstance(tokens, (list, tuple)):
        raise ValueError(f"{where} must be a list of strings, got {type(tokens).__name__}")
    for i, token in enumerate(tokens):
        if not isinstance(token, str) or not token:
            raise ValueError(f"{where}[{i}] must be a non-empty str, got {token!r} ({type(token).__name__})")
    if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
        raise ValueError(f"{where} must begin with the specials {list(SPECIALS)} in that order, got {list(tokens[:len(SPECIALS)])}")
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in seen:
            raise ValueError(f"{where}[{i}]={token!r} appears twice (also at {seen[token]})")
        seen[token] = i
    return list(tokens)


def _check_merges(merges: object, tokens: set[str], where: str) -> None:
    """BPE merges read from a file: pairs of tokens whose join is a token too (as training makes them)."""
    if not isinstance(merges, (list, tuple)):
        raise ValueError(f"{where} must be a list of pairs, got {type(merges).__name__}")
    for i, pair in enumerate(merges):
        pieces_ok = isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        if not pieces_ok:
            raise ValueError(f"{where}[{i}] must be a pair of strings, got {pair!r}")
        missing = [piece for piece in (*pair, pair[0] + pair[1]) if piece not in tokens]
        if missing:
            raise ValueError(f"{where}[{i}]={list(pair)!r} uses {missing[0]!r}, which is not in the vocabulary")

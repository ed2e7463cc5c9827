"""Claims in words are asserted where they are measured.

A sentence of prose that compares or qualifies a measurement ("beats", "similar", "at least",
"indistinguishable", "mostly", "grows linearly") must be true on the page the build made. The cell
that measured it states it through :func:`claim`, which asserts it and prints it with a check mark,
so a claim that a new library version, seed or data set makes false fails the build::

    claim(masked_enc > masked_dec, f"on the masked words the encoder beats the decoder-only model "
                                   f"({masked_enc:.3f} vs {masked_dec:.3f})")

``tests/test_book_claims.py`` finds such words in the prose and requires the claim beside them.
"""

from __future__ import annotations

__all__ = ["ClaimFailed", "claim"]


class ClaimFailed(AssertionError):
    """A sentence the page states is false on this run's numbers."""


def claim(holds: object, sentence: str) -> None:
    """Assert ``holds`` and print ``sentence`` as a passed check ("✓ ..."); raise :class:`ClaimFailed`
    naming the sentence when it is false.

    Args:
        holds: the comparison the sentence states, measured in this cell (a bool, or a one-element
            tensor or array).
        sentence: the claim as the reader reads it, with the numbers that make it true.
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise ValueError(f"a claim needs its sentence, got {sentence!r}")
    if not bool(holds):
        raise ClaimFailed(f"false on this run, so the page must not say it: {sentence}")
    print(f"✓ {sentence}")

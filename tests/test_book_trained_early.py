"""Tests of transformer_lib.book.chapters.inspect: what chapters 1 to 4 measure on the shipped model.

The helpers that only rearrange weights are tested on small hand-made attention maps whose answer is
known; the ones that run the model are tested on the shipped model (a file load, no download) against
a computation done here another way.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from transformer_lib.book import trained
from transformer_lib.book.chapters import inspect


def _maps(cross: torch.Tensor, decoder_self: torch.Tensor | None = None) -> trained.SentenceAttention:
    source = ["▁Ein", "▁Hund", "▁rennt", "<eos>"]
    target = ["<bos>", "▁A", "▁dog", "▁runs"]
    decoder_self = torch.tril(torch.ones(1, 4, 4)) / 4 if decoder_self is None else decoder_self
    return trained.SentenceAttention(source=source, target=target, encoder_self=[], decoder_self=[decoder_self],
                                     decoder_cross=[cross])


def _one_hot_rows(columns: list[int]) -> torch.Tensor:
    """``(1, T, S)`` cross-attention putting all of row ``i``'s weight on ``columns[i]``."""
    return torch.nn.functional.one_hot(torch.tensor(columns), 4).float()[None]


def test_written_alignment_pairs_each_query_with_the_piece_it_writes() -> None:
    # Query 0 (<bos>) writes "▁A" and looks at "▁Ein"; query 1 ("▁A") writes "▁dog", looks at "▁Hund".
    rows = inspect.written_alignment(_maps(_one_hot_rows([0, 1, 2, 3])), layer=0, head=0)
    assert [(w, s) for w, s, _ in rows] == [("▁A", "▁Ein"), ("▁dog", "▁Hund"), ("▁runs", "▁rennt"), ("<eos>", "<eos>")]
    assert all(weight == 1.0 for _, _, weight in rows)


@pytest.mark.parametrize("columns,aligned", [([0, 1, 2, 3], True), ([0, 2, 1, 3], False)])
def test_lexicon_alignment_scores_the_answer_key(columns: list[int], aligned: bool) -> None:
    pairs = inspect.lexicon_alignment(_maps(_one_hot_rows(columns)), layer=0, head=0)
    assert pairs == [("Hund", "dog", aligned)]  # the one LEXICON pair present on both sides


def test_future_weight_is_zero_only_without_a_look_ahead() -> None:
    assert inspect.future_weight(_maps(_one_hot_rows([0, 1, 2, 3]))) == 0.0
    leaky = torch.tril(torch.ones(1, 4, 4)) / 4
    leaky[0, 1, 3] = 0.25
    assert inspect.future_weight(_maps(_one_hot_rows([0, 1, 2, 3]), leaky)) == pytest.approx(0.25)


def test_a_padded_sentence_is_computed_as_alone_only_with_the_mask() -> None:
    sentence, longer = trained.SENTENCES[2], trained.SENTENCES[0]
    masked = inspect.alone_and_in_batch(sentence, [longer])
    assert masked.pads > 0 and masked.in_batch == masked.alone
    assert masked.memory_difference < 1e-5 and masked.logits_difference < 1e-4
    unmasked = inspect.alone_and_in_batch(sentence, [longer], mask_pads=False)
    assert unmasked.memory_difference > 1e-2 and unmasked.logits_difference > 1e-1


def test_padding_comparison_needs_a_longer_companion() -> None:
    with pytest.raises(ValueError, match="longer"):
        inspect.alone_and_in_batch(trained.SENTENCES[0], [trained.SENTENCES[2]])


def test_nearest_pieces_rank_by_cosine_without_the_query() -> None:
    table = trained.translator().model.src_embed.weight.detach()
    tokens = trained.translator().src_vocab.tokens
    query = tokens.index("▁Hund")
    cosine = torch.nn.functional.cosine_similarity(table, table[query][None], dim=-1)
    cosine[query] = -math.inf
    expected = [tokens[i] for i in cosine.topk(4).indices.tolist()]
    found = inspect.nearest_pieces("▁Hund", k=4)
    assert [piece for piece, _ in found] == expected and "▁Hund" not in expected
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_nearest_pieces_of_an_unknown_piece_is_an_error() -> None:
    with pytest.raises(ValueError, match="▁Xylophonquatsch"):
        inspect.nearest_pieces("▁Xylophonquatsch")


def test_norms_of_positions_and_scaled_embeddings() -> None:
    d_model = trained.translator().model.config.d_model
    assert torch.allclose(inspect.position_norms(16), torch.full((16,), math.sqrt(d_model / 2)))
    norms = inspect.scaled_embedding_norms()
    vocab = trained.translator().src_vocab
    specials = {vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id}
    kept = [i for i in range(len(vocab.tokens)) if i not in specials]
    weight = trained.translator().model.src_embed.weight.detach()  # (V, D)
    assert torch.allclose(norms, weight[kept].norm(dim=-1) * math.sqrt(d_model), rtol=1e-5)


def test_logit_lens_starts_at_the_inputs_and_ends_at_the_models_output() -> None:
    translator = trained.translator()
    sentence = trained.SENTENCES[1]
    readout = inspect.logit_lens(sentence)
    vocab = translator.tgt_vocab
    src = torch.tensor([translator.source_ids([sentence])[0]])
    tgt = torch.tensor([vocab.encode(readout.inputs)])
    with torch.no_grad():
        model_top = translator.model(src, tgt).argmax(-1)[0]
    assert readout.top[-1] == [vocab.tokens[i] for i in model_top.tolist()]
    assert len(readout.top) == len(translator.model.decoder.layers) + 1
    assert readout.written == [*readout.inputs[1:], "<eos>"]
    assert all(0 < p <= 1 for row in readout.probability for p in row)


def test_sublayer_updates_one_row_per_layer_and_sublayer() -> None:
    rows = inspect.sublayer_update_sizes(trained.SENTENCES[:1])
    n_layers = len(trained.translator().model.decoder.layers)
    assert [(r["layer"], r["sublayer"]) for r in rows] == [
        (layer, name) for layer in range(1, n_layers + 1) for name in ("self-attention", "cross-attention", "feed-forward")]
    assert all(0 < r["relative update"] < 100 for r in rows)


@pytest.mark.parametrize("chapter", ["01_attention", "02_masking", "03_embeddings", "04_blocks"])
def test_chapters_one_to_four_each_show_the_trained_model(chapter: str) -> None:
    """Each of these chapters has a section that imports the shipped model's helpers
    (``transformer_lib.book.trained``) and checks a claim in a ``check`` cell."""
    book = Path(__file__).resolve().parents[1] / "book" / chapter
    showing = []
    for path in sorted(book.glob("[0-9][0-9]_*.ipynb")):
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        imports = any(re.search(r"^from transformer_lib\.book import .*\btrained\b", c["source"], re.M) for c in cells)
        checks = any("check" in c["metadata"].get("tags", []) and "assert" in c["source"] for c in cells)
        if imports and checks:
            showing.append(path.name)
    assert showing, f"{chapter}: no section loads the trained model (transformer_lib.book.trained) and checks it"

"""BERT's masking and the encoder-only model (chapter 7): 80/10/10, specials never picked,
reproducible masks, shapes, tied weights, padding invariance, and that it is not causal."""

from __future__ import annotations

import pytest
import torch
from errors import raises

from transformer_lib.properties import assert_padding_invariant
from transformer_lib.language_models import IGNORE_INDEX, train_steps
from transformer_lib.masked_lm import (
    CORRUPTIONS, EncoderOnlyTransformer, corruption_kinds, mask_tokens, masked_token_accuracy,
    masked_token_accuracy_by_kind, masked_token_loss
)
from transformer_lib.config import TransformerConfig

PAD, UNK, BOS, EOS, MASK_ID = 0, 1, 2, 3, 4
SPECIAL = [PAD, UNK, BOS, EOS, MASK_ID]
V = 40


def encoder(**overrides) -> EncoderOnlyTransformer:
    values = dict(d_model=16, n_heads=2, n_encoder_layers=2, d_ff=32, dropout=0.0, max_len=64)
    return EncoderOnlyTransformer(TransformerConfig.encoder_only("tiny", vocab_size=V, **{**values, **overrides}))


def masked(tokens, seed=0, **kwargs):
    return mask_tokens(tokens, mask_id=MASK_ID, vocab_size=V, special_ids=SPECIAL,
                       generator=torch.Generator().manual_seed(seed), **kwargs)


def corpus(n=400, t=50) -> torch.Tensor:
    tokens = torch.randint(5, V, (n, t), generator=torch.Generator().manual_seed(1))
    tokens[:, 0] = BOS
    tokens[:, -10:] = PAD  # a padded tail
    return tokens


def test_mask_tokens_picks_15_percent_and_splits_them_80_10_10() -> None:
    tokens = corpus()
    m = masked(tokens)
    ordinary = ~torch.isin(tokens, torch.tensor(SPECIAL))
    assert m.picked[ordinary].float().mean().item() == pytest.approx(0.15, abs=0.01)
    picked_inputs, originals = m.inputs[m.picked], tokens[m.picked]
    as_mask = (picked_inputs == MASK_ID).float().mean().item()
    kept = (picked_inputs == originals).float().mean().item()
    randomised = 1 - as_mask - kept
    assert as_mask == pytest.approx(0.8, abs=0.02)
    assert kept == pytest.approx(0.1 + 0.1 / (V - 5), abs=0.02)  # a random word can be the same one
    assert randomised == pytest.approx(0.1, abs=0.02)
    assert not torch.isin(picked_inputs[picked_inputs != MASK_ID], torch.tensor(SPECIAL[:4])).any()


def test_only_picked_tokens_are_scored_and_the_rest_is_unchanged() -> None:
    tokens = corpus()
    m = masked(tokens)
    assert torch.equal(m.targets[m.picked], tokens[m.picked])
    assert (m.targets[~m.picked] == IGNORE_INDEX).all()
    assert torch.equal(m.inputs[~m.picked], tokens[~m.picked])


def test_specials_are_never_picked() -> None:
    tokens = torch.tensor(SPECIAL * 40).view(8, 25)
    m = masked(tokens, pick_rate=1.0)
    assert not m.picked.any() and torch.equal(m.inputs, tokens)
    mixed = corpus()
    m = masked(mixed, pick_rate=1.0)  # everything ordinary is picked, nothing else
    assert torch.equal(m.picked, ~torch.isin(mixed, torch.tensor(SPECIAL)))


def test_masks_are_deterministic_with_a_generator() -> None:
    tokens = corpus()
    a, b, c = masked(tokens, seed=5), masked(tokens, seed=5), masked(tokens, seed=6)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize("kwargs, named", [
    (dict(pick_rate=0.0), ["pick_rate", 0.0]),
    (dict(pick_rate=1.5), ["pick_rate", 1.5]),
    (dict(mask_id=39), ["mask_id=39"]),
])
def test_mask_tokens_refuses_bad_arguments(kwargs, named) -> None:
    args = {**dict(mask_id=MASK_ID, vocab_size=V, special_ids=SPECIAL), **kwargs}
    with raises(ValueError, *named):
        mask_tokens(corpus(4, 6), **args)


def test_encoder_only_shapes_and_one_tied_parameter() -> None:
    model = encoder()
    assert model(torch.randint(5, V, (3, 7))).shape == (3, 7, V)
    assert model.output_layer.weight is model.embed.weight
    names = [name for name, _ in model.named_parameters()]
    assert "generator.weight" not in names  # counted once


def test_encoder_only_refuses_a_config_with_a_decoder() -> None:
    from transformer_lib.config import TransformerConfig
    with raises(ValueError, 'n_decoder_layers=2'):
        EncoderOnlyTransformer(TransformerConfig.from_preset("tiny", src_vocab_size=V, tgt_vocab_size=V))


@pytest.mark.parametrize("positional", ["sinusoidal", "rope"])
def test_encoder_only_ignores_padding(positional: str) -> None:
    model = encoder(positional=positional).eval()
    tokens = torch.randint(5, V, (2, 9))
    tokens[0, 6:] = PAD
    tokens[1, 4:] = PAD
    mask = model.make_mask(tokens)  # fixed: the perturbation writes words where the pads were
    assert_padding_invariant(lambda x: model(x, mask), tokens, tokens != PAD,
                             perturb=lambda x, g: torch.randint(5, V, x.shape, generator=g))
    longer = torch.cat([tokens, torch.full((2, 5), PAD)], dim=1)  # more pads change nothing
    with torch.no_grad():
        assert torch.allclose(model(longer)[:, :9], model(tokens), atol=1e-5)


def test_encoder_only_is_not_causal_a_later_token_changes_an_earlier_output() -> None:
    model = encoder().eval()
    tokens = torch.randint(5, V, (1, 8))
    changed = tokens.clone()
    changed[0, -1] = 5 if tokens[0, -1] != 5 else 6  # only the last token differs
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert not torch.allclose(before[0, 0], after[0, 0], atol=1e-4)  # the first position saw it
    maps = model.attention_maps(tokens)
    assert (maps[0][0, :, 0, -1] > 0).all()  # the first query attends to the last key


def test_masked_loss_trains_the_model_to_fill_in_a_copied_token() -> None:
    # each sentence is one word repeated: a masked position can be read off its neighbours
    words = torch.randint(5, V, (64, 1), generator=torch.Generator().manual_seed(2)).expand(64, 8)
    batches = []
    for step in range(150):
        m = masked(words, seed=step, pick_rate=0.3)
        batches.append((m.inputs, m.targets))
    model = encoder()
    losses = train_steps(model, batches, masked_token_loss, lr=1e-2, warmup_steps=10)
    assert losses[-1] < 0.3 * losses[0]
    m = masked(words, seed=999, pick_rate=0.3)
    assert masked_token_accuracy(model, [(m.inputs, m.targets)]) > 0.9


class CopyTheInput(torch.nn.Module):
    """Predicts at each position the token its input shows there: right exactly where the input
    gives the answer away."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(tokens, V).float()  # (B, T, V)


def test_corruption_kinds_partition_the_picked_positions() -> None:
    m = masked(corpus())
    kinds = corruption_kinds(m.inputs, m.targets, MASK_ID)
    assert set(kinds) == set(CORRUPTIONS)
    total = sum(k.long() for k in kinds.values())
    assert torch.equal(total, m.picked.long())  # every picked position in exactly one kind
    assert (m.inputs[kinds["masked"]] == MASK_ID).all()
    assert torch.equal(m.inputs[kinds["unchanged"]], m.targets[kinds["unchanged"]])
    random = kinds["random"]
    assert random.any() and (m.inputs[random] != m.targets[random]).all() and (m.inputs[random] != MASK_ID).all()


def test_accuracy_by_kind_scores_the_hidden_words_apart_from_those_the_input_shows() -> None:
    """A model that copies its input looks right on every unchanged word and never on a hidden one:
    the accuracy over all picked positions is the unchanged share, the masked words' is zero."""
    m = masked(corpus())
    batches = [(m.inputs[:200], m.targets[:200]), (m.inputs[200:], m.targets[200:])]
    model = CopyTheInput().train()
    by_kind = masked_token_accuracy_by_kind(model, batches, MASK_ID)
    assert model.training  # put back as it was
    kinds = corruption_kinds(m.inputs, m.targets, MASK_ID)
    unchanged_share = int(kinds["unchanged"].sum()) / int(m.picked.sum())
    assert by_kind == pytest.approx({"picked": unchanged_share, "masked": 0.0, "random": 0.0, "unchanged": 1.0})
    assert masked_token_accuracy(model, batches) == pytest.approx(unchanged_share)
    assert 0.05 < unchanged_share < 0.15


def test_accuracy_by_kind_leaves_out_a_kind_with_no_position_and_refuses_no_picks() -> None:
    tokens = corpus()
    m = masked(tokens)
    all_hidden = torch.where(m.picked, MASK_ID, tokens)  # every picked word shown as <mask>
    by_kind = masked_token_accuracy_by_kind(CopyTheInput(), [(all_hidden, m.targets)], MASK_ID)
    assert set(by_kind) == {"picked", "masked"} and by_kind["masked"] == 0.0
    nothing = torch.full_like(tokens, IGNORE_INDEX)
    with raises(ValueError):
        masked_token_accuracy_by_kind(CopyTheInput(), [(tokens, nothing)], MASK_ID)

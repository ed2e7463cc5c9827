"""The whole model: reference equivalence with nn.Transformer, properties, sizes, config checks."""

from __future__ import annotations

import math

import pytest
import torch
from errors import raises
from torch import Tensor, nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.kv_cache import kv_cache
from transformer_lib.losses import label_smoothed_cross_entropy
from transformer_lib.masking import CAUSAL, causal_mask, padding_mask, target_mask
from transformer_lib.config import PRESETS, TransformerConfig
from transformer_lib.model import Transformer, count_parameters
from transformer_lib.reference import TorchTransformer

PAD = 0
U = 2.0**-24  # unit roundoff of float32 (half its machine epsilon)


def reordering_atol(reference: torch.Tensor, layers: int, width: int) -> float:
    """How far two float32 evaluations of the same function may drift apart when they differ only in
    the order of their additions (kernels block a sum by its length, so extra padding reorders it).

    A sum of n terms rounds to within n * u * sum|terms| of the exact value (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2002, section 4.2; typically sqrt(n) * u). Every layer on
    the path to an output adds sums of at most ``width`` terms (d_model, d_ff or a sequence length)
    to values that LayerNorm keeps at the output's scale, so each evaluation is within about
    layers * width * u * scale of the exact result, and two of them within twice that.
    """
    return 2 * layers * width * U * float(reference.detach().abs().max())


def tiny(**overrides) -> TransformerConfig:
    values = dict(d_model=16, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=32, max_len=40)
    return TransformerConfig(src_vocab_size=13, tgt_vocab_size=11, **{**values, **overrides})


def batch(B: int = 3, S: int = 7, T: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(1, 13, (B, S))
    tgt = torch.randint(1, 11, (B, T))
    src[0, 5:] = PAD  # ragged source
    tgt[1, 4:] = PAD  # ragged target
    return src, tgt


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("tie_output", [False, True])
def test_model_matches_nn_transformer_with_copied_weights(no_fastpath, norm_first: bool, tie_output: bool) -> None:
    model = Transformer(tiny(norm_first=norm_first, tie_output=tie_output)).eval()
    with torch.no_grad():  # non-trivial LayerNorm parameters everywhere
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)
    reference = TorchTransformer(model).eval()
    src, tgt = batch()
    logits = model(src, tgt, *model.masks_for(src, tgt))
    expected = reference(src, tgt)
    assert logits.shape == (3, 6, 11)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("t", [0, 2, 4])
def test_causality_future_targets_do_not_change_past_logits_exactly(norm_first: bool, t: int) -> None:
    model = Transformer(tiny(norm_first=norm_first)).eval()
    src, tgt = batch()
    tgt[1, 4:] = 5  # no padding here: every position is a real token
    changed = tgt.clone()
    changed[:, t + 1 :] = torch.randint(1, 11, changed[:, t + 1 :].shape)
    assert not torch.equal(changed, tgt)
    a = model(src, tgt, *model.masks_for(src, tgt))
    b = model(src, changed, *model.masks_for(src, changed))
    assert torch.equal(a[:, : t + 1], b[:, : t + 1]), "a future token changed a past output"
    assert not torch.equal(a[:, t + 1 :], b[:, t + 1 :]), "the check must be able to fail"


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_invariance_appending_source_pads_changes_nothing(norm_first: bool) -> None:
    model = Transformer(tiny(norm_first=norm_first)).eval()
    src, tgt = batch()
    padded = torch.cat([src, torch.full((3, 4), PAD)], dim=1)
    a = model(src, tgt, *model.masks_for(src, tgt))
    b = model(padded, tgt, *model.masks_for(padded, tgt))
    # The masked pads add exact zeros, but change the sums' lengths and so their order: the logits
    # may differ by rounding. 1e-6 was below that on an AMD EPYC (1.07e-6); this bound is 6e-5 for
    # logits of scale 3, while attending to the pads moves them by more than 1e-3 (below).
    c = model.config
    atol = reordering_atol(a, c.n_encoder_layers + c.n_decoder_layers + 1, max(c.d_model, c.d_ff, padded.size(1)))
    torch.testing.assert_close(a, b, atol=atol, rtol=0)
    # without the mask the pads are attended to, and the output changes: the check can fail
    attend_everything = torch.ones(1, 1, 1, padded.size(1), dtype=torch.bool)
    leaked = model(padded, tgt, attend_everything, model.masks_for(padded, tgt)[1])
    assert not torch.allclose(a, leaked, atol=max(1e-3, 10 * atol))


@pytest.mark.parametrize("norm_first", [False, True])
def test_masks_left_out_are_the_padding_and_causal_masks(norm_first: bool) -> None:
    model = Transformer(tiny(norm_first=norm_first)).eval()
    src, tgt = batch()
    src_mask, tgt_mask = model.masks_for(src, tgt)
    assert torch.equal(model(src, tgt), model(src, tgt, src_mask, CAUSAL))
    # CAUSAL (the fused causal kernel) in place of the target mask: the same logits at every real
    # target position (right padding), up to the other kernel's rounding
    expected, got = model(src, tgt, src_mask, tgt_mask), model(src, tgt)
    real = tgt != PAD
    c = model.config
    atol = reordering_atol(expected, c.n_encoder_layers + c.n_decoder_layers + 1, max(c.d_model, c.d_ff, tgt.size(1)))
    torch.testing.assert_close(got[real], expected[real], atol=atol, rtol=0)
    maps = model.attention_maps(src, tgt)
    future = maps.decoder_self[0][:, :, 0, 1:]  # what position 0 gives to later positions
    assert torch.count_nonzero(future) == 0, "without masks the decoder read the future"
    # the check can fail: an explicit all-True target mask lets position 0 see the future
    everything = torch.ones(1, 1, tgt.size(1), tgt.size(1), dtype=torch.bool)
    assert torch.count_nonzero(model.attention_maps(src, tgt, tgt_mask=everything).decoder_self[0][:, :, 0, 1:]) > 0


@pytest.mark.parametrize("norm_first", [False, True])
def test_causal_kernel_gives_the_explicit_masks_loss_and_gradients_on_right_padded_targets(norm_first: bool) -> None:
    """Training with CAUSAL (``is_causal=True``, no T x T mask) is training with target_mask: a real
    position sees no later one, so no pad; the pads' own outputs are not scored."""
    torch.manual_seed(0)
    model = Transformer(tiny(norm_first=norm_first, dropout=0.0))  # training mode, no randomness
    src, tgt = batch(B=4, S=7, T=8)
    tgt[2, 3:], tgt[3, 6:] = PAD, PAD  # right-padded targets of several lengths
    out = torch.roll(tgt, -1, dims=1).masked_fill(tgt == PAD, PAD)  # scored targets: pads not scored

    def loss_and_grads(tgt_mask: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logits = model(src, tgt, padding_mask(src, PAD), tgt_mask)
        loss = label_smoothed_cross_entropy(logits, out, 0.1, PAD, "sum")
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss_causal, grads_causal = loss_and_grads(None)  # the default: CAUSAL
    loss_explicit, grads_explicit = loss_and_grads(target_mask(tgt, PAD))
    c = model.config
    depth, width = c.n_encoder_layers + c.n_decoder_layers + 1, max(c.d_model, c.d_ff, tgt.size(1), int(out.ne(PAD).sum()))
    torch.testing.assert_close(loss_causal, loss_explicit, atol=reordering_atol(loss_explicit, depth, width), rtol=0)
    assert grads_causal.keys() == grads_explicit.keys()
    for name, grad in grads_explicit.items():  # twice the depth: the backward pass retraces every sum
        torch.testing.assert_close(grads_causal[name], grad, atol=reordering_atol(grad, 2 * depth, width), rtol=0, msg=name)
    # the check can fail: causal masking of a *left*-padded target lets real positions see the pads
    left = tgt.clone()
    left[2] = torch.roll(tgt[2], 5)  # row 2: its five pads, then its three tokens
    mask = target_mask(left, PAD)
    with torch.no_grad():
        a, b = model(src, left, padding_mask(src, PAD), mask), model(src, left, padding_mask(src, PAD), causal_mask(8))
    assert not torch.allclose(a[2, -1], b[2, -1], atol=1e-3)


def test_fully_masked_rows_produce_no_nan() -> None:
    model = Transformer(tiny()).eval()
    src, tgt = batch()
    src[2] = PAD  # an empty source: every key masked for every query
    logits = model(src, tgt, *model.masks_for(src, tgt))
    assert torch.isfinite(logits).all()


def test_tied_output_is_one_parameter_and_the_count_drops_by_V_times_D() -> None:
    untied = Transformer(tiny(tie_output=False))
    tied = Transformer(tiny(tie_output=True))
    assert tied.output_layer.weight is tied.tgt_embed.weight
    assert untied.output_layer.weight is not untied.tgt_embed.weight
    assert count_parameters(untied) - count_parameters(tied) == 11 * 16
    # a gradient step through the output layer moves the embedding: they are one tensor
    src, tgt = batch()
    tied(src, tgt, *tied.masks_for(src, tgt)).sum().backward()
    assert tied.tgt_embed.weight.grad is tied.output_layer.weight.grad


def test_shared_embeddings_need_a_joint_vocabulary_and_save_V_times_D() -> None:
    cfg = dict(src_vocab_size=20, tgt_vocab_size=20, d_model=16, n_heads=4, d_ff=32, n_encoder_layers=1, n_decoder_layers=1)
    separate = Transformer(TransformerConfig(**cfg, tie_output=True))
    shared = Transformer(TransformerConfig(**cfg, tie_output=True, share_embeddings=True))
    assert shared.src_embed is shared.tgt_embed and shared.output_layer.weight is shared.src_embed.weight
    assert count_parameters(separate) - count_parameters(shared) == 20 * 16
    with raises(ValueError, 'src_vocab_size=20', 'tgt_vocab_size=21'):
        TransformerConfig(**{**cfg, "tgt_vocab_size": 21}, share_embeddings=True)


def _expected_count(D: int, H: int, d_ff: int, N: int, V: int) -> int:
    """Table 3's model by hand: shared V x D embedding tied to the output, N + N Post-LN layers."""
    attention = 4 * (D * D + D)
    feed_forward = D * d_ff + d_ff + d_ff * D + D
    norm = 2 * D
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    return V * D + N * (encoder_layer + decoder_layer)


@pytest.mark.parametrize("preset, paper_millions", [("base", 65), ("big", 213)])
def test_table_3_parameter_counts(preset: str, paper_millions: int) -> None:
    cfg = TransformerConfig.from_preset(preset)
    p = PRESETS[preset]
    expected = _expected_count(p["d_model"], p["n_heads"], p["d_ff"], p["n_encoder_layers"], p["src_vocab_size"])
    with torch.device("meta"):  # count without allocating 200M floats
        model = Transformer(cfg)
    count = count_parameters(model)
    assert count == expected
    # base: 63,082,496 (-2.9% vs 65M); big: 214,245,376 (+0.6% vs 213M)
    assert abs(count / (paper_millions * 1e6) - 1) < 0.035


def test_paper_initialisation() -> None:
    model = Transformer(tiny(d_model=64, n_heads=4, tie_output=False))
    emb = model.src_embed.weight
    assert abs(emb.std().item() - 64**-0.5) < 0.1 * 64**-0.5
    w = model.encoder.layers[0].self_attn.q_proj.weight
    bound = math.sqrt(6 / (w.size(0) + w.size(1)))  # Xavier uniform
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert torch.equal(model.encoder.layers[0].feed_forward.linear1.bias, torch.zeros(32))


def test_cached_decode_equals_full_decode() -> None:
    model = Transformer(tiny(norm_first=True)).eval()
    src, tgt = batch()
    tgt[1, 4:] = 5
    src_mask, tgt_mask = model.masks_for(src, tgt)
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask, tgt_mask)
    with kv_cache(model):
        steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, start=t) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)


def test_attention_maps_cover_every_layer() -> None:
    model = Transformer(tiny()).eval()
    src, tgt = batch()
    maps = model.attention_maps(src, tgt, *model.masks_for(src, tgt))
    assert [w.shape for w in maps.encoder_self] == [(3, 4, 7, 7)] * 2
    assert [w.shape for w in maps.decoder_cross] == [(3, 4, 6, 7)] * 2
    assert maps.encoder_self[0][0, :, :, 5:].abs().sum() == 0, "padded source keys get no weight"


def test_state_dict_and_config_round_trip() -> None:
    model = Transformer(tiny(share_embeddings=False)).eval()
    clone = Transformer(TransformerConfig.from_dict(model.config.to_dict())).eval()
    clone.load_state_dict(model.state_dict())
    src, tgt = batch()
    assert torch.equal(model(src, tgt, *model.masks_for(src, tgt)), clone(src, tgt, *clone.masks_for(src, tgt)))


def test_bad_config_is_rejected_with_the_value_and_the_fix() -> None:
    with raises(ValueError, 'd_model=510', 'n_heads=8', 'd_model=504', '512'):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=510, n_heads=8)
    with raises(ValueError, "'huge'"):
        TransformerConfig.from_preset("huge")
    with raises(TypeError, "'d_modle'"):
        TransformerConfig.from_preset("tiny", src_vocab_size=5, tgt_vocab_size=5, d_modle=8)
    with raises(ValueError, "dropout", 1.5):
        tiny(dropout=1.5)
    with raises(ValueError, 'n_heads'):
        tiny(n_heads=0)
    with raises(ValueError, "positional", "'rotary'"):
        tiny(positional="rotary")


def test_a_sequence_too_long_for_the_positions_is_named() -> None:
    """The one check a forward pass keeps reads only a length, no tensor value: a sequence longer
    than the positional table (ids are checked where data enter, not in every forward)."""
    model = Transformer(tiny(max_len=8)).eval()
    _, tgt = batch(S=7, T=6)
    with raises(ValueError, "0..8", "max_len=8"):
        model(torch.randint(1, 13, (1, 9)), tgt[:1])


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_valid_config(name: str) -> None:
    cfg = TransformerConfig.from_preset(name, src_vocab_size=37000, tgt_vocab_size=37000)
    assert cfg.d_model % cfg.n_heads == 0


@pytest.mark.parametrize("positional", ["rope", "alibi", "relative"])
def test_torch_reference_refuses_positions_it_cannot_represent(positional: str) -> None:
    model = Transformer(tiny(positional=positional))
    with raises(ValueError, f"positional={positional!r}"):
        TorchTransformer(model)


def test_grouped_query_attention_is_one_config_field() -> None:
    """n_kv_heads reaches every attention of the model (self and cross, encoder and decoder), and only
    the key/value projections shrink."""
    full, grouped = Transformer(tiny()), Transformer(tiny(n_kv_heads=2))
    attentions = [m for m in grouped.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attentions) == 6 and all(a.n_kv_heads == 2 and a.n_heads == 4 for a in attentions)
    d, kv = grouped.config.d_model, 2 * grouped.config.d_model // 4  # 2 of 4 heads' width
    assert count_parameters(full) - count_parameters(grouped) == 6 * 2 * (d * (d - kv) + (d - kv))
    with raises(ValueError, "n_kv_heads=3", "n_heads=4"):
        tiny(n_kv_heads=3)


def test_modern_options_are_checked_where_the_config_is_made() -> None:
    """norm, activation and qk_norm (chapter 7) are refused with the offending value, from code and
    from a file alike; the other switches are True or False too, never a truthy stand-in."""
    with raises(ValueError, "norm", "'batchnorm'", "rmsnorm"):
        tiny(norm="batchnorm")
    with raises(ValueError, "activation", "'geglu'", "swiglu"):
        tiny(activation="geglu")
    for name, value in [("qk_norm", "yes"), ("qk_norm", 1), ("norm_first", None), ("tie_output", "False")]:
        with raises(ValueError, name, repr(value)):
            tiny(**{name: value})
    with raises(ValueError, "'RMSNorm'"):
        TransformerConfig.from_dict({**tiny().to_dict(), "norm": "RMSNorm"})
    modern = tiny(norm="rmsnorm", activation="swiglu", qk_norm=True)
    assert TransformerConfig.from_dict(modern.to_dict()) == modern
    old_file = {k: v for k, v in tiny().to_dict().items() if k not in ("norm", "qk_norm")}
    assert TransformerConfig.from_dict(old_file) == tiny(), "a config saved before these fields reads as before"


def test_torch_reference_refuses_modern_options() -> None:
    for option, named in [({"norm": "rmsnorm"}, "RMSNorm"), ({"activation": "swiglu"}, "GatedFeedForward"),
                          ({"qk_norm": True}, "QK-norm")]:
        with raises(ValueError, named):
            TorchTransformer(Transformer(tiny(**option)))


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_an_empty_batch_gives_empty_logits(n_kv_heads: int | None) -> None:
    """(0, L) ids: "cannot reshape tensor of 0 elements" since grouped-query attention split the heads
    with view(B, L, -1, width) (issue 43); an empty batch is a batch, as in torch.nn layers."""
    config = TransformerConfig.from_preset("tiny", src_vocab_size=10, tgt_vocab_size=12, n_kv_heads=n_kv_heads)
    model = Transformer(config)
    logits = model(torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, 3, dtype=torch.long))
    assert logits.shape == (0, 3, 12)
    logits.sum().backward()  # and the gradient of nothing is zeros, not an error
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_stacked_projections_translate_as_the_three_projections_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped model's file is unchanged: it holds the three projections under their old names
    (``q_proj.weight``, ...), which loading stacks into ``in_proj_weight``. Made by one product
    (self-attention) or two (cross-attention) instead of three, its translations are the same."""
    from safetensors import safe_open
    from transformer_lib import pretrained

    with safe_open(str(pretrained.shipped_path()), "pt") as f:
        names = set(f.keys())
    assert "encoder.layers.0.self_attn.q_proj.weight" in names and not any("in_proj" in n for n in names)
    translator = pretrained.load()
    sentences = ["Ein Mann fährt mit dem Fahrrad die Straße entlang.", "Zwei Hunde spielen im Schnee.",
                 "Eine Frau in einem roten Kleid singt auf einer Bühne.", "Kinder spielen im Park."]
    stacked = translator.translate(sentences, beam_size=1), translator.translate(sentences, beam_size=4)
    assert translator.model.encoder.layers[0].self_attn.packed

    def three_products(self: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        return self.project_query(query), *self.project_key_value(key, value)

    def separately(self: MultiHeadAttention, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        _, k_proj, v_proj = self.projections()
        return self.key_norm(self.split_heads(k_proj(key), self.d_k)), self.split_heads(v_proj(value), self.d_v)

    monkeypatch.setattr(MultiHeadAttention, "project", three_products)  # three products, as before
    monkeypatch.setattr(MultiHeadAttention, "project_key_value", separately)
    assert (translator.translate(sentences, beam_size=1), translator.translate(sentences, beam_size=4)) == stacked

"""Tests of transformer_lib.decoding: the KV cache changes nothing but speed, beam width 1 is greedy,
every sequence stops at its own <eos>, sampling is reproducible, and bad arguments fail clearly."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from errors import raises

from transformer_lib.beam_search import beam_search, gnmt_length_penalty
from transformer_lib.decoding import (
    greedy_decode, next_token_logits, sample, sampling_distribution
)
from transformer_lib.kv_cache import kv_cache
from transformer_lib.masking import causal_mask
from transformer_lib.model import Transformer
from transformer_lib.config import TransformerConfig

PAD, BOS, EOS = 0, 2, 3
V = 14  # 4 specials + 10 ordinary tokens
NEVER = None  # no end token: decoding runs to max_new_tokens (<eos> is then a token like any other)

CONFIGS = {
    "pre-LN": dict(norm_first=True),
    "post-LN": dict(norm_first=False),
    "learned-positions-untied": dict(positional="learned", tie_output=False),
}
SEEDS = [0, 1, 2]


def make_model(seed: int, vocab_size: int = V, **overrides) -> Transformer:
    torch.manual_seed(seed)
    settings = dict(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=32, n_heads=4,
        n_encoder_layers=2, n_decoder_layers=2, d_ff=64, dropout=0.1, max_len=32,
    )
    config = TransformerConfig(**{**settings, **overrides})
    return Transformer(config).eval()


def padded_batch(seed: int, lengths=(9, 6, 3, 7), vocab_size: int = V) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources of different lengths, padded with PAD: ``(src (B, S), src_mask (B, 1, 1, S))``."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(4, vocab_size, (n,), generator=g)
    return src, (src != PAD)[:, None, None, :]


def reverse_batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The reverse task: source 2..6 tokens, target <bos> reversed source <eos>, both padded."""
    lengths = torch.randint(2, 7, (n,), generator=g)
    width = int(lengths.max())
    src = torch.full((n, width), PAD)
    tgt = torch.full((n, width + 2), PAD)
    for i, length in enumerate(lengths.tolist()):
        tokens = torch.randint(4, V, (length,), generator=g)
        src[i, :length] = tokens
        tgt[i, 0], tgt[i, 1 : length + 1], tgt[i, length + 1] = BOS, tokens.flip(0), EOS
    return src, tgt


@pytest.fixture(scope="module")
def trained_model() -> Transformer:
    """A model trained briefly on the reverse task: its outputs vary and end at different steps."""
    torch.manual_seed(0)
    model = make_model(0, dropout=0.0)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        src, tgt = reverse_batch(32, g)
        src_mask, tgt_mask = model.masks_for(src, tgt[:, :-1])
        logits = model(src, tgt[:, :-1], src_mask, tgt_mask)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt[:, 1:].reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def decode_kwargs(max_new_tokens: int = 12, eos_id: int = EOS) -> dict:
    return dict(max_new_tokens=max_new_tokens, bos_id=BOS, eos_id=eos_id, pad_id=PAD)


# --------------------------------------------------------------------------------------------------
# The key/value cache


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", SEEDS)
def test_cached_steps_equal_the_full_forward_pass(seed: int, config: str) -> None:
    """Step by step, with or without the cache, the logits are those of one teacher-forced pass."""
    model = make_model(seed, **CONFIGS[config])
    src, src_mask = padded_batch(seed)
    g = torch.Generator().manual_seed(seed + 100)
    tgt = torch.randint(4, V, (src.size(0), 10), generator=g)
    tgt[:, 0] = BOS
    with torch.no_grad():
        full = model(src, tgt, src_mask, causal_mask(tgt.size(1)))  # (B, T, V), before the cache exists
        memory = model.encode(src, src_mask)
        for t in range(tgt.size(1)):
            uncached = next_token_logits(model, tgt[:, : t + 1], memory, src_mask)  # (B, V)
            torch.testing.assert_close(uncached, full[:, t], atol=1e-5, rtol=0)
    with torch.no_grad(), kv_cache(model) as cache:  # inside, every call adds to the cache
        for t in range(tgt.size(1)):
            cached = next_token_logits(model, tgt[:, t : t + 1], memory, src_mask, cache)  # (B, V)
            torch.testing.assert_close(cached, full[:, t], atol=1e-5, rtol=0)
            assert cache.length == t + 1


def test_cache_accepts_several_new_tokens_at_once() -> None:
    """A prompt of several tokens goes in one call; later tokens continue one by one."""
    model = make_model(0)
    src, src_mask = padded_batch(0)
    tgt = torch.randint(4, V, (src.size(0), 8))
    tgt[:, 0] = BOS
    with torch.no_grad():
        full = model(src, tgt, src_mask, causal_mask(tgt.size(1)))  # (B, T, V), before the cache exists
        memory = model.encode(src, src_mask)
    with torch.no_grad(), kv_cache(model) as cache:
        logits = next_token_logits(model, tgt[:, :5], memory, src_mask, cache)
        torch.testing.assert_close(logits, full[:, 4], atol=1e-5, rtol=0)
        for t in range(5, 8):
            logits = next_token_logits(model, tgt[:, t : t + 1], memory, src_mask, cache)
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=0)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_with_cache_equals_greedy_without(seed: int, config: str) -> None:
    model = make_model(seed, **CONFIGS[config])
    src, src_mask = padded_batch(seed)
    cached = greedy_decode(model, src, src_mask, **decode_kwargs(max_new_tokens=15, eos_id=NEVER))
    uncached = greedy_decode(model, src, src_mask, **decode_kwargs(max_new_tokens=15, eos_id=NEVER), use_cache=False)
    assert cached.shape == (src.size(0), 15)
    assert torch.equal(cached, uncached)
    # ... and the logits along the decoded path agree to 1e-5 at every step.
    prefix = torch.cat([torch.full((src.size(0), 1), BOS), cached], dim=1)  # (B, 1 + T)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        steps_full = [next_token_logits(model, prefix[:, : t + 1], memory, src_mask) for t in range(prefix.size(1))]
    with torch.no_grad(), kv_cache(model) as cache:
        for t in range(prefix.size(1)):
            step_cached = next_token_logits(model, prefix[:, t : t + 1], memory, src_mask, cache)
            torch.testing.assert_close(step_cached, steps_full[t], atol=1e-5, rtol=0)


def test_greedy_with_cache_equals_greedy_without_on_a_trained_model(trained_model: Transformer) -> None:
    src, _ = reverse_batch(16, torch.Generator().manual_seed(5))
    src_mask = (src != PAD)[:, None, None, :]
    cached = greedy_decode(trained_model, src, src_mask, **decode_kwargs())
    uncached = greedy_decode(trained_model, src, src_mask, **decode_kwargs(), use_cache=False)
    assert torch.equal(cached, uncached)


# --------------------------------------------------------------------------------------------------
# Greedy decoding: stopping, batching, the encoder, the model's mode


def test_each_sequence_stops_at_its_own_eos(trained_model: Transformer) -> None:
    src, _ = reverse_batch(16, torch.Generator().manual_seed(3))
    src_mask = (src != PAD)[:, None, None, :]
    # With an <eos> the model cannot produce, every row runs the full 12 steps ...
    unstopped = greedy_decode(trained_model, src, src_mask, **decode_kwargs(eos_id=NEVER))
    assert unstopped.shape == (16, 12)
    out = greedy_decode(trained_model, src, src_mask, **decode_kwargs())
    stops = []
    for row, full_row in zip(out.tolist(), unstopped.tolist()):
        # ... and with the real one, each row is that run cut after its first <eos>, then padding.
        stop = full_row.index(EOS) + 1 if EOS in full_row else len(full_row)
        stops.append(stop)
        assert row[:stop] == full_row[:stop]
        assert all(token == PAD for token in row[stop:])
    assert len(set(stops)) > 1, "the rows should stop at different steps for this test to mean something"
    assert out.size(1) == max(stops), "the batch stops as soon as its last row has stopped"


@pytest.mark.parametrize("seed", SEEDS)
def test_padding_and_batching_do_not_change_the_output(seed: int) -> None:
    """Each sentence decoded in a padded batch gets the tokens it gets alone."""
    model = make_model(seed)
    lengths = (9, 6, 3, 7)
    src, src_mask = padded_batch(seed, lengths)
    batched = greedy_decode(model, src, src_mask, **decode_kwargs(eos_id=NEVER))
    for i, n in enumerate(lengths):
        alone = greedy_decode(model, src[i : i + 1, :n], None, **decode_kwargs(eos_id=NEVER))
        assert torch.equal(batched[i : i + 1], alone)


@pytest.mark.parametrize(
    "decode",
    [
        lambda m, s, k: greedy_decode(m, s, k, **decode_kwargs()),
        lambda m, s, k: greedy_decode(m, s, k, **decode_kwargs(), use_cache=False),
        lambda m, s, k: beam_search(m, s, k, beam_size=3, **decode_kwargs()),
        lambda m, s, k: sample(m, s, k, **decode_kwargs(), generator=torch.Generator().manual_seed(0)),
    ],
    ids=["greedy", "greedy-uncached", "beam", "sample"],
)
def test_the_encoder_runs_once(decode, monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_model(0)
    calls = []
    original = model.encode
    monkeypatch.setattr(model, "encode", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    src, src_mask = padded_batch(0)
    decode(model, src, src_mask)
    assert len(calls) == 1


def test_decoding_uses_eval_mode_and_restores_the_mode() -> None:
    model = make_model(0)  # dropout 0.1
    src, src_mask = padded_batch(0)
    expected = greedy_decode(model, src, src_mask, **decode_kwargs(eos_id=NEVER))
    model.train()
    assert torch.equal(greedy_decode(model, src, src_mask, **decode_kwargs(eos_id=NEVER)), expected)
    assert model.training
    model.eval()
    greedy_decode(model, src, src_mask, **decode_kwargs())
    assert not model.training


def test_greedy_reaches_max_len_equal_to_the_positional_table() -> None:
    model = make_model(0)  # config.max_len = 32
    src, src_mask = padded_batch(0)
    out = greedy_decode(model, src, src_mask, **decode_kwargs(max_new_tokens=32, eos_id=NEVER))
    assert out.shape == (src.size(0), 32)


# --------------------------------------------------------------------------------------------------
# Beam search


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", SEEDS)
def test_beam_width_one_is_greedy(seed: int, config: str) -> None:
    model = make_model(seed, **CONFIGS[config])
    src, src_mask = padded_batch(seed)
    for eos_id in (EOS, NEVER):
        greedy = greedy_decode(model, src, src_mask, **decode_kwargs(max_new_tokens=15, eos_id=eos_id))
        beam = beam_search(model, src, src_mask, beam_size=1, **decode_kwargs(max_new_tokens=15, eos_id=eos_id))
        assert torch.equal(beam.sequences, greedy)


def test_beam_width_one_is_greedy_on_a_trained_model(trained_model: Transformer) -> None:
    src, _ = reverse_batch(16, torch.Generator().manual_seed(4))
    src_mask = (src != PAD)[:, None, None, :]
    greedy = greedy_decode(trained_model, src, src_mask, **decode_kwargs())
    beam = beam_search(trained_model, src, src_mask, beam_size=1, **decode_kwargs())
    assert torch.equal(beam.sequences, greedy)


@pytest.mark.parametrize("seed", SEEDS)
def test_beam_search_with_cache_equals_without(seed: int) -> None:
    model = make_model(seed)
    src, src_mask = padded_batch(seed)
    cached = beam_search(model, src, src_mask, beam_size=4, **decode_kwargs())
    uncached = beam_search(model, src, src_mask, beam_size=4, **decode_kwargs(), use_cache=False)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.scores, uncached.scores, atol=1e-5, rtol=0)


def output_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over the tokens a decoder may output: <bos> and <pad> never are."""
    return F.log_softmax(logits.index_fill(-1, torch.tensor([BOS, PAD]), float("-inf")), dim=-1)


def sequence_log_prob(model: Transformer, src: torch.Tensor, tokens: list[int]) -> float:
    """Teacher-forced log P(tokens | src) of one sentence, the reference beam search must reproduce."""
    tgt = torch.tensor([[BOS, *tokens]])
    with torch.no_grad():
        logits = model(src, tgt[:, :-1], None, causal_mask(len(tokens)))  # (1, T, V)
    return float(output_log_probs(logits)[0, torch.arange(len(tokens)), tgt[0, 1:]].sum())


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_wide_beam_finds_the_best_sequence_by_brute_force(seed: int, alpha: float) -> None:
    """With the beam wider than the number of prefixes, nothing is pruned: beam search must return
    the best of all sequences, found here by scoring every one of them."""
    vocab_size, max_len = 6, 3  # 6 ids (4 specials + 2 words); sequences of 1..3 tokens
    model = make_model(seed, vocab_size=vocab_size)
    src = torch.tensor([[4, 5, 5, 4]])
    result = beam_search(
        model, src, None, beam_size=200, max_new_tokens=max_len, bos_id=BOS, eos_id=EOS, pad_id=PAD,
        length_penalty=alpha,
    )
    candidates = []
    words = [i for i in range(vocab_size) if i not in (EOS, BOS, PAD)]  # what may come before <eos>
    for length in range(1, max_len + 1):
        for body in itertools.product(words, repeat=length - 1):
            candidates.append([*body, EOS])  # ends with <eos>
        if length == max_len:
            candidates += [list(t) for t in itertools.product(words, repeat=length)]
    scored = [(sequence_log_prob(model, src, c) / gnmt_length_penalty(len(c), alpha), c) for c in candidates]
    best_score, best = max(scored)
    assert result.hypotheses[0][0].tokens == best
    assert result.scores[0].item() == pytest.approx(best_score, abs=1e-5)


def reference_beam_search(model, src, beam_size, max_len, alpha):
    """Beam search for one sentence, written plainly (no batch, no cache, Python lists), with the
    same rules as ``beam_search``: 2K candidates, an <eos> candidate finishes if it ranks in the top
    K, stop at K finished, finish the open ones at max_len."""
    alive = [([], 0.0)]  # (tokens, summed log-prob)
    finished = []
    for _ in range(max_len):
        candidates = []
        for tokens, log_prob in alive:
            with torch.no_grad():
                logits = model(src, torch.tensor([[BOS, *tokens]]), None, causal_mask(len(tokens) + 1))
            step = output_log_probs(logits[0, -1]).tolist()
            candidates += [(log_prob + step[v], tokens + [v]) for v in range(len(step))]
        candidates.sort(key=lambda c: -c[0])
        top = candidates[: 2 * beam_size]
        for rank, (log_prob, tokens) in enumerate(top):
            if tokens[-1] == EOS and rank < beam_size and len(finished) < beam_size:
                finished.append((tokens, log_prob))
        alive = [(tokens, log_prob) for log_prob, tokens in top if tokens[-1] != EOS][:beam_size]
        if len(finished) >= beam_size:
            break
    else:
        finished += alive
    scored = [(lp / gnmt_length_penalty(len(t), alpha), t, lp) for t, lp in finished]
    return sorted(scored, key=lambda h: -h[0])[:beam_size]


@pytest.mark.parametrize("beam_size", [2, 4])
@pytest.mark.parametrize("model_kind", ["trained", "random"])
def test_batched_beam_search_matches_a_plain_reference(trained_model, model_kind: str, beam_size: int) -> None:
    model = trained_model if model_kind == "trained" else make_model(1)
    src, _ = reverse_batch(4, torch.Generator().manual_seed(9))
    src_mask = (src != PAD)[:, None, None, :]
    result = beam_search(model, src, src_mask, beam_size=beam_size, **decode_kwargs(max_new_tokens=8))
    for b in range(src.size(0)):
        one_src = src[b : b + 1, : int((src[b] != PAD).sum())]
        expected = reference_beam_search(model, one_src, beam_size, max_len=8, alpha=0.6)
        got = result.hypotheses[b]
        assert [h.tokens for h in got] == [tokens for _, tokens, _ in expected]
        for h, (score, _, log_prob) in zip(got, expected):
            assert h.score == pytest.approx(score, abs=1e-4)
            assert h.log_prob == pytest.approx(log_prob, abs=1e-4)


def test_beam_hypotheses_are_scored_sorted_and_consistent(trained_model: Transformer) -> None:
    src, _ = reverse_batch(6, torch.Generator().manual_seed(6))
    src_mask = (src != PAD)[:, None, None, :]
    alpha = 0.6
    result = beam_search(trained_model, src, src_mask, beam_size=4, **decode_kwargs(), length_penalty=alpha)
    assert result.sequences.size(0) == 6 and result.scores.shape == (6,)
    for b, hypotheses in enumerate(result.hypotheses):
        assert 1 <= len(hypotheses) <= 4
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        best = hypotheses[0]
        row = result.sequences[b].tolist()
        assert row[: len(best.tokens)] == best.tokens and all(t == PAD for t in row[len(best.tokens) :])
        assert result.scores[b].item() == pytest.approx(best.score, abs=1e-6)
        for h in hypotheses:
            assert h.tokens.count(EOS) <= 1 and (EOS not in h.tokens or h.tokens[-1] == EOS)
            assert h.score == pytest.approx(h.log_prob / gnmt_length_penalty(len(h.tokens), alpha))
            one_src = src[b : b + 1, : int((src[b] != PAD).sum())]
            assert h.log_prob == pytest.approx(sequence_log_prob(trained_model, one_src, h.tokens), abs=1e-4)


def test_beam_search_stops_each_sentence_and_pads(trained_model: Transformer) -> None:
    src, _ = reverse_batch(16, torch.Generator().manual_seed(7))
    src_mask = (src != PAD)[:, None, None, :]
    result = beam_search(trained_model, src, src_mask, beam_size=3, **decode_kwargs())
    lengths = []
    for row in result.sequences.tolist():
        assert EOS in row, "a model trained on the reverse task ends its outputs"
        stop = row.index(EOS) + 1
        lengths.append(stop)
        assert all(t == PAD for t in row[stop:])
    assert len(set(lengths)) > 1
    assert result.sequences.size(1) == max(lengths)


def test_gnmt_length_penalty() -> None:
    assert gnmt_length_penalty(1, 0.6) == 1.0  # ((5 + 1) / 6) ** alpha
    assert gnmt_length_penalty(7, 1.0) == pytest.approx(2.0)
    assert gnmt_length_penalty(25, 0.0) == 1.0
    assert gnmt_length_penalty(13, 0.6) == pytest.approx(3.0**0.6)


# --------------------------------------------------------------------------------------------------
# Sampling


def test_seeded_sampling_is_reproducible_and_leaves_the_global_rng_alone() -> None:
    model = make_model(0)
    src, src_mask = padded_batch(0)

    def draw(seed: int) -> torch.Tensor:
        return sample(model, src, src_mask, **decode_kwargs(max_new_tokens=15), temperature=2.0,
                      generator=torch.Generator().manual_seed(seed))

    state = torch.random.get_rng_state()
    first = draw(1)
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(12345)  # the global seed must not matter
    assert torch.equal(draw(1), first)
    assert not torch.equal(draw(2), first)


@pytest.mark.parametrize("use_cache", [True, False])
def test_sampling_with_top_k_1_is_greedy(trained_model: Transformer, use_cache: bool) -> None:
    src, _ = reverse_batch(8, torch.Generator().manual_seed(8))
    src_mask = (src != PAD)[:, None, None, :]
    greedy = greedy_decode(trained_model, src, src_mask, **decode_kwargs())
    sampled = sample(trained_model, src, src_mask, **decode_kwargs(), top_k=1, use_cache=use_cache,
                     generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, greedy)


def test_sampling_distribution_temperature() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    torch.testing.assert_close(sampling_distribution(logits), logits.softmax(-1))
    torch.testing.assert_close(sampling_distribution(logits, temperature=0.5), (logits * 2).softmax(-1))
    assert sampling_distribution(logits, temperature=0.01)[0] > 0.999  # towards greedy
    flat = sampling_distribution(logits, temperature=100.0)
    assert flat.max() - flat.min() < 0.01  # towards uniform


def test_sampling_distribution_top_k_and_top_p() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()
    torch.testing.assert_close(sampling_distribution(logits, top_k=2), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    # top-p keeps the fewest most likely tokens whose mass reaches p
    torch.testing.assert_close(sampling_distribution(logits, top_p=0.75), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    torch.testing.assert_close(sampling_distribution(logits, top_p=0.85), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)
    torch.testing.assert_close(sampling_distribution(logits, top_p=0.1), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(sampling_distribution(logits, top_p=1.0), probs)
    # both: top-k first, then top-p on what is left
    torch.testing.assert_close(
        sampling_distribution(logits, top_k=3, top_p=0.8), torch.tensor([0.625, 0.375, 0.0, 0.0])
    )
    # works on a batch, row by row
    batch = torch.stack([logits, logits.flip(0)])  # (2, V)
    out = sampling_distribution(batch, top_k=1)
    assert out.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]


def test_sampled_token_frequencies_follow_the_distribution() -> None:
    logits = torch.tensor([[1.0, 0.5, 0.0, -3.0]])
    probs = sampling_distribution(logits, top_p=0.9)  # drops the last token
    draws = torch.multinomial(probs.expand(20000, -1), 1, replacement=True, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws.squeeze(1), minlength=4).float() / 20000
    torch.testing.assert_close(freq, probs[0], atol=0.015, rtol=0)
    assert freq[3] == 0


# --------------------------------------------------------------------------------------------------
# Clear errors


@pytest.mark.parametrize(
    "call, error, named",
    [
        (lambda m, s: greedy_decode(m, s, None, **decode_kwargs(max_new_tokens=33)), ValueError,
         ["max_new_tokens=33", "config.max_len=32"]),
        (lambda m, s: greedy_decode(m, s, None, **decode_kwargs(max_new_tokens=0)), ValueError, ["max_new_tokens", 0]),
        (lambda m, s: greedy_decode(m, s[0], None, **decode_kwargs()), ValueError, ["src", "(9,)"]),
        (lambda m, s: greedy_decode(m, s.float(), None, **decode_kwargs()), TypeError, ["src", "torch.float32"]),
        (lambda m, s: greedy_decode(m, s, None, max_new_tokens=5, bos_id=-1, eos_id=EOS, pad_id=PAD), ValueError,
         ["bos_id", -1]),
        (lambda m, s: beam_search(m, s, None, beam_size=0, **decode_kwargs()), ValueError, ["beam_size", 0]),
        (lambda m, s: beam_search(m, s, None, beam_size=2, **decode_kwargs(), length_penalty=-1), ValueError,
         ["length_penalty", -1]),
        (lambda m, s: sample(m, s, None, **decode_kwargs(), temperature=0), ValueError, ["temperature", 0]),
        (lambda m, s: sample(m, s, None, **decode_kwargs(), top_k=0), ValueError, ["top_k", 0]),
        (lambda m, s: sample(m, s, None, **decode_kwargs(), top_p=1.5), ValueError, ["top_p", 1.5]),
    ],
    ids=["max_new_tokens-too-long", "max_new_tokens-zero", "src-1d", "src-float", "bad-id", "beam-zero",
         "alpha-negative", "temperature-zero", "top_k-zero", "top_p-above-one"],
)
def test_bad_arguments_fail_naming_the_value(call, error, named) -> None:
    model = make_model(0)
    src, _ = padded_batch(0)
    with raises(error, *named):
        call(model, src)


def test_length_penalty_is_a_float_ratio() -> None:
    """Guard the formula's constants: GNMT's lp(|Y|) = (5 + |Y|)^alpha / (5 + 1)^alpha."""
    for length in (1, 4, 13, 50):
        assert gnmt_length_penalty(length, 0.6) == pytest.approx((5 + length) ** 0.6 / 6**0.6)
        assert math.isfinite(gnmt_length_penalty(length, 2.0))


def favouring_specials(seed: int) -> Transformer:
    """A model whose output layer adds +20 to the scores of <bos> and <pad>: left alone, every
    decoder would output them (an undertrained model's favourites)."""
    model = make_model(seed, tie_output=False)
    biased = torch.nn.Linear(model.config.d_model, V)
    with torch.no_grad():
        biased.weight.copy_(model.output_layer.weight)
        biased.bias.zero_()
        biased.bias[[BOS, PAD]] = 20.0
    model.output_layer = biased
    return model


@pytest.mark.parametrize("seed", SEEDS)
def test_decoders_never_output_bos_or_pad(seed: int) -> None:
    model = favouring_specials(seed)
    src, src_mask = padded_batch(seed)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        first = next_token_logits(model, torch.full((src.size(0), 1), BOS), memory, src_mask)
    assert set(first.argmax(-1).tolist()) <= {BOS, PAD}, "the check must be able to fail"
    kwargs = decode_kwargs(max_new_tokens=10)
    outputs = {
        "greedy": greedy_decode(model, src, src_mask, **kwargs),
        "sample": sample(model, src, src_mask, **kwargs, generator=torch.Generator().manual_seed(seed)),
        "beam 4": beam_search(model, src, src_mask, beam_size=4, **kwargs).sequences,
        "beam 200": beam_search(model, src, src_mask, beam_size=200, **kwargs).sequences,
    }
    for name, out in outputs.items():
        for row in out.tolist():
            body = row[: row.index(EOS)] if EOS in row else row
            assert BOS not in body and PAD not in body, (name, row)

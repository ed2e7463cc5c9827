"""Chapter 1's Table 1 measurements: the counts match the paper's formulas, the layers agree."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_lib.book import layer_costs
from transformer_lib.book.layer_costs import (
    ConvLayer,
    UnrolledGRU,
    forward_flops,
    layers_to_cross,
    make_layer,
    sequential_steps,
    time_layers,
)


@pytest.mark.parametrize("kind", layer_costs.LAYERS)
def test_every_layer_keeps_the_shape(kind: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 7, 8)
    assert make_layer(kind, 8, n_heads=2).eval()(x).shape == (2, 7, 8)


def test_the_convolution_is_causal() -> None:
    torch.manual_seed(0)
    layer, x = ConvLayer(4, kernel_size=3), torch.randn(1, 9, 4)
    changed = x.clone()
    changed[:, 5:] = torch.randn(1, 4, 4)  # the future of position 4
    with torch.no_grad():
        assert torch.equal(layer(x)[:, :5], layer(changed)[:, :5])
        assert not torch.allclose(layer(x)[:, 5:], layer(changed)[:, 5:])


def test_the_unrolled_gru_equals_nn_gru_and_takes_one_step_per_position() -> None:
    torch.manual_seed(0)
    recurrent = make_layer("recurrent", 6)
    unrolled, x = UnrolledGRU(recurrent), torch.randn(3, 11, 6)
    with torch.no_grad():
        assert torch.allclose(unrolled(x), recurrent(x), atol=1e-6)
    assert sequential_steps(unrolled, x) == 11
    assert sequential_steps(make_layer("self-attention", 6, n_heads=2), x) == 1
    assert sequential_steps(make_layer("convolutional", 6), x) == 1


@pytest.mark.parametrize(("n", "kernel_size"), [(2, 2), (9, 3), (17, 3), (17, 5), (20, 4)])
def test_a_convolution_needs_ceil_n_minus_1_over_k_minus_1_layers(n: int, kernel_size: int) -> None:
    layers = layers_to_cross(lambda i: ConvLayer(4, kernel_size), n, 4)
    assert layers == math.ceil((n - 1) / (kernel_size - 1))


@pytest.mark.parametrize(("n", "kernel_size"), [(9, 3), (10, 3), (28, 3), (17, 2)])
def test_dilated_convolutions_need_log_k_n_layers(n: int, kernel_size: int) -> None:
    layers = layers_to_cross(lambda i: ConvLayer(4, kernel_size, dilation=kernel_size**i), n, 4)
    assert kernel_size ** (layers - 1) < n <= kernel_size**layers  # receptive field k^L


@pytest.mark.parametrize("kind", ["self-attention", "recurrent"])
def test_attention_and_recurrence_cross_in_one_layer(kind: str) -> None:
    assert layers_to_cross(lambda i: make_layer(kind, 4, n_heads=2), 40, 4) == 1


def test_layers_to_cross_gives_up_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="max_layers=3"):
        layers_to_cross(lambda i: ConvLayer(4, 2), 10, 4, max_layers=3)


def test_bad_layer_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown layer kind 'lstm'"):
        make_layer("lstm", 8)
    with pytest.raises(ValueError, match="kernel_size=1"):
        ConvLayer(8, kernel_size=1)


def test_time_layers_times_each_layer_at_each_length() -> None:
    timings = time_layers([4, 8], 8, n_heads=2, repeats=1)
    assert sorted(zip(timings.n, timings.layer)) == sorted((n, k) for n in (4, 8) for k in layer_costs.LAYERS)
    assert (timings.milliseconds > 0).all()
    lines = layer_costs.describe_timings(timings)
    assert lines[-1].startswith("from n = 4 to 8 (2x longer)")
    table = layer_costs.timings_table(timings).splitlines()
    assert table[0].split() == ["n", "attention", "GRU", "conv"]
    assert [row.split()[0] for row in table[1:]] == ["4", "8"]


def test_describe_timings_finds_where_the_curves_cross() -> None:
    import pandas as pd

    times = {"self-attention": [1, 2, 8, 32], "recurrent": [4, 8, 4, 16], "convolutional": [2, 1, 1, 1]}
    frame = pd.DataFrame([{"n": n, "layer": k, "milliseconds": float(ms[i])}
                          for k, ms in times.items() for i, n in enumerate([16, 32, 64, 128])])
    lines = layer_costs.describe_timings(frame)
    assert "self-attention is faster up to n = 32, recurrent from n = 64 on" in lines
    assert "self-attention is faster up to n = 16, convolutional from n = 32 on" in lines
    assert "convolutional is faster than recurrent at every n measured" in lines
    assert layer_costs.timings_table(frame).splitlines()[1].split() == ["16", "1", "4", "2"]
    assert lines[-1] == ("from n = 16 to 128 (8x longer) the time grows "
                         "32x for self-attention, 4x for recurrent, 0.5x for convolutional")


@pytest.mark.parametrize("n", [4, 8, 16])
def test_operation_counts_match_the_formulas_attention_is_cheaper_below_n_equals_d(n: int) -> None:
    d = 8
    attention, recurrent = forward_flops("self-attention", n, d, n_heads=2), forward_flops("recurrent", n, d)
    assert attention == 4 * n * n * d + 8 * n * d * d  # scores and mixing, four projections
    assert recurrent == 12 * n * d * d  # three gates, two d x d products each, per position
    assert (attention < recurrent) == (n < d)


def test_the_timings_chart_draws_every_measurement_with_the_lengths_as_ticks() -> None:
    import pandas as pd

    frame = pd.DataFrame([{"n": n, "layer": k, "milliseconds": 0.5 * n}
                          for n in (16, 1024, 8192) for k in layer_costs.LAYERS])
    spec = layer_costs.timings_chart(frame).to_dict()  # validates against the Vega-Lite schema
    rows = spec["datasets"][next(iter(spec["datasets"]))]
    assert len(rows) == 9 and {r["layer"] for r in rows} == set(layer_costs.LAYERS)
    assert spec["encoding"]["x"]["axis"]["values"] == [16, 1024, 8192]
    assert spec["encoding"]["x"]["scale"]["type"] == spec["encoding"]["y"]["scale"]["type"] == "log"

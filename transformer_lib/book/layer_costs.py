"""Why self-attention: the paper's Table 1, counted and measured (chapter 1).

Vaswani et al. (2017), Table 1, compares three ways for the positions of a sequence to exchange
information, by the cost of one layer, the operations that must run one after another, and the
number of steps a signal needs from one end of the sequence to the other. This module builds the
three layers at one width so that they can be compared side by side:

    self-attention  the library's ``MultiHeadAttention`` (queries, keys and values from ``x``)
    recurrent       ``nn.GRU``, one layer, unrolled over time by :class:`UnrolledGRU` for counting
    convolutional   ``nn.Conv1d`` with kernel ``k``, padded on the left (causal, as in WaveNet)

Every layer maps ``(B, n, d)`` to ``(B, n, d)``, so layers stack with ``nn.Sequential``.
Shape letters: ``B`` batch, ``n`` sequence length, ``d`` width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
import torch
from torch import Tensor, nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.book.measure import timed

__all__ = [
    "LAYERS",
    "PAPER_TABLE_1",
    "SelfAttentionLayer",
    "RecurrentLayer",
    "UnrolledGRU",
    "ConvLayer",
    "make_layer",
    "sequential_steps",
    "forward_flops",
    "layers_to_cross",
    "time_layers",
    "describe_timings",
    "timings_table",
    "timings_chart",
]

LAYERS = ("self-attention", "recurrent", "convolutional")

PAPER_TABLE_1 = pd.DataFrame(
    {
        "complexity per layer": ["O(n²·d)", "O(n·d²)", "O(k·n·d²)"],
        "sequential operations": ["O(1)", "O(n)", "O(1)"],
        "maximum path length": ["O(1)", "O(n)", "O(n/k), dilated O(log_k n)"],
    },
    index=pd.Index(LAYERS, name="layer type"),
)
"""Table 1 of Vaswani et al. (2017), three of its four rows: ``n`` sequence length, ``d`` width,
``k`` kernel size."""


class SelfAttentionLayer(nn.Module):
    """Self-attention as a layer of one input: ``MultiHeadAttention(x, x, x)``'s output."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads)

    def forward(self, x: Tensor) -> Tensor:  # (B, n, d) -> (B, n, d)
        return self.attention(x, x, x)[0]


class RecurrentLayer(nn.Module):
    """One ``nn.GRU`` layer (batch first), returning the hidden state at every position."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.gru = nn.GRU(d_model, d_model, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:  # (B, n, d) -> (B, n, d)
        return self.gru(x)[0]


class UnrolledGRU(nn.Module):
    """The same GRU as a Python loop over time with ``nn.GRUCell`` (sharing the GRU's weights),
    so that its steps can be counted: each step needs the hidden state the previous one made."""

    def __init__(self, layer: RecurrentLayer) -> None:
        super().__init__()
        gru = layer.gru
        self.cell = nn.GRUCell(gru.input_size, gru.hidden_size)
        self.cell.load_state_dict({name.removesuffix("_l0"): p for name, p in gru.state_dict().items()})

    def forward(self, x: Tensor) -> Tensor:  # (B, n, d) -> (B, n, d)
        h = x.new_zeros(x.size(0), self.cell.hidden_size)  # (B, d)
        states = []
        for t in range(x.size(1)):  # one step per position, in order
            h = self.cell(x[:, t], h)  # (B, d)
            states.append(h)
        return torch.stack(states, dim=1)  # (B, n, d)


class ConvLayer(nn.Module):
    """``nn.Conv1d`` over positions with ``kernel_size`` taps, padded on the left so that position
    ``t`` sees positions ``t - (k - 1)·dilation .. t`` (a causal convolution, as in WaveNet)."""

    def __init__(self, d_model: int, kernel_size: int, dilation: int = 1) -> None:
        super().__init__()
        if kernel_size < 2:
            raise ValueError(f"kernel_size={kernel_size} must be at least 2 for positions to exchange information")
        self.conv = nn.Conv1d(d_model, d_model, kernel_size, dilation=dilation, padding=(kernel_size - 1) * dilation)

    def forward(self, x: Tensor) -> Tensor:  # (B, n, d) -> (B, n, d)
        n = x.size(1)
        y = self.conv(x.transpose(1, 2))  # (B, d, n + (k - 1)·dilation)
        return y[..., :n].transpose(1, 2)  # (B, n, d): drop the outputs that see the future


def make_layer(kind: str, d_model: int, *, n_heads: int = 4, kernel_size: int = 3) -> nn.Module:
    """One layer of ``kind`` (``"self-attention"``, ``"recurrent"`` or ``"convolutional"``) of width ``d_model``."""
    if kind == "self-attention":
        return SelfAttentionLayer(d_model, n_heads)
    if kind == "recurrent":
        return RecurrentLayer(d_model)
    if kind == "convolutional":
        return ConvLayer(d_model, kernel_size)
    raise ValueError(f"unknown layer kind {kind!r}; choose from {list(LAYERS)}")


def sequential_steps(layer: nn.Module, x: Tensor) -> int:
    """How many calls one after another the layer makes on ``x``, counted with a forward hook on
    the module that does the work: one call for attention and convolution, one per position for
    the unrolled GRU."""
    worker = layer.cell if isinstance(layer, UnrolledGRU) else layer
    calls = 0

    def count(*_: object) -> None:
        nonlocal calls
        calls += 1

    handle = worker.register_forward_hook(count)
    try:
        with torch.no_grad():
            layer(x)
    finally:
        handle.remove()
    return calls


def forward_flops(kind: str, n: int, d_model: int, *, n_heads: int = 4, kernel_size: int = 3) -> int:
    """Floating-point operations of one forward pass on a ``(1, n, d_model)`` input, counted by
    ``FlopCounterMode`` (a multiply-add is two). Self-attention goes through the explicit path
    (``need_weights=True``), whose matrix products the counter sees on every device."""
    from torch.utils.flop_counter import FlopCounterMode

    layer = make_layer(kind, d_model, n_heads=n_heads, kernel_size=kernel_size)
    x = torch.randn(1, n, d_model)  # (1, n, d)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        if isinstance(layer, SelfAttentionLayer):
            layer.attention(x, x, x, need_weights=True)
        else:
            layer(x)
    return counter.get_total_flops()


def layers_to_cross(
    make: Callable[[int], nn.Module],
    n: int,
    d_model: int,
    max_layers: int = 256,
) -> int:
    """The smallest number of stacked layers for which the output at the last position depends on
    the input at position 0, found by autograd: the gradient of ``out[:, n - 1]`` with respect to
    ``x[:, 0]`` is exactly zero until the signal can cross.

    Args:
        make: ``make(i)`` builds the ``i``-th layer of the stack (``i = 0, 1, ...``).
        n: sequence length.
        d_model: width of the layers.
        max_layers: give up (``ValueError``) beyond this many layers.
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, n, d_model, generator=generator, requires_grad=True)
    stack = nn.Sequential()
    for depth in range(1, max_layers + 1):
        stack.append(make(depth - 1))
        last = stack(x)[:, n - 1]  # (1, d): the output at the last position
        (gradient,) = torch.autograd.grad(last.sum(), x)  # (1, n, d)
        if gradient[:, 0].abs().sum() > 0:  # position 0 is reached
            return depth
    raise ValueError(
        f"position 0 does not reach {n - 1} in max_layers={max_layers} layers"
    )


def time_layers(
    lengths: Sequence[int],
    d_model: int,
    *,
    n_heads: int = 4,
    kernel_size: int = 3,
    batch: int = 1,
    repeats: int = 3,
    device: torch.device | None = None,
) -> pd.DataFrame:
    """Forward time of one layer of each kind, side by side in one run, for each sequence length.

    Returns:
        A frame with columns ``n``, ``layer``, ``milliseconds``: after one warm-up call, the fastest
        of ``repeats`` calls, or of as many as fit in 50 ms (at most 100) when calls are short.
    """
    device = torch.device("cpu") if device is None else device
    torch.manual_seed(0)
    layers = {kind: make_layer(kind, d_model, n_heads=n_heads, kernel_size=kernel_size).to(device).eval()
              for kind in LAYERS}
    records = []
    with torch.no_grad():
        for n in lengths:
            x = torch.randn(batch, n, d_model, device=device)  # (B, n, d)
            for kind, layer in layers.items():
                layer(x)  # warm-up
                seconds = _best_time(lambda: layer(x), device, repeats)  # noqa: B023 (called at once)
                records.append({"n": n, "layer": kind, "milliseconds": seconds * 1e3})
    return pd.DataFrame(records)


def _best_time(call: Callable[[], object], device: torch.device, repeats: int, budget_s: float = 0.05) -> float:
    """The fastest of at least ``repeats`` calls, and of more (up to 100) while they take less than
    ``budget_s`` in all: short calls are the noisiest, and repeating them costs little."""
    times = [timed(call, device) for _ in range(repeats)]
    while sum(times) < budget_s and len(times) < 100:
        times.append(timed(call, device))
    return min(times)


def _ms(milliseconds: float) -> str:
    """Three significant digits, without an exponent: 0.0412, 3.5, 270, 1,250."""
    return f"{milliseconds:,.0f}" if milliseconds >= 100 else f"{milliseconds:.3g}"


def _times(ratio: float) -> str:
    """A growth factor: 16,524x, 24x, 3.5x, 0.5x."""
    return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2g}x"


def _compare(table: pd.DataFrame, first: str, second: str) -> str:
    """Which of two layers is faster, at which lengths: throughout, from some ``n`` on, or mixed."""
    faster = table[first] < table[second]  # indexed by n
    lengths = list(table.index)
    if faster.all() or not faster.any():
        winner, loser = (first, second) if faster.all() else (second, first)
        return f"{winner} is faster than {loser} at every n measured"
    switches = [n for previous, n in zip(lengths, lengths[1:]) if faster[n] != faster[previous]]
    if len(switches) > 1:
        return f"{first} and {second} swap places more than once (at n = {', '.join(map(str, switches))})"
    later, earlier = (first, second) if faster[switches[0]] else (second, first)
    return f"{earlier} is faster up to n = {lengths[lengths.index(switches[0]) - 1]}, {later} from n = {switches[0]} on"


SHORT_NAMES = {"self-attention": "attention", "recurrent": "GRU", "convolutional": "conv"}


def timings_table(timings: pd.DataFrame) -> str:
    """The timings as a narrow text table (a phone's width): one row per ``n``, in milliseconds."""
    table = timings.pivot(index="n", columns="layer", values="milliseconds")[list(LAYERS)]
    widths = [10, 9, 9]  # 33 characters a row, with n
    lines = [f"{'n':>5}" + "".join(f"{SHORT_NAMES[kind]:>{w}}" for kind, w in zip(LAYERS, widths))]
    for n, row in table.iterrows():
        lines.append(f"{n:>5}" + "".join(f"{_ms(row[kind]):>{w}}" for kind, w in zip(LAYERS, widths)))
    return "\n".join(lines)


def describe_timings(timings: pd.DataFrame) -> list[str]:
    """Sentences that say what the measured timings show (which layer is fastest where, where the
    curves cross): computed from the numbers, because they differ from machine to machine."""
    table = timings.pivot(index="n", columns="layer", values="milliseconds")
    lines = [_compare(table, first, second) for first, second in
              [("self-attention", "recurrent"), ("self-attention", "convolutional"), ("recurrent", "convolutional")]]
    longest, shortest = table.index[-1], table.index[0]
    growth = table.loc[longest] / table.loc[shortest]
    lines.append(f"from n = {shortest} to {longest} ({longest // shortest:,}x longer) the time grows "
                 + ", ".join(f"{_times(growth[kind])} for {kind}" for kind in LAYERS))
    return lines


# Axis labels that fit a narrow chart: 16, 256, 1k, 8k (powers of two, so 1k is 1,024).
_K_LABELS = "datum.value >= 1024 ? datum.value / 1024 + 'k' : datum.value"


def timings_chart(timings: pd.DataFrame, title: str = "One layer's forward time") -> object:
    """Log-log lines of time against sequence length, one per layer kind, with tooltips."""
    import altair as alt

    frame = timings.assign(milliseconds=timings.milliseconds.round(3))
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("n:Q", scale=alt.Scale(type="log", base=2), title="sequence length n (log scale, 1k = 1,024)",
                axis=alt.Axis(values=sorted(set(frame.n)), labelExpr=_K_LABELS)),
        y=alt.Y("milliseconds:Q", scale=alt.Scale(type="log"), title="milliseconds (log scale)"),
        color=alt.Color("layer:N", title=None, sort=list(LAYERS), legend=alt.Legend(orient="bottom")),
        tooltip=["n", "layer", alt.Tooltip("milliseconds:Q", format=".3f")],
    ).properties(width=260, height=230, title=title)


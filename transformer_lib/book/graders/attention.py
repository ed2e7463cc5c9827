"""Chapter 1's graders: scaled dot-product attention, and multi-head attention.

Shapes: ``T`` queries, ``L`` keys, ``Dk`` query/key width, ``Dv`` value width, ``B`` batch, ``H``
heads, ``D`` model width.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_lib import attention as library
from transformer_lib.attention import MultiHeadAttention
from transformer_lib.properties import assert_deterministic, assert_permutation_equivariant
from transformer_lib.reference import torch_multihead_attention

from .. import pitfalls
from .report import (
    Case, GradeReport, Grading, KnownBug, Problem, Refused, as_output, call, close, expect_cases_close, expect_close,
    expect_finite, expect_gradients, expect_shape, fmt, fmt_inputs, inputs, property_check,
)

__all__ = ["grade_attention", "grade_multi_head_attention"]

QKV = ("query", "key", "value", "mask")  # the arguments' names, for the "arguments unchanged" check

# The ready-made attention a from-scratch answer may not call (the pieces, matmul and softmax, it may).
REFUSED_ATTENTION = (
    Refused("F.scaled_dot_product_attention", (F.scaled_dot_product_attention,)),
    Refused("the library's scaled_dot_product_attention", (library.scaled_dot_product_attention,
                                                           library.fused_attention)),
    Refused("nn.MultiheadAttention", (F.multi_head_attention_forward,)),
)
REFUSED_MULTI_HEAD = (
    Refused("the library's MultiHeadAttention", (MultiHeadAttention.__init__,)),
    Refused("nn.MultiheadAttention", (nn.MultiheadAttention.__init__, F.multi_head_attention_forward)),
)
WEIGHTS_DETACHED = (
    "weights_detached", "no gradient reaches the query and the key: the attention weights are cut off from the "
    "graph. The output is right, so only training shows it: the model cannot learn where to look",
    "remove the .detach() (or .data, torch.no_grad()) around the scores or the softmax",
)

# (leading dimensions, T, L, Dk, Dv), smallest first: the first case that fails is the one shown.
# Dk = 1 cannot tell a missing 1/sqrt(Dk) apart, T = 1 shows a softmax over the wrong axis at once.
ATTENTION_CASES = [
    ((), 1, 2, 1, 1),
    ((), 2, 3, 2, 1),
    ((), 3, 2, 4, 3),
    ((2,), 3, 4, 4, 2),
    ((2, 3), 2, 5, 8, 3),
]


def _attention_bugs(q: Tensor, k: Tensor, v: Tensor) -> list[KnownBug]:
    def softmax_of(scores: Tensor, dim: int = -1) -> Tensor:
        return torch.softmax(scores, dim=dim) @ v

    raw = q @ k.transpose(-2, -1)  # (..., T, L)
    d_k = q.size(-1)
    return [
        KnownBug("no_scaling", "the scores are not divided by √d_k",
                 "divide q·kᵀ by math.sqrt(d_k), with d_k = query.size(-1), before the softmax",
                 lambda: pitfalls.attention_without_scaling(q, k, v)[0]),
        KnownBug("scaled_by_d_k", "the scores are divided by d_k, not by √d_k",
                 "the paper divides by the square root: math.sqrt(d_k)", lambda: softmax_of(raw / d_k)),
        KnownBug("softmax_wrong_axis", "the softmax runs over the queries, not over the keys",
                 "each query's weights must sum to one: torch.softmax(scores, dim=-1)",
                 lambda: pitfalls.attention_softmax_over_queries(q, k, v)[0]),
        KnownBug("values_not_used", "the weights multiply the queries or keys, not the values",
                 "the output is weights @ value", lambda: torch.softmax(raw / math.sqrt(d_k), -1) @ q),
    ]


def _attention_case(index: int) -> tuple[Tensor, Tensor, Tensor, str]:
    lead, T, L, d_k, d_v = ATTENTION_CASES[index]
    q, k, v = (inputs(*lead, n, d, seed=10 * index + j) for j, (n, d) in enumerate([(T, d_k), (L, d_k), (L, d_v)]))
    return q, k, v, fmt_inputs(query=q, key=k, value=v)


def _shape_hint(got: Tensor, q: Tensor, k: Tensor, v: Tensor) -> str:
    if got.shape == (*q.shape[:-1], k.size(-2)):
        return "that is the shape of the weights (..., T, L): the output is weights @ value"
    if got.dim() != q.dim():
        return "keep the leading (batch, head) dimensions: transpose with key.transpose(-2, -1), not key.T"
    return "the output has one row per query and the width of the values: (..., T, Dv)"


def _runs(fn: Callable[..., Any], results: dict[str, Tensor | None]) -> None:
    """The gate: one query, one key width; keeps the weights ``fn`` returned (or ``None``) in ``results``."""
    q, k, v, example = _attention_case(0)
    out, weights = as_output(call(fn, q, k, v, what="your attention", example=example, names=QKV), "your attention",
                             example)
    expect_shape(out, (1, 1), what="the output", example=example, hint=_shape_hint(out, q, k, v))
    expect_finite(out, what="the output", example=example)
    results["weights"] = weights


def _compared(fn: Callable[..., Any], index: int) -> Case:
    q, k, v, example = _attention_case(index)
    what = f"your attention on a {q.dim()}-D input"
    try:
        out, _ = as_output(call(fn, q, k, v, what=what, example=example, names=QKV), what, example)
        expect_shape(out, (*q.shape[:-1], v.size(-1)), what="the output", example=example,
                     hint=_shape_hint(out, q, k, v))
    except Problem as problem:
        if q.dim() == 2 or problem.failure.check not in ("raises", "output_shape"):
            raise
        raise Problem("batch_dims", f"{problem.failure.message}, while 2-D inputs work",
                      example=example, hint="leading (batch, head) dimensions must pass through: "
                      "transpose the key with key.transpose(-2, -1) (key.T and transpose(0, 1) "
                      "reverse or swap the wrong dimensions)") from None
    return out, F.scaled_dot_product_attention(q, k, v), example, _attention_bugs(q, k, v)


def _matches_reference(fn: Callable[..., Any]) -> None:
    expect_cases_close((lambda i=i: _compared(fn, i) for i in range(len(ATTENTION_CASES))), check="matches_reference",
                       message="the output differs from F.scaled_dot_product_attention",
                       hint="compare each step with the formula softmax(Q Kᵀ / √d_k) V")


def _weights_are_a_distribution(fn: Callable[..., Any]) -> None:
    q, k, v, example = _attention_case(3)
    _, weights = as_output(call(fn, q, k, v, what="your attention", example=example), "your attention", example)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    expect_close(cast(Tensor, weights), expected, check="weights", example=example,
                 message="the weights returned next to the output are not softmax(Q Kᵀ / √d_k)",
                 hint="return the weights after the softmax: shape (..., T, L), each row summing to one")


def _keeps_float64(fn: Callable[..., Any]) -> None:
    q, k, v, example = _attention_case(2)
    q, k, v = q.double(), k.double(), v.double()
    out, _ = as_output(call(fn, q, k, v, what="your attention in float64", example=example), "", example)
    if out.dtype != torch.float64:
        raise Problem("dtype", f"float64 inputs give a {out.dtype} output", example=example,
                      hint="build no float32 tensor inside (torch.tensor(...) without dtype=, .float()); "
                           "math.sqrt(d_k) is a Python number and keeps the dtype")


def _permutation_equivariant(fn: Callable[..., Any]) -> None:
    x = inputs(2, 5, 4, seed=7)
    example = fmt_inputs(x=x) + "\n(self-attention: query = key = value = x)"
    self_attention = lambda x: as_output(call(fn, x, x, x, what="your attention"), "your attention")[0]  # noqa: E731
    property_check("permutation_equivariance", lambda: assert_permutation_equivariant(self_attention, x),
                   example=example, hint="attention must treat its keys as a set: no position may be special")


# Scores of realistic size: entries of scale 30 with d_k = 64 give scores of about ±900 after the
# 1/√d_k, beyond exp's range in float32 (88.7) and float64 (709). float32 rounds such a score by
# about 6e-8 · 3000 and the output moves by that times |value| (≈ 3): 2e-3 is 4x that. In float16
# (rounding 5e-4) scores up to ±20 move by 0.01 and the output by 0.03: 5e-2.
LARGE_ATOL, HALF_ATOL = 2e-3, 5e-2


def large_inputs(d_k: int = 64, seed: int = 11) -> tuple[Tensor, Tensor, Tensor, str]:
    """``(query (2, 3, d_k), key (2, 5, d_k), value (2, 5, 4), the input described)``: scale 30."""
    generator = torch.Generator().manual_seed(seed)
    q, k = (30 * torch.randn(2, n, d_k, generator=generator) for n in (3, 5))
    v = torch.randn(2, 5, 4, generator=generator)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    example = (f"query (2, 3, {d_k}), key (2, 5, {d_k}): random entries of scale 30, so the scores reach "
               f"{float(scores.abs().max()):,.0f} after the 1/√d_k; value (2, 5, 4): scale 1")
    return q, k, v, example


def half_inputs(seed: int = 12) -> tuple[Tensor, Tensor, Tensor, str]:
    """float16 ``(query (2, 3, 16), key (2, 5, 16), value (2, 5, 4), the input described)``: scores up to about 20."""
    generator = torch.Generator().manual_seed(seed)
    q, k = (3 * torch.randn(2, n, 16, generator=generator) for n in (3, 5))
    v = torch.randn(2, 5, 4, generator=generator)
    scores = q @ k.transpose(-2, -1) / 4
    example = (f"float16 query (2, 3, 16), key (2, 5, 16), value (2, 5, 4): the scores reach "
               f"{float(scores.abs().max()):.0f} (float16 holds at most 65504, exp(11.1))")
    return q.half(), k.half(), v.half(), example


def expect_stable(got: Tensor, expected: Tensor, unstable: Tensor | None, *, check: str, situation: str,
                  example: str, matched: bool, atol: float) -> None:
    """Raise :class:`Problem` unless ``got`` is finite and (when the answer ``matched`` on ordinary
    inputs) within ``atol`` of the float64 ``expected``; ``unstable`` is what a softmax written without
    subtracting the maximum gives here (its bug is named when the output is that)."""
    finite = bool(torch.isfinite(got.float()).all())
    if not finite:
        if unstable is not None and not bool(torch.isfinite(unstable.float()).all()) and close(got, unstable):
            raise Problem(
                "unstable_softmax", f"{situation} your attention returns NaN: a softmax written as exp(s) / "
                "sum(exp(s)) overflows (exp(s) is inf beyond s = 88.7 in float32, 11.1 in float16)",
                example=example, got=fmt(got),
                hint="subtract each row's maximum first: exp(s - max) / sum(exp(s - max)) is the same softmax "
                     "and never overflows (torch.softmax does it for you)")
        raise Problem(check, f"{situation} your attention returns NaN or infinite values", example=example,
                      got=fmt(got), hint="look for an exp of a large number (subtract the row's maximum first) "
                                         "or a division by a sum that overflows")
    if matched:
        expect_close(got.double(), expected, check=check, example=example, rtol=0.0, atol=atol,
                     message=f"{situation} your attention differs from the float64 answer by more than rounding",
                     hint="compute the softmax with torch.softmax, or subtract the row's maximum before exp")


def _unstable_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor | None:
    try:
        return pitfalls.attention_unstable_softmax(q, k, v, mask)[0]
    except Exception:  # noqa: BLE001 (this dtype lacks an operation: the bug does not apply)
        return None


def _stable(fn: Callable[..., Any], matched: bool, inputs: Callable[[], tuple], what: str, check: str,
            situation: str, atol: float) -> None:
    """``fn`` on inputs where a softmax by hand overflows (large scores, float16) against float64."""
    q, k, v, example = inputs()
    out = as_output(call(fn, q, k, v, what=what, example=example, names=QKV), what, example)[0]
    expect_stable(out, F.scaled_dot_product_attention(q.double(), k.double(), v.double()), _unstable_attention(q, k, v),
                  check=check, situation=situation, example=example, matched=matched, atol=atol)


def _gradients(fn: Callable[..., Any], matched: bool) -> None:
    q, k, v, example = _attention_case(3)
    what = "your attention (with gradients)"

    def answer(t: dict[str, Tensor]) -> Tensor:
        result = call(fn, t["query"], t["key"], t["value"], what=what, example=example, grad=True, names=QKV)
        return as_output(result, what, example)[0]

    expect_gradients(answer, lambda t: F.scaled_dot_product_attention(t["query"], t["key"], t["value"]),
                     {"query": q, "key": k, "value": v}, example=example, compare=matched,
                     blocked={frozenset({"query", "key"}): WEIGHTS_DETACHED})


def grade_attention(fn: Callable[..., Any], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's scaled dot-product attention.

    ``fn(query, key, value)`` with ``query (..., T, Dk)``, ``key (..., L, Dk)``, ``value (..., L, Dv)``
    must return ``softmax(query keyᵀ / √Dk) value`` ``(..., T, Dv)``, or a tuple ``(output, weights)``.
    Checked against ``F.scaled_dot_product_attention`` on cases from one query to batches of heads,
    for float64 inputs, and for permutation equivariance (:mod:`transformer_lib.properties`); then by
    class: scores of realistic size and float16 inputs (finite, within rounding of float64: a softmax
    that does not subtract the maximum is named), gradients reaching the query, key and value (the
    library's), and the arguments left unchanged. From scratch (the default), an answer that calls
    ``F.scaled_dot_product_attention`` or the library's function fails (``from_scratch=False``
    allows it, and the report says so).

    Example:
        >>> from transformer_lib.attention import scaled_dot_product_attention
        >>> grade_attention(scaled_dot_product_attention).failed_checks  # the library's own: not from scratch
        ['ready_made']
        >>> grade_attention(scaled_dot_product_attention, from_scratch=False).passed
        True
    """
    grading = Grading("Scaled dot-product attention", refused=REFUSED_ATTENTION, from_scratch=from_scratch)
    results: dict[str, Tensor | None] = {}
    with grading:
        grading.check("runs, and returns (..., T, Dv) with finite values", partial(_runs, fn, results), gate=True)
        matched = grading.check("equals F.scaled_dot_product_attention: one query, cross-attention "
                                "(T ≠ L, Dv ≠ Dk), with batch and head dimensions", partial(_matches_reference, fn))
        if matched and results.get("weights") is not None:
            grading.check("the weights it returns are softmax(Q Kᵀ / √d_k), rows summing to one",
                          partial(_weights_are_a_distribution, fn))
        grading.check("keeps the dtype: float64 in, float64 out", partial(_keeps_float64, fn))
        grading.check("permutation-equivariant: shuffled tokens give shuffled outputs "
                      "(transformer_lib.properties)", partial(_permutation_equivariant, fn))
        grading.check("stays finite and exact at scores of realistic size (entries of scale 30, d_k = 64)",
                      partial(_stable, fn, matched, large_inputs, "your attention on large scores",
                              "large_scores", "at scores of realistic size", LARGE_ATOL))
        grading.check("works in float16: finite, within float16 rounding of the float64 answer",
                      partial(_stable, fn, matched, half_inputs, "your attention in float16",
                              "half_precision", "in float16 (mixed precision)", HALF_ATOL))
        grading.check("gradients reach the query, the key and the value, and equal the library's",
                      partial(_gradients, fn, matched))
    return grading.report


# --- Multi-head attention -------------------------------------------------------------------------

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _mha_variant(ref: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor, *, split: str = "right",
                 merge: str = "right", scale: float | None = None, values_from: str = "value") -> Tensor:
    """The library layer's computation with one step done a known wrong way (for naming bugs)."""
    B, T, _ = query.shape
    L, H = key.size(1), ref.n_heads

    def heads(x: Tensor, n: int) -> Tensor:
        if split == "right":
            return x.view(B, n, H, -1).transpose(1, 2)  # (B, H, n, Dh)
        return x.view(B, H, n, -1)  # the bug: positions mixed into heads

    source = {"value": value, "key": key, "query": query}[values_from]
    q, k, v = heads(ref.q_proj(query), T), heads(ref.k_proj(key), L), heads(ref.v_proj(source), source.size(1))
    scale = math.sqrt(q.size(-1)) if scale is None else scale
    out = torch.softmax(q @ k.transpose(-2, -1) / scale, dim=-1) @ v  # (B, H, T, Dh)
    merged = out.transpose(1, 2).reshape(B, T, -1) if merge == "right" else out.reshape(B, T, -1)
    return ref.out_proj(merged)  # (B, T, D)


def _mha_bugs(ref: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor) -> list[KnownBug]:
    D = query.size(-1)
    variant = partial(_mha_variant, ref, query, key, value)
    return [
        KnownBug("split_heads_without_transpose", "the heads are split by a reshape that mixes positions into heads",
                 "reshape (B, T, H·Dh) to (B, T, H, Dh) first, then .transpose(1, 2) to (B, H, T, Dh)",
                 lambda: variant(split="wrong")),
        KnownBug("merge_heads_without_transpose", "the heads are merged by a reshape that mixes heads into positions",
                 "transpose (B, H, T, Dh) to (B, T, H, Dh) first, then reshape to (B, T, H·Dh)",
                 lambda: variant(merge="wrong")),
        KnownBug("scaled_by_d_model", "the scores are divided by √d_model instead of the head width √(d_model / H)",
                 "d_k is the width of one head's queries: d_model // n_heads", lambda: variant(scale=math.sqrt(D))),
        KnownBug("no_scaling", "the scores are not divided by √d_k", "divide by math.sqrt(d_model // n_heads)",
                 lambda: variant(scale=1.0)),
        KnownBug("values_from_keys", "the values are projected from the key argument, not from the value: right "
                 "only while key and value are the same tensor", "v = self.v_proj(value)",
                 lambda: variant(values_from="key")),
        KnownBug("values_from_keys", "the values are projected from the query argument, not from the value",
                 "v = self.v_proj(value)", lambda: variant(values_from="query")),
    ]


def _projections(module: nn.Module) -> dict[str, nn.Linear | library.Projection] | None:
    """The layer's four projections, ``nn.Linear`` each (or, in a subclass of the library's layer,
    views of its stacked weights), or ``None``."""
    found = {name: getattr(module, name, None) for name in PROJECTIONS}
    if all(isinstance(p, (nn.Linear, library.Projection)) for p in found.values()):
        return found  # type: ignore[return-value]
    return None


@dataclass(frozen=True)
class _Setting:
    """What every check of one multi-head grading shares: the layer's name and size, and its inputs."""

    name: str
    d_model: int
    n_heads: int
    x: Tensor
    memory: Tensor
    values: Tensor
    example: str

    def forward(self, module: nn.Module, query: Tensor, key: Tensor, value: Tensor | None = None,
                example: str | None = None, grad: bool = False) -> Tensor:
        what = f"{self.name}.forward"
        example = self.example if example is None else example
        value = key if value is None else value
        return as_output(call(module, query, key, value, what=what, example=example, names=QKV, grad=grad), what,
                         example)[0]


def _mha_builds_and_runs(layer_class: Callable[[int, int], nn.Module], setting: _Setting, state: dict[str, Any]) -> None:
    d_model, n_heads, name = setting.d_model, setting.n_heads, setting.name
    module = call(layer_class, d_model, n_heads, what=f"{name}({d_model}, {n_heads})")
    if not isinstance(module, nn.Module):
        raise Problem("not_a_module", f"{name}({d_model}, {n_heads}) is a {type(module).__name__}, not an nn.Module",
                      hint="subclass nn.Module and call super().__init__() first")
    state["module"] = module.eval()
    out = setting.forward(module, setting.x, setting.x)
    expect_shape(out, tuple(setting.x.shape), what="the output", example=setting.example,
                 hint="merge the heads back to (B, T, H·Dh) and apply out_proj")


def _mha_size(setting: _Setting, state: dict[str, Any]) -> None:
    d_model, n_heads = setting.d_model, setting.n_heads
    module = state["module"]
    projections = _projections(module)
    bias = projections is None or projections["q_proj"].bias is not None
    expected = sum(p.numel() for p in nn.MultiheadAttention(d_model, n_heads, bias=bias).parameters())
    count = sum(p.numel() for p in module.parameters())
    if projections is not None and projections["q_proj"].out_features == n_heads * d_model:
        raise Problem(
            "full_width_heads",
            f"each of the {n_heads} heads projects to {d_model} dimensions, not d_model / n_heads = "
            f"{d_model // n_heads}: {count:,} parameters, {count / expected:.1f}x the {expected:,} of "
            f"nn.MultiheadAttention({d_model}, {n_heads})",
            hint=f"q_proj, k_proj and v_proj map {d_model} to {d_model} (all heads together); "
                 "split their output into heads of width d_model // n_heads",
        )
    if count != expected:
        raise Problem("parameter_count", f"{count:,} parameters, expected {expected:,} "
                      f"(four {d_model}x{d_model} matrices and {'their biases' if bias else 'no biases'})",
                      hint="multi-head attention has the four projections and nothing else")
    if projections is None:
        raise Problem("projection_names", "the projections are not four nn.Linear named "
                      "q_proj, k_proj, v_proj, out_proj, so its weights cannot be compared",
                      hint="name them as in the exercise; a packed qkv projection is fine in practice, but not here")
    state["projections"] = projections


def _mha_deterministic(setting: _Setting, state: dict[str, Any]) -> None:
    property_check("dropout_in_eval",
                   lambda: assert_deterministic(lambda x: setting.forward(state["module"], x, x), setting.x),
                   example=setting.example)


def _mha_compared(setting: _Setting, module: nn.Module, ref: MultiHeadAttention, theirs: nn.Module, query: Tensor,
                  key: Tensor, value: Tensor) -> Case:
    example = (fmt_inputs(query=query) + "\n(self-attention: key = value = query)" if key is query and value is query
               else fmt_inputs(query=query, key=key, value=value))
    got = setting.forward(module, query, key, value, example)
    with torch.no_grad():  # PyTorch's layer is the reference; ours, with one step wrong, names bugs
        expected = theirs(query, key, value)[0]
    return got, expected, example, _mha_bugs(ref, query, key, value)


def _mha_reference(setting: _Setting, state: dict[str, Any]) -> MultiHeadAttention:
    """The library's layer with the reader's weights."""
    projections = state["projections"]
    ref = MultiHeadAttention(setting.d_model, setting.n_heads, bias=projections["q_proj"].bias is not None).eval()
    ref.load_state_dict({f"{p}.{part}": getattr(lin, part).detach() for p, lin in projections.items()  # the names
                         for part in ("weight", "bias") if getattr(lin, part) is not None})  # of nn.Linear: upgraded
    return ref


def _mha_matches_reference(setting: _Setting, state: dict[str, Any]) -> None:
    ref = _mha_reference(setting, state)
    theirs = torch_multihead_attention(ref).eval()
    x, memory, values = setting.x, setting.memory, setting.values
    expect_cases_close((lambda q=q, k=k, v=v: _mha_compared(setting, state["module"], ref, theirs, q, k, v)
                        for q, k, v in ((x, x, x), (x, memory, values))), check="matches_reference",
                       message="with your weights, nn.MultiheadAttention gives another output",
                       hint="trace the shapes: project, split into heads, attend, merge, out_proj")


def _mha_large_scores(setting: _Setting, state: dict[str, Any], matched: bool) -> None:
    x = 30 * torch.randn(2, 3, setting.d_model, generator=torch.Generator().manual_seed(13))
    example = (f"query = key = value: (2, 3, {setting.d_model}) random entries of scale 30 (activations of a "
               "trained model reach that), so the scores reach hundreds")
    got = setting.forward(state["module"], x, x, x, example)
    ref = copy.deepcopy(_mha_reference(setting, state)).double()
    with torch.no_grad():
        expected = ref(x.double(), x.double(), x.double())[0]
    # |output| is about 10 here: float32 rounding of scores in the hundreds moves it by about 1e-4
    expect_stable(got, expected, None, check="large_scores", situation="at scores of realistic size",
                  example=example, matched=matched, atol=1e-2)


def _mha_half_precision(setting: _Setting, state: dict[str, Any], matched: bool) -> None:
    x = 10 * torch.randn(2, 3, setting.d_model, generator=torch.Generator().manual_seed(14))
    example = (f"query = key = value: (2, 3, {setting.d_model}) random entries of scale 10, in float16; the "
               "layer's weights in float16 too (module.half(), as mixed precision computes them)")
    try:
        module = copy.deepcopy(state["module"]).half()
    except Exception as error:  # noqa: BLE001 (a layer that cannot be copied or converted)
        raise Problem("half_precision", f"the layer could not be copied and converted to float16 "
                      f"({type(error).__name__}: {error})", example=example,
                      hint="keep every parameter and buffer a registered tensor (nn.Parameter, register_buffer)") from None
    half = x.half()
    got = setting.forward(module, half, half, half, example)
    ref = copy.deepcopy(_mha_reference(setting, state)).double()
    with torch.no_grad():
        expected = ref(x.half().double(), x.half().double(), x.half().double())[0]
    # the scores reach tens to hundreds (beyond exp's float16 range, 11.1), which float16 rounds by
    # 5e-4 of their size: the output (about 10) moves by up to 0.08 over random layers; 0.3 is 4x that
    expect_stable(got, expected, None, check="half_precision", situation="in float16 (mixed precision)",
                  example=example, matched=matched, atol=0.3)


def _mha_gradients(setting: _Setting, state: dict[str, Any], matched: bool) -> None:
    x, memory, values = setting.x, setting.memory, setting.values
    example = fmt_inputs(query=x, key=memory, value=values)
    ref = copy.deepcopy(_mha_reference(setting, state)).double()
    expect_gradients(lambda t: setting.forward(state["module"], t["query"], t["key"], t["value"], example, grad=True),
                     lambda t: ref(t["query"], t["key"], t["value"])[0], {"query": x, "key": memory, "value": values},
                     example=example, compare=matched, blocked={frozenset({"query", "key"}): WEIGHTS_DETACHED})


def _mha_permutation_equivariant(setting: _Setting, state: dict[str, Any]) -> None:
    property_check("permutation_equivariance",
                   lambda: assert_permutation_equivariant(lambda x: setting.forward(state["module"], x, x), setting.x),
                   example=setting.example, hint="a reshape that mixes positions into heads breaks it (chapter 1)")


def grade_multi_head_attention(layer_class: Callable[[int, int], nn.Module], d_model: int = 8, n_heads: int = 2, *,
                               from_scratch: bool = True) -> GradeReport:
    """Grade the reader's multi-head attention layer.

    ``layer_class(d_model, n_heads)`` must build an ``nn.Module`` with four ``nn.Linear``
    projections ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj`` (heads of width
    ``d_model // n_heads``), whose ``forward(query, key, value)`` returns ``(B, T, d_model)`` (or a
    tuple starting with it). Checked: the parameter count and head width (against
    ``nn.MultiheadAttention``), determinism in ``eval()`` mode, equality with
    ``nn.MultiheadAttention`` given the same weights (self- and cross-attention; the library's
    ``MultiHeadAttention`` with one step done wrong names the bug), and permutation equivariance;
    then by class: scores of realistic size and float16, gradients reaching the query, key and value, the
    arguments left unchanged. From scratch (the default), a layer built on the library's
    ``MultiHeadAttention`` or on ``nn.MultiheadAttention`` fails (``from_scratch=False`` allows it).

    Example:
        >>> grade_multi_head_attention(MultiHeadAttention, from_scratch=False).passed
        True
    """
    grading = Grading("Multi-head attention", refused=REFUSED_MULTI_HEAD, from_scratch=from_scratch)
    x = inputs(2, 3, d_model, seed=1)
    setting = _Setting(getattr(layer_class, "__name__", "your layer"), d_model, n_heads, x,
                       inputs(2, 4, d_model, seed=2), inputs(2, 4, d_model, seed=3),
                       fmt_inputs(query=x) + "\n(self-attention: query = key = value)")
    state: dict[str, Any] = {}
    with grading:
        grading.check(f"builds with ({d_model}, {n_heads}), and maps (B, T, D) to (B, T, D)",
                      partial(_mha_builds_and_runs, layer_class, setting, state), gate=True)
        sized = grading.check(f"as many parameters as nn.MultiheadAttention({d_model}, {n_heads}): heads of "
                              "width d_model / n_heads", partial(_mha_size, setting, state))
        grading.check("deterministic in eval() mode (no dropout left on)", partial(_mha_deterministic, setting, state),
                      gate=True)
        matched = False
        if sized:
            matched = grading.check("equals nn.MultiheadAttention with the same weights, in self- and "
                                    "cross-attention (key ≠ value)", partial(_mha_matches_reference, setting, state))
        else:
            grading.skip("the comparison with nn.MultiheadAttention, which needs its four projections")
        grading.check("permutation-equivariant (transformer_lib.properties)",
                      partial(_mha_permutation_equivariant, setting, state))
        if sized:
            grading.check("stays finite and exact at scores of realistic size (inputs of scale 30)",
                          partial(_mha_large_scores, setting, state, matched))
            grading.check("works in float16 (module.half()): finite, within float16 rounding of float64",
                          partial(_mha_half_precision, setting, state, matched))
            grading.check("gradients reach the query, the key and the value, and equal the library's",
                          partial(_mha_gradients, setting, state, matched))
    return grading.report

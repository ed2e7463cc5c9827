"""Chapter 4's graders: the residual connection with its LayerNorm, Pre-LN and Post-LN.

The reader's module has the interface of :class:`transformer_lib.blocks.Residual`:
``Module(d_model, dropout=0.0)`` and ``forward(x, sublayer) -> (B, T, D)``. Shapes: ``B`` batch,
``T`` positions, ``D`` width.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from transformer_lib.blocks import Residual
from transformer_lib.properties import assert_deterministic

from .report import (
    Case, GradeReport, Grading, KnownBug, Problem, Refused, call, expect_cases_close, expect_close, expect_gradients,
    expect_shape, fmt_inputs, inputs, property_check,
)

__all__ = ["grade_pre_ln_residual", "grade_post_ln_residual"]

D = 8  # the width every check uses
REFUSED_RESIDUAL = (Refused("the library's Residual", (Residual.__init__,)),)


def _residual_bugs(x: Tensor, f: Callable[[Tensor], Tensor], norm: nn.Module, norm_first: bool) -> list[KnownBug]:
    def named(check: str, message: str, hint: str, output: Callable[[], Tensor]) -> KnownBug:
        return KnownBug(check, message, hint, lambda: output().detach())

    bugs = [
        named("residual_adds_normalised_input", "the residual adds the normalised input: LN(x) + f(LN(x)). The "
              "identity path from input to output, the point of Pre-LN, is gone",
              "keep x for the residual: return x + self.dropout(sublayer(self.norm(x))), without first "
              "overwriting x with self.norm(x)", lambda: norm(x) + f(norm(x))),
        named("post_ln_instead", "this is Post-LN: LN(x + f(x))", "Pre-LN normalises the sublayer's input: "
              "x + dropout(f(LN(x)))", lambda: norm(x + f(x))),
        named("pre_ln_instead", "this is Pre-LN: x + f(LN(x))", "Post-LN normalises after the addition: "
              "LN(x + dropout(f(x)))", lambda: x + f(norm(x))),
        named("norm_on_sublayer_output", "the LayerNorm is applied to the sublayer's output: x + LN(f(x))",
              "Pre-LN: x + f(LN(x)); Post-LN: LN(x + f(x))", lambda: x + norm(f(x))),
        named("no_residual", "the input is not added back: there is no residual connection",
              "add the block's input x to the sublayer's output",
              lambda: f(norm(x)) if norm_first else norm(f(x))),
        named("norm_not_applied", "the LayerNorm is never applied: x + f(x)", "use self.norm where it belongs",
              lambda: x + f(x)),
    ]
    wrong_placement = "post_ln_instead" if norm_first else "pre_ln_instead"
    return [b for b in bugs if b.check not in ("pre_ln_instead", "post_ln_instead") or b.check == wrong_placement]


def _example(x: Tensor, W: Tensor, sublayer: str) -> str:
    shown = fmt_inputs(x=x, W=W) if "W" in sublayer else fmt_inputs(x=x)
    return f"{shown}\nsublayer: {sublayer}"


@dataclass(frozen=True)
class _Setting:
    """What every check of one residual grading shares: the reader's class, the variant, and the inputs."""

    module_class: Callable[..., nn.Module]
    norm_first: bool
    name: str
    x: Tensor
    W: Tensor
    sublayers: dict[str, Callable[[Tensor], Tensor]]

    @property
    def kind(self) -> str:
        return "Pre-LN" if self.norm_first else "Post-LN"

    @property
    def formula(self) -> str:
        return "x + dropout(f(LN(x)))" if self.norm_first else "LN(x + dropout(f(x)))"


def _setting(module_class: Callable[..., nn.Module], norm_first: bool) -> _Setting:
    x = 3.0 + inputs(2, 3, D, seed=40)  # a mean and a scale for the LayerNorm to remove
    W = inputs(D, D, seed=41) / 4
    sublayers: dict[str, Callable[[Tensor], Tensor]] = {
        "f(h) = 0": torch.zeros_like,
        "f(h) = h Wᵀ": lambda h: h @ W.T,
        "f(h) = tanh(h Wᵀ)": lambda h: torch.tanh(h @ W.to(h.dtype).T),
    }
    return _Setting(module_class, norm_first, getattr(module_class, "__name__", "your module"), x, W, sublayers)


def _build(setting: _Setting, *args: Any) -> nn.Module:
    what = f"{setting.name}({', '.join(map(repr, args))})"
    module = call(setting.module_class, *args, what=what)
    if not isinstance(module, nn.Module):
        raise Problem("not_a_module", f"{what} is a {type(module).__name__}, not an nn.Module",
                      hint="subclass nn.Module and call super().__init__() first")
    return module.eval()


def _run(setting: _Setting, module: nn.Module, f_name: str, x: Tensor | None = None, *, grad: bool = False,
         sublayer: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    x = setting.x if x is None else x
    example = _example(x, setting.W, f_name)
    sublayer = setting.sublayers[f_name] if sublayer is None else sublayer
    out = call(module, x, sublayer, what=f"{setting.name}.forward(x, sublayer)", example=example, grad=grad,
               names=("x", "sublayer"))
    if not isinstance(out, Tensor):
        raise Problem("returns_tensor", f"forward returned {type(out).__name__}, not a tensor", example=example)
    return out


def _builds_and_runs(setting: _Setting, state: dict[str, Any]) -> None:
    state["module"] = module = _build(setting, D)
    expect_shape(_run(setting, module, "f(h) = h Wᵀ"), tuple(setting.x.shape), what="the output",
                 example=fmt_inputs(x=setting.x))


def _one_layer_norm(setting: _Setting, state: dict[str, Any]) -> None:
    norms = [m for m in state["module"].modules() if isinstance(m, nn.LayerNorm)]
    if len(norms) != 1:
        raise Problem("layer_norm", f"the module holds {len(norms)} nn.LayerNorm, expected exactly one",
                      hint="create self.norm = nn.LayerNorm(d_model) in __init__ (the comparison copies its "
                           "parameters into transformer_lib.blocks.Residual)")
    norm = norms[0]
    generator = torch.Generator().manual_seed(42)
    with torch.no_grad():  # parameters away from 1 and 0, so that a misplaced norm shows
        if norm.weight is not None:
            norm.weight.copy_(1.0 + torch.rand(D, generator=generator))
            norm.bias.copy_(torch.rand(D, generator=generator) - 0.5)
    reference = Residual(D, 0.0, norm_first=setting.norm_first).eval()
    reference_norm: Any = reference.norm  # the library's LayerNorm
    reference_norm.eps = norm.eps
    with torch.no_grad():
        reference_norm.weight.copy_(norm.weight if norm.weight is not None else torch.ones(D))
        reference_norm.bias.copy_(norm.bias if norm.bias is not None else torch.zeros(D))
    state["norm"], state["reference"] = norm, reference


def _compared(setting: _Setting, state: dict[str, Any], f_name: str) -> Case:
    x = setting.x
    got = _run(setting, state["module"], f_name)
    f = setting.sublayers[f_name]
    with torch.no_grad():
        expected = state["reference"](x, f)
    example = _example(x, setting.W, f_name)
    return got.detach(), expected, example, _residual_bugs(x, f, state["norm"], setting.norm_first)


def _matches_reference(setting: _Setting, state: dict[str, Any]) -> None:
    expect_cases_close((lambda f=f: _compared(setting, state, f) for f in setting.sublayers),
                       check="matches_reference",
                       message=f"the output differs from transformer_lib.blocks.Residual ({setting.formula})",
                       hint=f"{setting.kind}: {setting.formula}")


def _dropout_checks(setting: _Setting) -> None:
    x = setting.x
    module = _build(setting, D, 0.5)
    example = _example(x, setting.W, "f(h) = h Wᵀ") + "\ndropout = 0.5"
    property_check("dropout_in_eval",
                   lambda: assert_deterministic(lambda x: _run(setting, module, "f(h) = h Wᵀ", x), x),
                   example=example)
    module.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        trained, zero = _run(setting, module, "f(h) = h Wᵀ"), _run(setting, module, "f(h) = 0")
    module.eval()
    if bool(torch.allclose(trained, _run(setting, module, "f(h) = h Wᵀ"))):
        raise Problem("dropout_not_applied", "with dropout = 0.5, training mode gives the same output as eval()",
                      example=example, hint="apply self.dropout (an nn.Dropout(dropout) made in __init__) to "
                                            "the sublayer's output")
    # f = 1 (whatever its input): dropout on f's output changes the output; dropout on its input cannot
    module.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        constant = _run(setting, module, "f(h) = 1", sublayer=torch.ones_like)
    module.eval()
    if bool(torch.allclose(constant, _run(setting, module, "f(h) = 1", sublayer=torch.ones_like))):
        raise Problem("dropout_on_input", "with a sublayer whose output does not depend on its input (f(h) = 1), "
                      "training mode gives eval()'s output: the dropout acts on the sublayer's input, not on its "
                      "output", example=fmt_inputs(x=x) + "\nsublayer: f(h) = 1, dropout = 0.5, training mode",
                      hint=f"the paper drops the sublayer's output: {setting.formula}")
    # f = 0: dropping parts of f's output changes nothing, so training must give eval()'s output
    expect_close(zero.detach(), _run(setting, module, "f(h) = 0").detach(), check="dropout_placement",
                 example=fmt_inputs(x=x) + "\nsublayer: f(h) = 0, dropout = 0.5, training mode",
                 message="with a sublayer that adds nothing, training mode still changes the output: "
                         "dropout acts on the residual path too, not only on the sublayer's output",
                 hint=f"{setting.kind}: {setting.formula}, dropout around f's output only")


def _large_inputs(setting: _Setting, state: dict[str, Any], matched: bool) -> None:
    x = 1000.0 + 100.0 * torch.randn(2, 3, D, generator=torch.Generator().manual_seed(43))
    example = (
        f"x (2, 3, {D}): random, mean 1000 and scale 100 (activations late in a deep Pre-LN stack reach that)\n"
        "sublayer: f(h) = tanh(h Wᵀ)")
    f = setting.sublayers["f(h) = tanh(h Wᵀ)"]
    got = call(state["module"], x, f, what=f"{setting.name}.forward(x, sublayer)", example=example,
               names=("x", "sublayer"))
    if not isinstance(got, Tensor) or not bool(torch.isfinite(got).all()):
        raise Problem("large_inputs", "on inputs of scale 1000 the output is not finite", example=example,
                      hint="use nn.LayerNorm (it subtracts the mean before squaring)")
    if matched:
        with torch.no_grad():
            expected = copy.deepcopy(state["reference"]).double()(x.double(), f)
        # float32 holds 1000 to about 6e-5; LayerNorm of values spread by 100 loses no more than that
        expect_close(got.detach(), expected, check="large_inputs", example=example, rtol=0.0, atol=1e-3,
                     message="on inputs of scale 1000 the output differs from the float64 answer by more than "
                             "float32 rounding", hint="use nn.LayerNorm on the block's input as it is")


def _gradients(setting: _Setting, state: dict[str, Any], matched: bool) -> None:
    f_name = "f(h) = tanh(h Wᵀ)"
    f = setting.sublayers[f_name]
    reference = copy.deepcopy(state["reference"]).double()
    expect_gradients(lambda t: _run(setting, state["module"], f_name, t["x"], grad=True),
                     lambda t: reference(t["x"], f),
                     {"x": setting.x}, example=_example(setting.x, setting.W, f_name), compare=matched)


def _grade_residual(module_class: Callable[..., nn.Module], norm_first: bool, from_scratch: bool) -> GradeReport:
    setting = _setting(module_class, norm_first)
    grading = Grading(f"{setting.kind} residual connection", refused=REFUSED_RESIDUAL, from_scratch=from_scratch)
    state: dict[str, Any] = {}
    with grading:
        grading.check(f"builds with d_model = {D} and maps (B, T, D) to (B, T, D)",
                      partial(_builds_and_runs, setting, state), gate=True)
        normed = grading.check("holds one nn.LayerNorm(d_model)", partial(_one_layer_norm, setting, state))
        matched = False
        if normed:
            matched = grading.check(f"equals transformer_lib.blocks.Residual(norm_first={norm_first}): "
                                    f"{setting.formula}, for f = 0 " + ("(the identity path: x itself)" if norm_first
                                                                         else "(LN(x))")
                                    + ", a linear and a nonlinear f", partial(_matches_reference, setting, state))
        else:
            grading.skip("the comparison with transformer_lib.blocks.Residual, which copies the LayerNorm")
        grading.check("dropout: on in training, on the sublayer's output only; off in eval()",
                      partial(_dropout_checks, setting))
        if normed:
            grading.check("stays finite and exact on inputs of scale 1000", partial(_large_inputs, setting, state,
                                                                                    matched))
            grading.check("gradients reach x and equal transformer_lib.blocks.Residual's",
                          partial(_gradients, setting, state, matched))
    return grading.report


def grade_pre_ln_residual(module_class: Callable[..., nn.Module], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's Pre-LN residual connection: ``x + dropout(sublayer(LayerNorm(x)))``.

    ``module_class(d_model, dropout=0.0)`` must hold one ``nn.LayerNorm(d_model)``, and
    ``forward(x, sublayer)`` return the Pre-LN output. Checked against
    :class:`transformer_lib.blocks.Residual` with ``norm_first=True`` (the same LayerNorm
    parameters) for a zero, a linear and a nonlinear sublayer: with ``f = 0`` the block must return
    ``x`` itself, the identity path Pre-LN exists for. Then dropout: random in training, on the
    sublayer's output only, off in ``eval()`` (no ``nn.Dropout`` built in ``forward``). Then by
    class: inputs of scale 1000, gradients (the library's), ``x`` left unchanged (no ``x +=``); and,
    from scratch (the default), no use of the library's ``Residual``.

    Example:
        >>> grade_pre_ln_residual(lambda d_model, dropout=0.0: Residual(d_model, dropout, norm_first=True),
        ...                       from_scratch=False).passed
        True
    """
    return _grade_residual(module_class, norm_first=True, from_scratch=from_scratch)


def grade_post_ln_residual(module_class: Callable[..., nn.Module], *, from_scratch: bool = True) -> GradeReport:
    """Grade the reader's Post-LN residual connection (the paper's): ``LayerNorm(x + dropout(sublayer(x)))``.

    The interface and checks of :func:`grade_pre_ln_residual`, against
    :class:`transformer_lib.blocks.Residual` with ``norm_first=False``; with ``f = 0`` the block
    returns ``LayerNorm(x)``.

    Example:
        >>> grade_post_ln_residual(lambda d_model, dropout=0.0: Residual(d_model, dropout), from_scratch=False).passed
        True
    """
    return _grade_residual(module_class, norm_first=False, from_scratch=from_scratch)

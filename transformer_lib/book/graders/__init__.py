"""Graders for the write-it-yourself exercises of chapters 1 to 7.

A reader writes a function or a module in an empty cell and calls its grader, e.g.
``grade_attention(my_attention)``. The grader runs the same property checks that test the library
(:mod:`transformer_lib.properties`) and compares with the library and with PyTorch on small inputs. It
answers with a :class:`GradeReport`: each property that passed, and for each that failed a stable
identifier (the bug's name when the wrong output matches a known bug, e.g. ``"no_scaling"``), the
smallest input that shows it, the right output and the reader's, and a hint. It never raises
because of the reader's code: an exception, a wrong shape or NaN becomes part of the report.

Every grader also checks by class where the class applies: scores of realistic size and float16
inputs (finite, within rounding of float64), gradients reaching every input that should get one
(the library's), the caller's arguments left unchanged, special ids anywhere in the vocabulary
(fairseq's ``<s> = 0`` before ``<pad> = 1``). Answers are graded *from scratch* by default: one
that calls the library's or PyTorch's ready-made version of what it is asked to write fails with
``ready_made``; ``from_scratch=False`` allows it, and the report's title says so. A call of the
answer runs under a time limit and the grading under an output limit (``report.TIME_LIMIT_S``,
``report.OUTPUT_LIMIT_CHARS``); ``sys.exit()`` and ``KeyboardInterrupt`` in the answer are its failures.

    chapter 1   grade_attention, grade_multi_head_attention
    chapter 2   grade_padding_mask, grade_causal_mask, grade_target_mask, grade_masked_attention
    chapter 3   grade_sinusoidal_table
    chapter 4   grade_pre_ln_residual, grade_post_ln_residual
    chapter 5   grade_label_smoothed_loss, grade_target_shift, grade_length_batches
    chapter 6   grade_greedy_decode
    chapter 7   grade_rotary, grade_alibi_bias, grade_greedy_continue, grade_sliding_window_mask,
                grade_rms_norm
    capstone    (section 6.8) :mod:`.capstone`: choose_pieces, assemble, grade_transformer

The bugs the graders name are reproduced in :mod:`transformer_lib.book.pitfalls`.
"""

from .attention import grade_attention, grade_multi_head_attention
from .beyond import grade_alibi_bias, grade_greedy_continue, grade_rms_norm, grade_rotary, grade_sliding_window_mask
from .blocks import grade_post_ln_residual, grade_pre_ln_residual
from .decoding import grade_greedy_decode
from .masking import grade_causal_mask, grade_masked_attention, grade_padding_mask, grade_target_mask
from .positions import grade_sinusoidal_table
from .report import Failure, GradeReport
from .training import grade_label_smoothed_loss, grade_length_batches, grade_target_shift

__all__ = [
    "Failure",
    "GradeReport",
    "grade_attention",
    "grade_multi_head_attention",
    "grade_padding_mask",
    "grade_causal_mask",
    "grade_target_mask",
    "grade_masked_attention",
    "grade_sinusoidal_table",
    "grade_pre_ln_residual",
    "grade_post_ln_residual",
    "grade_label_smoothed_loss",
    "grade_target_shift",
    "grade_length_batches",
    "grade_greedy_decode",
    "grade_rotary",
    "grade_alibi_bias",
    "grade_greedy_continue",
    "grade_sliding_window_mask",
    "grade_rms_norm",
]

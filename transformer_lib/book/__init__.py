"""What exists for the book and not for the model: the model core never imports this package.

    source      ``show_source``: a chapter shows the library's code as it runs, without docstrings
    charts      the offline, interactive altair renderer (``enable_charts()``; nothing on import)
    experiment  the fast/full experiment-size switch (``TRANSFORMER_BOOK_PROFILE``, ``pick``)
    results     the committed results of longer runs, shown as tables (chapters 3, 5, 6)
    artifacts   a trained model's translations, samples and attention weights, committed as JSON
                (``python -m transformer_lib.book.artifacts``; chapters 5 and 6 show them)
    measure     the memory probe of chapter 7 and the benchmarks
    modern      section 7.9: the key/value cache read while decoding, and the options current
                models use (RMSNorm, SwiGLU, GQA, QK-norm) trained side by side
    layer_costs the paper's Table 1 counted and timed: attention, GRU, convolution (chapter 1)
    figures     what every chapter's figures share: the architecture map, loss curves, helpers
    attention_figures, masking_figures, embedding_figures, block_figures, training_figures,
    decoding_figures, beyond_figures    each chapter's own figures (chapters 1 to 7)
    graders     the write-it-yourself exercises graded (``grade_attention(my_attention)``, chapters
                1 to 6): the library's property checks and references, a report naming each bug
    pitfalls    the tutorials' bugs reproduced in a few lines each (unscaled scores, a padding-only
                target mask, a finite mask fill...), which the chapters' checks and the graders catch

Import the modules (``from transformer_lib.book.figures import attention_heatmap``); this file
imports none of them, so ``transformer_lib.book.experiment`` does not pull in altair.
"""

import sys as _sys


class _SkipSlowOptionalImport:
    """jsonschema, which altair imports, loads the optional IRI-syntax checker ``rfc3987_syntax`` where
    it is installed (jupyterlab pulls it in through jupyter-events); that module compiles a grammar at
    import, about 2 s of CPU, in every notebook that draws a chart. The book never validates IRIs, so
    this finder makes that one import fail, and jsonschema carries on without the checker (as it does
    on Colab, which does not install it)."""

    name = "rfc3987_syntax"

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == self.name:
            raise ModuleNotFoundError(f"{fullname} is not loaded by the book (see transformer_lib.book)", name=fullname)
        return None


if not any(isinstance(finder, _SkipSlowOptionalImport) for finder in _sys.meta_path):
    _sys.meta_path.insert(0, _SkipSlowOptionalImport())

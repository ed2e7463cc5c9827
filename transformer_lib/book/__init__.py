"""What exists for the book and not for the model: the model core never imports this package.

    source      ``show_source``: a chapter shows the library's code as it runs, without docstrings
    charts      the offline, interactive altair renderer (``enable_charts()``; nothing on import)
    figures     the chapters' figures (altair charts and matplotlib axes)
    experiment  the fast/full experiment-size switch (``TRANSFORMER_BOOK_PROFILE``, ``pick``)
    results     the committed results of longer runs, shown as tables (chapters 3, 5, 6)
    artifacts   a trained model's translations, samples and attention weights, committed as JSON
                (``python -m transformer_lib.book.artifacts``; chapters 5 and 6 show them)
    measure     the memory probe of chapter 7 and the benchmarks
    diagrams, decoding_diagram    diagrams drawn from the sizes they show (multi-head attention,
                chapter 1; the decoding loop with its cache, chapter 6)
    layer_costs the paper's Table 1 counted and timed: attention, GRU, convolution (chapter 1)
    masking_figures, norm_figures, training_figures, language_figures    each chapter's own
                figures (chapters 2, 4, 5, 7)
    graders     the write-it-yourself exercises graded (``grade_attention(my_attention)``, chapters
                1 to 6): the library's property checks and references, a report naming each bug
    pitfalls    the tutorials' bugs reproduced in a few lines each (unscaled scores, a padding-only
                target mask, a finite mask fill...), which the chapters' checks and the graders catch

Import the modules (``from transformer_lib.book.figures import attention_heatmap``); this file
imports none of them, so ``transformer_lib.book.experiment`` does not pull in altair.
"""

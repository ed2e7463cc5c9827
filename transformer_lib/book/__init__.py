"""What exists for the book and not for the model: the model core never imports this package.

    source      ``show_source``: a chapter shows the library's code as it runs, without docstrings
    charts      the offline, interactive altair renderer (``enable_charts()``; nothing on import)
    experiment  the fast/full experiment-size switch (``TRANSFORMER_BOOK_PROFILE``, ``pick``)
    results     the committed results of longer runs, shown as tables (chapters 3, 5, 6)
    artifacts   a trained model's translations, samples and attention weights, committed as JSON
                (``python -m transformer_lib.book.artifacts``; chapters 5 and 6 show them)
    measure     the memory probe of chapter 7 and the benchmarks
    layer_costs the paper's Table 1 counted and timed: attention, GRU, convolution (chapter 1)
    figures     what every chapter's figures share: the architecture map, loss curves, helpers
    attention_figures, masking_figures, embedding_figures, block_figures, training_figures,
    decoding_figures, beyond_figures    each chapter's own figures (chapters 1 to 7)

Import the modules (``from transformer_lib.book.figures import attention_heatmap``); this file
imports none of them, so ``transformer_lib.book.experiment`` does not pull in altair.
"""

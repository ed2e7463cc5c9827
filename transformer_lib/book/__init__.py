"""What exists for the book and not for the model: the model core never imports this package.

    source      ``show_source``: a chapter shows the library's code as it runs, without docstrings
    charts      the offline, interactive altair renderer (``enable_charts()``; nothing on import)
    figures     the chapters' figures (altair charts and matplotlib axes)
    experiment  the fast/full experiment-size switch (``TRANSFORMER_BOOK_PROFILE``, ``pick``)
    results     the committed results of longer runs, shown as tables (chapters 3, 5, 6)
    artifacts   a trained model's translations, samples and attention weights, committed as JSON
                (``python -m transformer_lib.book.artifacts``; chapters 5 and 6 show them)
    measure     the memory probe of chapter 7 and the benchmarks

Import the modules (``from transformer_lib.book.figures import attention_heatmap``); this file
imports none of them, so ``transformer_lib.book.experiment`` does not pull in altair.
"""

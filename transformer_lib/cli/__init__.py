"""The applications built on the library: the two command lines and everything about runs.

    train        python -m transformer_lib.cli.train: train, resume, evaluate, write results
    translate    python -m transformer_lib.cli.translate: translate sentences, or BLEU on Multi30k
    options      RunConfig (a run's settings) and SessionOptions: one command-line option per field
    profiles     the fast/full experiment-size switch and the training defaults of each
    runs         the output folder: its lock, earlier results moved aside, results written atomically
    provenance   the command, hardware, software and git commit a results file records
    results      metrics.json and loss.png
    common       one-line errors, exit status 2

This package imports the core (``transformer_lib.*``) and nothing of the book
(``transformer_lib.book``), which may import it (``tests/test_layout.py`` reads the imports).
"""

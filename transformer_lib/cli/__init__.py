"""The applications built on the library: the command lines and everything about runs.

    train        transformer-train (python -m transformer_lib.cli.train): train, resume, evaluate, write results
    translate    transformer-translate (python -m transformer_lib.cli.translate): translate, n-best, BLEU/chrF
    export       python -m transformer_lib.cli.export: a run's model as the shipped pretrained file
    onnx_export  python -m transformer_lib.cli.onnx_export: the shipped model as ONNX for onnxruntime(-web)
    nbest        the translate command's files (stdin, .gz) and its Moses-format n-best lists
    interrupt    Ctrl-C/SIGTERM: finish the step, checkpoint, exit 130/143; a second one stops at once
    logs         metrics.jsonl while training, TensorBoard if asked
    options      RunConfig (a run's settings) and SessionOptions: one command-line option per field
    profiles     the fast/full experiment-size switch and the training defaults of each
    runs         the output folder: its lock, earlier results moved aside, results written atomically
    provenance   the command, hardware, software and git commit a results file records
    history      a recorded run's command as it was run, and the command that makes the same run today
    results      metrics.json and loss.png
    common       one-line errors, exit statuses (2 usage, 1 failure, 130/143 signals), --version, --threads
    console      a logging logger per module, --quiet/--log-file/--log-level, a progress bar only on a terminal

This package imports the core (``transformer_lib.*``) and nothing of the book
(``transformer_lib.book``), which may import it (``tests/test_layout.py`` reads the imports).
"""

"""The shipped model as ONNX, for ONNX Runtime (in a browser, ``onnxruntime-web``): ``python -m transformer_lib.cli.onnx_export --out DIR``.

    python -m transformer_lib.cli.onnx_export --out site-model/

writes four files into ``DIR`` (``--out`` has no default: nothing is written into the package)::

    encoder.onnx     src (B, S) int64 -> memory (B, S, D) float32
    decoder.onnx     tgt (B, T) int64, memory (B, S, D), src (B, S) int64 ->
                     logits (B, V) of the token after tgt, cross_attention (N, B, H, T, S)
    tokenizer.json   the BPE vocabulary and merges (the library's ``to_dict``; normalisation and
                     splitting are :mod:`transformer_lib.subword`'s)
    model.json       what a runtime needs besides: the special ids, the source format, the length
                     limits, the decoding chosen on validation, and each file's size and SHA-256

The decoder runs one step without a key/value cache: it reads the whole prefix, from ``<bos>``, and
gives the scores of the next token (the uncached path of
:func:`transformer_lib.decoding.next_token_logits`, with the same causal mask), and the
cross-attention weights of every layer and head for the whole prefix (:meth:`Transformer.attention_maps`'
``decoder_cross``, stacked), which a page can draw. ``B``, ``S`` and ``T`` are dynamic axes.
The graphs come from PyTorch's ONNX exporter (``torch.onnx.export(dynamo=True)``, which needs
``onnxscript``). The shipped weights are half precision and the model computes in float32, as
:func:`transformer_lib.pretrained.load` does: each weight that float16 holds exactly is stored in
float16 and cast to float32 when the graph is loaded (half the download, the same numbers).

:class:`OnnxTranslator` runs the files with ``onnxruntime`` and decodes greedily by the library's rules
(:func:`transformer_lib.decoding.greedy_decode` as :meth:`Translator.translate` calls it), so that
``tests/test_onnx_export.py`` can check them against PyTorch, and a port (the browser's JavaScript) has a
reference in Python. ``onnx``, ``onnxscript`` and ``onnxruntime`` are the ``[onnx]`` extra:
``pip install 'tested-transformer[onnx]'``.

Shapes::

    B  batch size    S  source length    T  target prefix length (with <bos>)    D  model width
    H  heads         N  decoder layers   V  target vocabulary size
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .. import pretrained
from ..batching import SOURCE_FORMAT
from ..masking import causal_mask, padding_mask
from ..model import Transformer
from ..multi30k import sha256_file
from ..tokenizers import tokenizer_from_dict
from ..translator import EXTRA_OUTPUT_TOKENS, SOURCE_FORMATS, Translator
from .common import CommandLineParser, run_command

__all__ = ["EXTRA", "FILES", "FORMAT", "EncoderGraph", "DecoderStepGraph", "require_onnx", "export_onnx",
           "store_exact_float16", "OnnxTranslator", "main"]

EXTRA = "onnx"  # pyproject.toml's optional dependencies for this module
FORMAT = "tested-transformer-onnx"
FILES = ("encoder.onnx", "decoder.onnx", "tokenizer.json", "model.json")


def require_onnx(*modules: str) -> None:
    """Import ``modules`` (default: what exporting needs), or say which extra installs them."""
    import importlib

    for name in modules or ("onnx", "onnxscript", "onnxruntime"):
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ImportError(f"{name} is not installed ({error}); the ONNX export needs the [{EXTRA}] extra: "
                              f"pip install 'tested-transformer[{EXTRA}]'") from None


class EncoderGraph(nn.Module):
    """``src (B, S)`` -> ``memory (B, S, D)``, with the padding mask made inside from ``pad_id``."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor) -> Tensor:
        return self.model.encode(src, padding_mask(src, self.model.config.pad_id))  # (B, S, D)


class DecoderStepGraph(nn.Module):
    """One uncached decoding step: ``tgt (B, T)``, ``memory (B, S, D)``, ``src (B, S)`` ->
    ``(logits (B, V), cross_attention (N, B, H, T, S))``."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, tgt: Tensor, memory: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
        model, T = self.model, tgt.size(1)
        src_mask = padding_mask(src, model.config.pad_id)  # (B, 1, 1, S)
        tgt_mask = causal_mask(T, T, device=tgt.device)  # (1, 1, T, T), as next_token_logits makes it
        h, _, cross = model.decoder(model._embed_target(tgt, 0), memory, src_mask, tgt_mask, need_weights=True)
        return model.output_layer(h[:, -1]), torch.stack(cross)  # (B, V), (N, B, H, T, S)


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Without the exporter's chatter: its progress lines ("[torch.onnx] ...", printed; a failure
    raises), "torchvision is not installed" (logged), the note that src and memory share their axes
    (they do, on purpose) and a deprecation inside torch's own pytree code."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.filterwarnings("ignore", message=r"# The axis name: \w+ will not be used")
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                    category=FutureWarning)
            yield
    finally:
        registration.setLevel(level)


def _export_graph(module: nn.Module, args: tuple[Tensor, ...], path: Path, names: dict[str, Any]) -> None:
    """``torch.onnx.export`` (the dynamo exporter) into one file, then the float16 storage."""
    import onnx

    batch, source, target = (torch.export.Dim(name, min=1) for name in ("batch", "source_length", "target_length"))
    axes = {"src": {0: batch, 1: source}, "memory": {0: batch, 1: source}, "tgt": {0: batch, 1: target}}
    with _quiet_exporter():
        program = torch.onnx.export(module, args, dynamo=True, input_names=names["inputs"],
                                    output_names=names["outputs"], dynamic_shapes=tuple(axes[name] for name in names["inputs"]))
    if program is None:
        raise RuntimeError("torch.onnx.export returned no ONNX program")
    proto = program.model_proto
    # The exporter notes each node's Python stack trace and module path (this checkout's paths, and
    # __main__ when run with -m): dropped, so the same model always gives the same bytes.
    for holder in (proto, proto.graph, *proto.graph.node):
        del holder.metadata_props[:]
    store_exact_float16(proto)
    onnx.checker.check_model(proto)
    onnx.save_model(proto, str(path))


def store_exact_float16(proto: Any) -> int:
    """Store each float32 initializer of ``proto`` (an ``onnx.ModelProto``, changed in place) that
    float16 holds exactly as float16, cast back to float32 by a ``Cast`` node at the graph's start:
    the same numbers in half the bytes (the shipped weights were stored in float16). A value float16
    cannot hold (the sinusoid table) stays float32. Returns how many were converted."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    casts = []
    for initializer in proto.graph.initializer:
        if initializer.data_type != TensorProto.FLOAT:
            continue
        values = numpy_helper.to_array(initializer)
        with np.errstate(over="ignore"):  # a value beyond float16's range becomes inf, and stays float32
            half = values.astype(np.float16)
        if not np.array_equal(half.astype(np.float32), values):
            continue
        name = initializer.name
        initializer.CopyFrom(numpy_helper.from_array(half, f"{name}.float16"))
        casts.append(helper.make_node("Cast", [f"{name}.float16"], [name], to=TensorProto.FLOAT, name=f"{name}.cast"))
    nodes = [*casts, *proto.graph.node]  # the casts before every node that reads them
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return len(casts)


def _manifest(translator: Translator) -> dict[str, Any]:
    config, vocab = translator.model.config, translator.tgt_vocab
    source_format = translator.data.get("source_format", SOURCE_FORMAT)
    add_bos, add_eos = SOURCE_FORMATS[source_format]
    return {
        "format": FORMAT, "format_version": "1", "task": translator.task,
        "languages": {"source": translator.data.get("src_lang"), "target": translator.data.get("tgt_lang")},
        "special_ids": {"pad": vocab.pad_id, "unk": vocab.unk_id, "bos": vocab.bos_id, "eos": vocab.eos_id},
        "source": {"format": source_format, "add_bos": add_bos, "add_eos": add_eos, "max_tokens": config.max_len},
        # Translator.translate_ids: at most max_len tokens, and at most this many more than the source
        "output": {"max_tokens": config.max_len, "extra_tokens": EXTRA_OUTPUT_TOKENS, "min_tokens": 1,
                   "never": sorted({vocab.bos_id, vocab.pad_id} - {vocab.eos_id})},
        "decoding": dict(translator.decoding),
        "model": {"d_model": config.d_model, "n_heads": config.n_heads, "n_encoder_layers": config.n_encoder_layers,
                  "n_decoder_layers": config.n_decoder_layers, "vocab_size": config.tgt_vocab_size},
    }


def export_onnx(translator: Translator, out: str | Path) -> dict[str, Any]:
    """Write :data:`FILES` for ``translator`` into the folder ``out`` (made if missing); returns
    ``model.json``'s content. The export traces one small batch (two sentences)."""
    require_onnx()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = translator.model.eval()
    src, _ = translator.encode(["Ein Hund rennt.", "Zwei Männer spielen Fußball im Park."])  # (2, S): one padded
    tgt = torch.full((2, 3), translator.tgt_vocab.bos_id, dtype=torch.long)  # (2, T)
    with torch.no_grad():
        memory = model.encode(src, padding_mask(src, model.config.pad_id))  # (2, S, D)
        _export_graph(EncoderGraph(model).eval(), (src,), out / "encoder.onnx", {"inputs": ["src"], "outputs": ["memory"]})
        _export_graph(DecoderStepGraph(model).eval(), (tgt, memory, src), out / "decoder.onnx",
                      {"inputs": ["tgt", "memory", "src"], "outputs": ["logits", "cross_attention"]})
    (out / "tokenizer.json").write_text(json.dumps(translator.tgt_tokenizer.to_dict(), ensure_ascii=False), encoding="utf-8")
    manifest = _manifest(translator)
    manifest["files"] = {name: {"bytes": (out / name).stat().st_size, "sha256": sha256_file(out / name)}
                         for name in FILES[:3]}
    (out / "model.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return manifest


class OnnxTranslator:
    """The exported files run by ``onnxruntime``: greedy translation by the library's rules.

    Args:
        folder: what :func:`export_onnx` wrote.
        threads: ``onnxruntime``'s intra-op threads (1: as the tests run).

    Attributes:
        load_seconds: how long creating the two sessions took (reading and optimising the graphs).
    """

    def __init__(self, folder: str | Path, threads: int = 1) -> None:
        require_onnx("onnxruntime")
        import onnxruntime

        folder = Path(folder)
        self.manifest = json.loads((folder / "model.json").read_text(encoding="utf-8"))
        self.tokenizer = tokenizer_from_dict(json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = threads
        started = time.perf_counter()
        self.encoder, self.decoder = (
            onnxruntime.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])
            for name in ("encoder.onnx", "decoder.onnx"))
        self.load_seconds = time.perf_counter() - started

    def source_ids(self, sentence: str) -> list[int]:
        """A sentence as encoder input: its pieces' ids and the specials of the source format."""
        vocab, source = self.tokenizer.vocab, self.manifest["source"]
        return vocab.encode(self.tokenizer.tokenize(sentence), source["add_bos"], source["add_eos"])

    def encode(self, src: Any) -> Any:
        """``src (B, S)`` int64 array -> ``memory (B, S, D)``."""
        return self.encoder.run(None, {"src": src})[0]

    def step(self, tgt: Any, memory: Any, src: Any) -> tuple[Any, Any]:
        """``(logits (B, V), cross_attention (N, B, H, T, S))`` for prefixes ``tgt (B, T)``."""
        logits, cross = self.decoder.run(None, {"tgt": tgt, "memory": memory, "src": src})
        return logits, cross

    def greedy_ids(self, rows: Sequence[Sequence[int]]) -> list[list[int]]:
        """Greedy decoding of encoder inputs (padded into one batch): each row's generated ids up to and
        including ``<eos>``, as :func:`~transformer_lib.decoding.greedy_decode` with the translator's
        settings (at most ``min(max_len, S + extra)`` tokens, no ``<eos>`` first, never ``<bos>``/``<pad>``)."""
        import numpy as np

        ids, output = self.manifest["special_ids"], self.manifest["output"]
        width = max(len(row) for row in rows)
        src = np.array([[*row, *[ids["pad"]] * (width - len(row))] for row in rows], dtype=np.int64)  # (B, S)
        memory = self.encode(src)
        tokens = np.full((len(rows), 1), ids["bos"], dtype=np.int64)  # (B, 1)
        finished = np.zeros(len(rows), dtype=bool)
        for step in range(min(output["max_tokens"], width + output["extra_tokens"])):
            logits, _ = self.step(tokens, memory, src)  # (B, V)
            logits[:, output["never"]] = -np.inf
            if step < output["min_tokens"]:
                logits[:, ids["eos"]] = -np.inf
            next_token = np.where(finished, ids["pad"], logits.argmax(axis=-1))  # (B,)
            finished |= next_token == ids["eos"]
            tokens = np.concatenate([tokens, next_token[:, None]], axis=1)  # (B, T + 1)
            if finished.all():
                break
        return [[int(i) for i in row[1:] if i != ids["pad"]] for row in tokens]

    def translate(self, sentences: Sequence[str]) -> list[str]:
        """Each sentence translated greedily on its own (as a page does), detokenized as Python does."""
        vocab = self.tokenizer.vocab
        return [self.tokenizer.detokenize(vocab.decode(self.greedy_ids([self.source_ids(s)])[0])) for s in sentences]


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m transformer_lib.cli.onnx_export", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write the files into (made if missing)")
    parser.add_argument("--pretrained", type=Path, default=None,
                        help=f"a model file in the pretrained format (default: the shipped {pretrained.FILE_NAME})")
    args = parser.parse_args(argv)
    try:
        require_onnx()
    except ImportError as error:  # one line, as every user error of the command lines
        print(f"error: {error}", file=sys.stderr)
        return 2

    def run() -> None:
        started = time.perf_counter()
        manifest = export_onnx(pretrained.load(args.pretrained), args.out)
        for name, file in manifest["files"].items():
            print(f"{args.out / name}: {file['bytes']:,} bytes, sha256 {file['sha256']}")
        print(f"exported in {time.perf_counter() - started:.0f} s")

    return run_command(run, argv)


if __name__ == "__main__":
    raise SystemExit(main())

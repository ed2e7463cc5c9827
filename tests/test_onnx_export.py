"""The shipped model exported as ONNX (transformer_lib.cli.onnx_export) and run by onnxruntime gives
PyTorch's logits to float32 rounding and PyTorch's greedy translations.

Needs the [onnx] extra (onnx, onnxscript, onnxruntime). The export is done once for the module (about a
minute and a half on a loaded 2-core machine); ``pytest -s`` prints the files' sizes and load time.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_lib import pretrained
from transformer_lib.cli import onnx_export
from transformer_lib.cli.onnx_export import OnnxTranslator, export_onnx, store_exact_float16
from transformer_lib.decoding import next_token_logits
from transformer_lib.masking import padding_mask
from transformer_lib.translator import Translator, read_multi30k_split

ROOT = Path(__file__).resolve().parents[1]
UNIT_ROUNDOFF = 2.0**-24  # float32


@pytest.fixture(scope="module")
def shipped() -> Translator:
    return pretrained.load()


@pytest.fixture(scope="module")
def exported(shipped, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("onnx")
    package = sorted(p.name for p in pretrained.shipped_path().parent.iterdir())
    export_onnx(shipped, folder)
    assert sorted(p.name for p in pretrained.shipped_path().parent.iterdir()) == package  # nothing written there
    return folder


@pytest.fixture(scope="module")
def runtime(exported) -> OnnxTranslator:
    runtime = OnnxTranslator(exported)
    sizes = ", ".join(f"{name} {file['bytes'] / 1e6:.1f} MB" for name, file in runtime.manifest["files"].items())
    print(f"\nONNX files: {sizes}; both sessions created in {runtime.load_seconds:.2f} s")
    return runtime


def tolerance(translator: Translator, scale: float) -> float:
    """The float32 rounding two correct implementations may differ by, for values of size ``scale``.

    Each sublayer sums at most ``max(d_model, d_ff)`` products, whose rounding errors grow like
    ``sqrt(n) * u`` of the sum's scale (the probabilistic bound, Higham & Mary 2019), and the residual
    stream carries the errors of every sublayer before: two per encoder layer, three per decoder
    layer, and the output layer. For the shipped model (1,024 products, 16 sublayers) that is
    ``3.1e-5 * scale``. A real fault is far above it: computing in float16 instead (u = 2**-11) is
    8,192 times larger, and a wrong mask or position changes logits by whole units.
    """
    c = translator.model.config
    sublayers = 2 * c.n_encoder_layers + 3 * c.n_decoder_layers + 1
    return sublayers * math.sqrt(max(c.d_model, c.d_ff)) * UNIT_ROUNDOFF * scale


def examples() -> list[str]:
    """The German sentences the shipped file's record carries (no data files needed)."""
    return [example["source"] for example in pretrained.info().run["examples"]]


def _torch_step(translator: Translator, src: torch.Tensor, tgt: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's uncached next-token logits ``(B, V)`` for prefixes ``tgt``, and its decoder
    cross-attention ``(N, B, H, T, S)``."""
    model = translator.model
    src_mask = padding_mask(src, model.config.pad_id)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        logits = next_token_logits(model, tgt, memory, src_mask)
        cross = torch.stack(model.attention_maps(src, tgt).decoder_cross)
    return logits.numpy(), cross.numpy()


def _prefixes(translator: Translator, sentences: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded source batch and the PyTorch greedy outputs as prefixes ``<bos> y_1 .. y_{n-1}``."""
    src, src_mask = translator.encode(sentences)
    out = translator.translate_ids(src, src_mask, beam_size=1)  # (B, T_out)
    bos = torch.full((len(sentences), 1), translator.tgt_vocab.bos_id, dtype=torch.long)
    return src, torch.cat([bos, out[:, :-1]], dim=1)


def _compare_steps(translator: Translator, runtime: OnnxTranslator, sentences: list[str]) -> tuple[float, float]:
    """Max |logit| difference and max cross-attention difference (ONNX vs PyTorch), each checked
    against :func:`tolerance`, at every prefix length of every sentence (one at a time, as a page runs)."""
    worst_logit = worst_attention = largest = 0.0
    for sentence in sentences:
        src, prefix = _prefixes(translator, [sentence])
        memory = runtime.encode(src.numpy())
        for t in range(1, prefix.size(1) + 1):
            expected, expected_cross = _torch_step(translator, src, prefix[:, :t])
            logits, cross = runtime.step(prefix[:, :t].numpy(), memory, src.numpy())
            assert logits.shape == expected.shape and cross.shape == expected_cross.shape
            difference, scale = float(np.abs(logits - expected).max()), float(np.abs(expected).max())
            assert difference <= tolerance(translator, scale), (sentence, t, difference)
            largest = max(largest, scale)
            worst_logit = max(worst_logit, difference)
            worst_attention = max(worst_attention, float(np.abs(cross - expected_cross).max()))
    assert worst_attention <= tolerance(translator, 1.0)
    print(f"\n{len(sentences)} sentences, every step: max |logit difference| {worst_logit:.2e} (tolerance "
          f"{tolerance(translator, largest):.2e} at the largest |logit|, {largest:.1f}), max |cross-attention "
          f"difference| {worst_attention:.2e} (tolerance {tolerance(translator, 1.0):.2e})")
    return worst_logit, worst_attention


def _explained_by_a_tie(translator: Translator, sentence: str, ours: list[str], theirs: list[str]) -> bool:
    """Two greedy outputs may part only where PyTorch's two best next tokens are within float32
    rounding of each other (a tie that either implementation may break either way)."""
    common = next(i for i, (a, b) in enumerate(zip([*ours, None], [*theirs, None])) if a != b)
    vocab = translator.tgt_vocab
    src, _ = translator.encode([sentence])
    prefix = torch.tensor([[vocab.bos_id, *vocab.encode(theirs[:common])]])
    logits, _ = _torch_step(translator, src, prefix)
    best, second = np.sort(logits[0])[-2:][::-1]
    return best - second <= 2 * tolerance(translator, float(np.abs(logits).max()))


def test_exact_float16_storage_keeps_every_value():
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    exact = np.array([[0.5, -2.0], [1024.0, 0.099975586]], dtype=np.float32)  # all float16 values
    inexact = np.array([0.1, 1e-8], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["exact", "x"], ["y"]), helper.make_node("Mul", ["y", "inexact"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 2])],
        [numpy_helper.from_array(exact, "exact"), numpy_helper.from_array(inexact, "inexact")])
    proto = helper.make_model(graph)
    assert store_exact_float16(proto) == 1
    onnx.checker.check_model(proto)
    stored = {i.name: i for i in proto.graph.initializer}
    assert stored["exact.float16"].data_type == TensorProto.FLOAT16 and stored["inexact"].data_type == TensorProto.FLOAT
    assert proto.graph.node[0].op_type == "Cast"
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.ones((2, 2), dtype=np.float32)
    [z] = session.run(None, {"x": x})
    np.testing.assert_array_equal(z, (exact + x) * inexact)


def test_a_missing_runtime_names_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    with pytest.raises(ImportError, match=r"\[onnx\]"):
        onnx_export.require_onnx()
    assert onnx_export.main(["--out", str(tmp_path / "out")]) == 2
    assert "[onnx]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_files_describe_themselves(shipped, exported, runtime):
    import onnx

    manifest = json.loads((exported / "model.json").read_text(encoding="utf-8"))
    assert sorted(p.name for p in exported.iterdir()) == sorted(onnx_export.FILES)
    for name, file in manifest["files"].items():
        assert pretrained.sha256_of(exported / name) == file["sha256"]
        # no stack traces naming this checkout's files: the same model gives the same bytes anywhere
        assert str(ROOT).encode() not in (exported / name).read_bytes()
    vocab = shipped.tgt_vocab
    assert manifest["special_ids"] == {"pad": vocab.pad_id, "unk": vocab.unk_id, "bos": vocab.bos_id, "eos": vocab.eos_id}
    assert json.loads((exported / "tokenizer.json").read_text(encoding="utf-8")) == shipped.tgt_tokenizer.to_dict()
    assert [runtime.source_ids(s) for s in examples()] == shipped.source_ids(examples())
    # the weights are stored in half precision: the two files hold about 2 bytes per parameter each
    parameters = sum(p.numel() for p in shipped.model.parameters())
    onnx_bytes = manifest["files"]["encoder.onnx"]["bytes"] + manifest["files"]["decoder.onnx"]["bytes"]
    assert onnx_bytes < 4 * parameters, (onnx_bytes, parameters)  # float32 storage would be over 4 bytes each
    axes = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in onnx.load(str(exported / "decoder.onnx")).graph.input}
    assert axes == {"tgt": ["batch", "target_length"], "memory": ["batch", "source_length", shipped.model.config.d_model],
                    "src": ["batch", "source_length"]}


def test_logits_and_cross_attention_match_pytorch(shipped, runtime):
    _compare_steps(shipped, runtime, examples())


def test_a_padded_batch_matches_pytorch(shipped, runtime):
    """Batch and length axes are dynamic: a padded batch of five, and one sentence at its first step."""
    src, prefix = _prefixes(shipped, examples())
    for tokens, source in ((prefix, src), (prefix[:1, :1], src[:1])):
        expected, _ = _torch_step(shipped, source, tokens)
        logits, _ = runtime.step(tokens.numpy(), runtime.encode(source.numpy()), source.numpy())
        assert np.abs(logits - expected).max() <= tolerance(shipped, float(np.abs(expected).max()))


def test_greedy_translations_match_pytorch(shipped, runtime):
    assert runtime.translate(examples()) == shipped.translate(examples(), beam_size=1)
    rows = shipped.source_ids(examples())
    assert runtime.greedy_ids(rows) == [
        [i for i in row if i != shipped.tgt_vocab.pad_id]
        for row in shipped.translate_ids(*shipped.encode(examples()), beam_size=1).tolist()]


@pytest.mark.multi30k
def test_the_first_200_test_sentences(shipped, runtime, real_multi30k):
    sentences = [source for source, _ in read_multi30k_split("test", real_multi30k, "de", "en")[:200]]
    theirs = shipped.translate_tokens(sentences, beam_size=1)
    vocab = runtime.tokenizer.vocab
    ours = [vocab.decode(runtime.greedy_ids([runtime.source_ids(s)])[0]) for s in sentences]
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    print(f"\ngreedy translations identical to PyTorch's: {len(sentences) - len(differ)} of {len(sentences)}")
    assert all(_explained_by_a_tie(shipped, sentences[i], ours[i], theirs[i]) for i in differ), differ
    _compare_steps(shipped, runtime, sentences[:40])

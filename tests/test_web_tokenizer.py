"""web/tokenizer.js, the shipped model's BPE tokenizer in JavaScript (issue 49, item 3), gives the same
pieces, ids and text as the Python tokenizer (transformer_lib.subword), run under Node.js.

Needs ``node`` (Debian: the ``nodejs`` package); without it the tests are skipped, unless
REQUIRE_NODE=1, where they fail (a check that silently did not run must not look like a pass).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from transformer_lib import pretrained
from transformer_lib.tokenizers import tokenizer_from_dict
from transformer_lib.translator import read_multi30k_split

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "web" / "tokenizer.js"

# Reads {tokenizer, texts, pieces} from the file named first; writes, for each text, its pieces and
# ids, and the text of each list of pieces.
RUNNER = """
const fs = require("fs");
const { fromJSON } = require(process.argv[1]);
const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const tokenizer = fromJSON(input.tokenizer);
const output = {
  pieces: input.texts.map((text) => tokenizer.tokenize(text)),
  ids: input.texts.map((text) => tokenizer.encode(text)),
  text: input.pieces.map((pieces) => tokenizer.detokenize(pieces)),
};
fs.writeFileSync(process.argv[3], JSON.stringify(output));
"""

# What a reader may type besides plain sentences: every step of the pipeline where it could differ.
EDGE_CASES = [
    "", " ", "\t\n", "  Ein   Hund\trennt.\n", "Ein\u00a0Hund\u2009rennt\u3000schnell.", "Ein\u0085Hund\ufeffrennt.",
    "Straße, Äpfel, Öfen; Übermut!", "Cafe\u0301 mit Ko\u0308nig",  # combining accents: NFKC composes them
    "\ufb01nden \u2460 \uff21\uff22\uff23 \u00bd x\u00b2",  # ligature, circled digit, full width, fraction: NFKC
    "\u201eJa\u201c, sagte er \u2013 \u00bbnein\u00ab \u2026 (vielleicht) [oder] {so} <gut>?!",
    "a$b+c<d=e>f^g`h|i~j #1 @2 %3 &4 *5 /6 \\7 _8 -9 'x' \"y\"",
    "\u2581Ein \u2581\u2581Hund\u2581", "Ein <unk> Hund <eos>", "<bos>Ein Hund<pad>", "<UNK> <Eos>",
    "\u6f22\u5b57 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \U0001f436\U0001f415",
    "Donaudampfschifffahrtsgesellschaftskapit\u00e4nsm\u00fctze", "1.000,50 \u20ac und 3,5 % um 12:30 Uhr",
]


def _node() -> str:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        message = "Node.js is not installed (Debian: apt-get install nodejs)"
        if os.environ.get("REQUIRE_NODE") == "1":
            pytest.fail(message + " and REQUIRE_NODE=1")
        pytest.skip(message)
    return node


@pytest.fixture(scope="module")
def tokenizer_data() -> dict:
    return pretrained.info().tokenizer


def run_in_node(tmp_path: Path, data: dict, texts: list[str], pieces: list[list[str]]) -> dict:
    source, result = tmp_path / "input.json", tmp_path / "output.json"
    source.write_text(json.dumps({"tokenizer": data, "texts": texts, "pieces": pieces}, ensure_ascii=False), encoding="utf-8")
    subprocess.run([_node(), "-e", RUNNER, str(SCRIPT), str(source), str(result)], check=True, timeout=300)
    return json.loads(result.read_text(encoding="utf-8"))


def check_same(tmp_path: Path, data: dict, texts: list[str]) -> int:
    """JavaScript against Python on ``texts``: pieces, ids, and the text of Python's pieces."""
    python = tokenizer_from_dict(data)
    pieces = [python.tokenize(text) for text in texts]
    node = run_in_node(tmp_path, data, texts, pieces)
    differ = [(text, js, py) for text, js, py in zip(texts, node["pieces"], pieces) if js != py]
    assert not differ, f"{len(differ)} of {len(texts)} texts split differently, e.g. {differ[:3]}"
    assert node["ids"] == [python.vocab.encode(p) for p in pieces]
    assert node["text"] == [python.detokenize(p) for p in pieces]
    return len(texts)


def test_the_record_and_the_edge_cases(tmp_path, tokenizer_data):
    sources = [example["source"] for example in pretrained.info().run["examples"]]
    references = [example["reference"] for example in pretrained.info().run["examples"]]
    check_same(tmp_path, tokenizer_data, sources + references + EDGE_CASES)


def test_a_lowercasing_tokenizer(tmp_path):
    from transformer_lib.subword import SubwordTokenizer

    texts = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "A man rides a bike.", "Two dogs play."] * 5
    data = SubwordTokenizer.train(texts, vocab_size=60, lowercase=True).to_dict()
    check_same(tmp_path, data, ["EIN MANN, zwei Hunde!", "ÄRGER <UNK>", *texts[:4]])


@pytest.mark.multi30k
def test_every_sentence_of_test_2016_and_validation(tmp_path, tokenizer_data, real_multi30k):
    texts = [side for split in ("test", "val") for pair in read_multi30k_split(split, real_multi30k, "de", "en")
             for side in pair]
    count = check_same(tmp_path, tokenizer_data, texts)
    print(f"\n{count} sentences (test 2016 and validation, German and English): the same pieces, ids and text")

"""Tests of transformer_lib.data: tokenizers, Vocab, the Multi30k loader, toy tasks and batching.

Everything here runs without the dataset and without a network: tests/fixtures/multi30k is a tiny
made-up corpus in Multi30k's layout with its own checksums. The few tests marked ``multi30k`` read
the real files from MULTI30K_DIR; they skip without them, unless REQUIRE_MULTI30K=1 (CI), where a
missing dataset is a failure.
"""

from __future__ import annotations

import gzip
import shutil
import urllib.error
from pathlib import Path

import pytest
import torch

from transformer_lib import data
from transformer_lib.data import (
    BOS,
    EOS,
    MULTI30K_SHA256,
    PAD,
    SPECIALS,
    UNK,
    BucketBatchSampler,
    ChecksumError,
    PreparedTranslation,
    TranslationData,
    Vocab,
    collate,
    load_multi30k,
    make_loader,
    multi30k_dir,
    padding_waste,
    prepare_multi30k,
    toy_task,
    toy_vocab,
    tokenizer,
)

FIXTURE = Path(__file__).parent / "fixtures" / "multi30k"
FIXTURE_SHA256 = {line.split()[1]: line.split()[0] for line in (FIXTURE / "SHA256SUMS").read_text().splitlines()}


@pytest.fixture
def no_multi30k_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No MULTI30K_DIR, and an empty user cache in tmp_path."""
    monkeypatch.delenv(data.MULTI30K_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "transformer_lib" / "multi30k"


# --- tokenizer and Vocab -------------------------------------------------------------------------


def test_tokenizer_splits_punctuation_and_keeps_abbreviations() -> None:
    assert tokenizer("de")("Ein Mann, z.B. hier.") == ["Ein", "Mann", ",", "z.B.", "hier", "."]
    assert tokenizer("en")("It isn't red.") == ["It", "is", "n't", "red", "."]


def test_spacy_tokens_keep_whitespace_for_detokenization() -> None:
    doc = data._blank_pipeline("en").tokenizer("A man, running.")
    assert "".join(token.text + token.whitespace_ for token in doc) == "A man, running."


def test_vocab_specials_first_min_freq_and_tie_order() -> None:
    vocab = Vocab.build([["b", "a", "b"], ["a", "c", "b"]], min_freq=2)
    assert vocab.tokens == [*SPECIALS, "b", "a"]  # b (3) before a (2); c (1) is below min_freq
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    ties = Vocab.build([["z", "y", "x"]])
    assert ties.tokens[4:] == ["x", "y", "z"]  # equal counts: alphabetical, so ids are reproducible


def test_vocab_unknown_tokens_map_to_unk_and_ids_round_trip() -> None:
    vocab = Vocab.build([["hallo", "welt"]])
    ids = vocab.encode(["hallo", "mond", "welt"], add_bos=True, add_eos=True)
    assert ids == [vocab.bos_id, vocab.token_to_id("hallo"), vocab.unk_id, vocab.token_to_id("welt"), vocab.eos_id]
    assert vocab.decode(ids) == ["hallo", UNK, "welt"]
    assert vocab.decode([*ids, 4], strip_specials=True)[-1] == "welt"  # stops at <eos>
    assert vocab.decode(ids, strip_specials=False) == [BOS, "hallo", UNK, "welt", EOS]


def test_vocab_save_load_and_dict_round_trip(tmp_path: Path) -> None:
    vocab = Vocab.build([["Straße", "Mädchen", "Straße"]])
    vocab.save(tmp_path / "vocab.json")
    assert Vocab.load(tmp_path / "vocab.json") == vocab
    assert Vocab.from_dict(vocab.to_dict()) == vocab


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Vocab([PAD, "a", "a", UNK]), "appears twice"),
        (lambda: Vocab([PAD, "a"]), "unknown token"),
        (lambda: Vocab.build([["a"]], min_freq=0), "min_freq"),
        (lambda: Vocab.build([["a"]]).id_to_token(99), "outside the vocabulary"),
    ],
)
def test_vocab_rejects_bad_input(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


# --- the Multi30k loader -------------------------------------------------------------------------


def test_loader_reads_a_local_folder() -> None:
    pairs = load_multi30k("train", FIXTURE, checksums=FIXTURE_SHA256)
    assert len(pairs) == 60
    with gzip.open(FIXTURE / "train.de.gz", "rt", encoding="utf-8") as de, gzip.open(FIXTURE / "train.en.gz", "rt", encoding="utf-8") as en:
        assert pairs[0] == (de.readline().rstrip("\n"), en.readline().rstrip("\n"))
    reverse = load_multi30k("val", FIXTURE, src_lang="en", tgt_lang="de", checksums=FIXTURE_SHA256)
    assert reverse == [(t, s) for s, t in load_multi30k("val", FIXTURE, checksums=FIXTURE_SHA256)]


def test_loader_reads_the_folder_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.MULTI30K_ENV, str(FIXTURE))
    assert len(load_multi30k("test", checksums=FIXTURE_SHA256)) == 8


def test_loader_detects_a_corrupted_file(tmp_path: Path) -> None:
    folder = tmp_path / "m30k"
    shutil.copytree(FIXTURE, folder)
    blob = bytearray((folder / "val.en.gz").read_bytes())
    blob[-5] ^= 0xFF  # one flipped byte, as a bad disk or an interrupted copy would leave
    (folder / "val.en.gz").write_bytes(bytes(blob))
    with pytest.raises(ChecksumError, match=r"val\.en\.gz has SHA-256 [0-9a-f]{64}, expected " + FIXTURE_SHA256["val.en.gz"]):
        load_multi30k("train", folder, checksums=FIXTURE_SHA256)


def test_loader_refuses_the_real_checksums_for_other_files() -> None:
    """The hard-coded SHA-256 values are what a folder is checked against by default."""
    with pytest.raises(ChecksumError, match="not the published Multi30k release"):
        multi30k_dir(FIXTURE)


def test_missing_files_in_a_given_folder_say_where_to_put_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.de.gz").write_bytes((FIXTURE / "train.de.gz").read_bytes())
    monkeypatch.setattr(data, "_download", _no_network)  # a given folder must never be downloaded into
    with pytest.raises(FileNotFoundError) as error:
        load_multi30k("train", tmp_path, checksums=FIXTURE_SHA256)
    message = str(error.value)
    assert str(tmp_path) in message and "MULTI30K_DIR" in message and "train.en.gz" in message
    assert "train.de.gz'" not in message.split("missing")[0]  # the file that is there is not listed


def _no_network(url: str, destination: Path, timeout: float = 60.0) -> None:
    raise urllib.error.URLError("no network in this test")


def test_no_data_and_no_network_gives_a_clear_error(no_multi30k_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "_download", _no_network)
    with pytest.raises(FileNotFoundError) as error:
        load_multi30k("train", checksums=FIXTURE_SHA256)
    message = str(error.value)
    for expected in ("MULTI30K_DIR", str(no_multi30k_env), data.MULTI30K_URL, "no network in this test", "internet"):
        assert expected in message
    assert not any(no_multi30k_env.glob("*"))  # nothing half-downloaded left behind


def test_download_fills_the_cache_once_and_verifies(no_multi30k_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The download path, served from the fixture folder through a file:// URL."""
    fetched: list[str] = []
    real_download = data._download

    def counting_download(url: str, destination: Path, timeout: float = 60.0) -> None:
        fetched.append(url)
        real_download(url, destination, timeout)

    monkeypatch.setattr(data, "_download", counting_download)
    base_url = FIXTURE.resolve().as_uri() + "/"
    pairs = load_multi30k("val", base_url=base_url, checksums=FIXTURE_SHA256)
    assert pairs == load_multi30k("val", FIXTURE, checksums=FIXTURE_SHA256)
    assert sorted(fetched) == sorted(base_url + name for name in FIXTURE_SHA256)
    assert sorted(p.name for p in no_multi30k_env.iterdir()) == sorted(FIXTURE_SHA256)
    load_multi30k("test", base_url=base_url, checksums=FIXTURE_SHA256)
    assert len(fetched) == 6  # the second call reads the cache


def test_a_corrupted_download_is_deleted(no_multi30k_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = tmp_path / "server"
    shutil.copytree(FIXTURE, server)
    (server / "train.en.gz").write_bytes(b"<html>rate limited</html>")
    with pytest.raises(ChecksumError, match="train.en.gz"):
        load_multi30k("train", base_url=server.as_uri() + "/", checksums=FIXTURE_SHA256)
    assert not (no_multi30k_env / "train.en.gz").exists()


def test_download_false_does_not_download(no_multi30k_env: Path) -> None:
    with pytest.raises(FileNotFoundError, match="download=False"):
        multi30k_dir(download=False, checksums=FIXTURE_SHA256)


def test_the_published_urls_and_checksums_are_complete() -> None:
    assert data.MULTI30K_URL == "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
    stems = set(data.MULTI30K_SPLITS.values())
    assert set(MULTI30K_SHA256) == {f"{stem}.{lang}.gz" for stem in stems for lang in ("de", "en")}
    assert all(len(digest) == 64 and int(digest, 16) >= 0 for digest in MULTI30K_SHA256.values())


@pytest.mark.parametrize(("kwargs", "message"), [({"split": "dev"}, "unknown Multi30k split"), ({"split": "train", "src_lang": "fr"}, "languages"), ({"split": "train", "tgt_lang": "de"}, "must differ")])
def test_loader_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_multi30k(root=FIXTURE, checksums=FIXTURE_SHA256, **kwargs)


def test_prepare_builds_vocabularies_on_train_and_round_trips(tmp_path: Path) -> None:
    prepared = prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, min_freq=1)
    assert set(prepared.splits) == {"train", "val", "test"}
    assert prepared.settings["src_lang"] == "de" and prepared.settings["lowercase"] is False
    src, tgt = prepared.text["train"][1]
    ids_src, ids_tgt = prepared.splits["train"][1]
    assert prepared.src_vocab.decode(ids_src) == tokenizer("de")(src)
    assert prepared.tgt_vocab.decode(ids_tgt) == tokenizer("en")(tgt)
    prepared.save(tmp_path / "data.pt")
    loaded = PreparedTranslation.load(tmp_path / "data.pt")
    assert loaded.src_vocab == prepared.src_vocab and loaded.tgt_vocab == prepared.tgt_vocab
    assert all(loaded.splits[s].src == prepared.splits[s].src and loaded.splits[s].tgt == prepared.splits[s].tgt for s in prepared.splits)
    assert loaded.text == prepared.text and loaded.settings == prepared.settings


def test_prepare_subset_and_lowercase() -> None:
    prepared = prepare_multi30k(FIXTURE, checksums=FIXTURE_SHA256, train_size=20, lowercase=True, splits=("train",))
    assert len(prepared.splits["train"]) == 20
    assert all(token == token.lower() for token in prepared.tgt_vocab.tokens)
    assert "Ein" not in prepared.src_vocab and "ein" in prepared.src_vocab


def test_prepared_load_rejects_other_files(tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not prepared translation data"):
        PreparedTranslation.load(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError, match="--prepare-only"):
        PreparedTranslation.load(tmp_path / "missing.pt")


@pytest.mark.multi30k
def test_real_multi30k_sizes_and_checksums(real_multi30k: Path) -> None:
    sizes = {split: len(load_multi30k(split, real_multi30k)) for split in ("train", "val", "test")}
    assert sizes == {"train": 29000, "val": 1014, "test": 1000}  # the dataset's README


# --- toy tasks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_toy_task_targets_and_held_out_split(task: str) -> None:
    train, heldout = toy_task(task, 500, 100, n_symbols=5, min_len=2, max_len=6, seed=3)
    assert (len(train), len(heldout)) == (500, 100)
    for src, tgt in [*train, *heldout]:
        assert tgt == (src if task == "copy" else src[::-1])
        assert 2 <= len(src) <= 6 and all(4 <= i < 9 for i in src)
    train_set = {tuple(s) for s in train.src}
    assert len(train_set) == 500 and not train_set & {tuple(s) for s in heldout.src}
    assert toy_task(task, 500, 100, n_symbols=5, min_len=2, max_len=6, seed=3)[1].src == heldout.src  # seeded
    assert toy_task(task, 500, 100, n_symbols=5, min_len=2, max_len=6, seed=4)[1].src != heldout.src
    assert len(toy_vocab(5)) == 9 and toy_vocab(5).decode(heldout.src[0]) == [str(i - 4) for i in heldout.src[0]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "sort"}, "unknown toy task"),
        ({"n_train": 10_000, "max_len": 3, "n_symbols": 4}, "distinct sequences"),
        ({"min_len": 5, "max_len": 2}, "min_len"),
        ({"n_symbols": 0}, "n_symbols"),
        ({"n_train": -1}, "n_train"),
    ],
)
def test_toy_task_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    arguments = {"task": "reverse", "n_train": 10, "n_heldout": 5, **kwargs}
    with pytest.raises(ValueError, match=message):
        toy_task(arguments.pop("task"), arguments.pop("n_train"), arguments.pop("n_heldout"), **arguments)


# --- batches -------------------------------------------------------------------------------------


def test_collate_shifts_targets_and_pads() -> None:
    batch = collate([([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11])], pad_id=0, bos_id=2, eos_id=3)
    assert batch.src.tolist() == [[5, 6, 7, 3], [5, 3, 0, 0]]
    assert batch.tgt_in.tolist() == [[2, 8, 9, 0, 0], [2, 8, 9, 10, 11]]
    assert batch.tgt_out.tolist() == [[8, 9, 3, 0, 0], [8, 9, 10, 11, 3]]
    shifted = batch.tgt_in[:, 1:] != 0  # tgt_in is tgt_out shifted right by one, wherever it is not padding
    assert torch.equal(batch.tgt_in[:, 1:][shifted], batch.tgt_out[:, :-1][shifted])
    assert batch.n_tokens == int((batch.tgt_out != 0).sum()) == 8
    assert batch.src.dtype == torch.long and len(batch) == 2


def test_sampler_yields_every_index_once_and_is_reproducible() -> None:
    lengths = [int(x) for x in torch.randint(1, 30, (1000,))]
    sampler = BucketBatchSampler(lengths, 32, pool_batches=4, seed=1)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert len(batches) == len(sampler) == 32 and all(len(b) == 32 for b in batches[:-1] if len(b) != 8)
    assert list(sampler) == batches  # same epoch, same batches
    sampler.set_epoch(1)
    assert list(sampler) != batches
    state = torch.get_rng_state()
    list(sampler)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG (dropout's) is untouched
    assert len(BucketBatchSampler(lengths, 32, drop_last=True)) == 31 == len(list(BucketBatchSampler(lengths, 32, drop_last=True)))


def test_sampler_without_shuffle_keeps_order() -> None:
    assert list(BucketBatchSampler([3, 1, 2, 5, 4], 2, bucket=False, shuffle=False)) == [[0, 1], [2, 3], [4]]


def test_padding_waste_by_hand() -> None:
    # batch [0, 1]: lengths 3 and 5 -> 2 pads; batch [2]: none. 2 pads over 3 sequences.
    assert padding_waste([[0, 1], [2]], [3, 5, 4]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no batches"):
        padding_waste([], [1])


def test_bucketing_reduces_padding_waste_on_the_fixture() -> None:
    pairs = load_multi30k("train", FIXTURE, checksums=FIXTURE_SHA256)
    lengths = [len(tokenizer("en")(target)) + 1 for _, target in pairs]
    random_waste = padding_waste(BucketBatchSampler(lengths, 8, bucket=False, seed=0), lengths)
    bucket_waste = padding_waste(BucketBatchSampler(lengths, 8, bucket=True, seed=0), lengths)
    assert random_waste > 2.0  # the fixture's lengths vary (4 to 20 tokens)
    assert bucket_waste < random_waste / 4


def test_make_loader_batches_cover_the_data_and_leave_the_global_rng_alone() -> None:
    train, _ = toy_task("copy", 200, 0, max_len=8)
    loader = make_loader(train, 16, seed=0)
    state = torch.get_rng_state()
    batches = list(loader)
    assert torch.equal(torch.get_rng_state(), state)
    assert sum(len(b) for b in batches) == 200 and len(batches) == len(loader)
    assert sum(b.n_tokens for b in batches) == sum(len(t) + 1 for t in train.tgt)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: BucketBatchSampler([1, 2], 0), "batch_size"),
    (lambda: BucketBatchSampler([], 4), "nothing to batch"),
    (lambda: TranslationData([[1]], []), "pair up"),
    (lambda: collate([]), "empty"),
])
def test_batching_rejects_bad_input(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_translation_data_dict_round_trip() -> None:
    original = TranslationData([[4, 5], [], [6]], [[7], [8, 9, 10], []])
    restored = TranslationData.from_dict(original.to_dict())
    assert restored.src == original.src and restored.tgt == original.tgt

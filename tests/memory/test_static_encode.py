"""The static embedder's fast encode equals model2vec's own, bit for bit."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from memstrata.memory import static_encode
from memstrata.memory.embed import default_embedder
from memstrata.memory.static_encode import WordPieceEncoder

TRICKY = [
    "",
    "   \t\n ",
    "I moved to Lisbon in May!",
    "Hello,world...(really?)  {x: [1, 2]} a_b c-d e'f don't ~`^|\\@#$%&*+=<>/",
    "UPPER lower MiXeD 12ab 3.14 1e10 0x1F",
    "tab\tseparated\r\nlines\rcarriage",
    "|---|---|---|\n| a | b | c |",
    "x" * 150 + " short " + "y" * 101,  # words over WordPiece's 100 characters
    "word " * 700,  # over max_length tokens
    "!" * 600,  # every character a token
    "ab" * 2000,  # one word cut by the character limit
    ("lorem ipsum dolor " * 200)[:3071] + "abcdefgh tail",  # a word across the cut
    "‘quoted’ “double” en–dash em—dash wait…",
    "the [UNK] token and [PAD] and [unk] text",  # special tokens: the full pipeline
    "café naïve résumé",  # accents: the full pipeline
    "日本語のテキスト and English",
    "emoji 😀 inside",
    "control\x00char\x7fdel\x0bvt\x1cfs",
    "supercalifragilisticexpialidocious antidisestablishmentarianism xyzzy plugh",
]


def _reference(texts: list[str]) -> np.ndarray:
    model = default_embedder()._model  # type: ignore[attr-defined]
    return model.encode(texts, use_multiprocessing=False)


def _random_texts(count: int, seed: int) -> list[str]:
    """Random texts, every fourth with characters only the full pipeline reads."""
    rng = random.Random(seed)
    alphabet = ("abcdefghijklmnopqrstuvwxyz" * 3 + "ABCXYZ0123456789" + " " * 12
                + "\n\t.,;:!?'\"()[]{}-_/\\|@#$%^&*+=<>~`’“…")
    return ["".join(rng.choice(alphabet + ("é😀\x7f" if n % 4 == 3 else ""))
                    for _ in range(rng.randint(0, 4000)))
            for n in range(count)]


def _fast() -> WordPieceEncoder:
    fast = default_embedder()._fast  # type: ignore[attr-defined]
    assert isinstance(fast, WordPieceEncoder)
    return fast


def test_the_default_model_takes_the_fast_path() -> None:
    assert WordPieceEncoder.fits(default_embedder()._model)  # type: ignore[attr-defined]


def test_fast_encode_is_bit_identical_to_model2vec() -> None:
    texts = TRICKY + _random_texts(60, seed=3)
    fast = _fast()
    assert sum(fast._words(t) is not None for t in texts) > len(texts) // 2
    got = fast.encode(texts)
    want = _reference(texts)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


def test_a_batch_encodes_as_its_texts_one_by_one() -> None:
    texts = TRICKY + _random_texts(20, seed=4)
    fast = _fast()
    together = fast.encode(texts)
    alone = np.concatenate([fast.encode([t]) for t in texts])
    assert np.array_equal(together, alone)
    embedder = default_embedder()
    assert np.array_equal(embedder.encode(texts),
                          np.concatenate([embedder.encode([t]) for t in texts]))


def test_a_full_word_cache_starts_over_and_stays_exact(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setattr(static_encode, "CACHE_WORDS", 50)
    fast = WordPieceEncoder(default_embedder()._model)  # type: ignore[attr-defined]
    texts = _random_texts(10, seed=5) + TRICKY
    assert np.array_equal(fast.encode(texts), _reference(texts))
    seen = {w for t in texts for w in static_encode._PIECE.findall(t.lower())}
    assert len(fast._pieces) < len(seen)  # the cache started over
    assert np.array_equal(fast.encode(texts[::-1]), _reference(texts[::-1]))


def test_a_float32_model_is_exact_too() -> None:
    base = default_embedder()._model  # type: ignore[attr-defined]
    from model2vec import StaticModel

    model = StaticModel(vectors=np.asarray(base.embedding, dtype=np.float32),
                        tokenizer=base.tokenizer, normalize=True, max_length=base.max_length)
    assert WordPieceEncoder.fits(model)
    texts = TRICKY + _random_texts(10, seed=6)
    assert np.array_equal(WordPieceEncoder(model).encode(texts),
                          model.encode(texts, use_multiprocessing=False))


def test_models_it_cannot_reproduce_are_refused() -> None:
    base = default_embedder()._model  # type: ignore[attr-defined]
    weighted = SimpleNamespace(tokenizer=base.tokenizer, embedding=base.embedding,
                               token_mapping=None, weights=np.ones(len(base.embedding)))
    word_level = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    other = SimpleNamespace(tokenizer=word_level, embedding=np.zeros((2, 4), np.float16),
                            token_mapping=None, weights=None)
    assert not WordPieceEncoder.fits(weighted)
    assert not WordPieceEncoder.fits(other)
    assert not WordPieceEncoder.fits(object())
    with pytest.raises(ValueError, match="WordPiece"):
        WordPieceEncoder(other)


def test_the_shipped_model_loads_as_model2vec_loads_it() -> None:
    """The embedder's own reader gives the model ``StaticModel.from_pretrained`` gives:
    the same vectors, tokenizer and settings, so the same vectors for every text (the
    full pipeline's texts included)."""
    from model2vec import StaticModel

    from memstrata.memory.embed import STATIC_MODEL_DIR, load_static_model

    mine, theirs = load_static_model(STATIC_MODEL_DIR), StaticModel.from_pretrained(
        str(STATIC_MODEL_DIR))
    assert np.array_equal(mine.embedding, theirs.embedding)
    assert mine.embedding.dtype == theirs.embedding.dtype
    assert mine.tokenizer.to_str() == theirs.tokenizer.to_str()
    for name in ("normalize", "max_length", "unk_token_id", "median_token_length", "config",
                 "tokens"):
        assert getattr(mine, name) == getattr(theirs, name), name
    assert mine.weights is None and mine.token_mapping is None
    texts = TRICKY + _random_texts(20, seed=9)
    assert np.array_equal(mine.encode(texts, use_multiprocessing=False),
                          theirs.encode(texts, use_multiprocessing=False))


def test_loading_the_embedder_does_not_import_the_hub_client() -> None:
    """The default embedder loads without model2vec's hub modules (huggingface_hub is
    ~0.13 s of a command's start, for a model that is never fetched)."""
    import subprocess
    import sys

    code = ("import sys; from memstrata.memory.embed import default_embedder; "
            "default_embedder().encode(['x']); print('huggingface_hub' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"

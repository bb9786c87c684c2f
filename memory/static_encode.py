"""A faster, exact encode for model2vec static models with a BERT WordPiece tokenizer.

model2vec runs every text through the ``tokenizers`` pipeline (BERT normaliser, BERT
pre-tokenizer, WordPiece), then averages the token vectors. On text of printable ASCII
(plus a few typographic marks) that pipeline reduces to: lower-case, split at whitespace
and at each punctuation character, WordPiece each word. :class:`WordPieceEncoder` does
that split with one regular expression and keeps each word's pieces in a dictionary, so
a long text costs a scan and look-ups instead of the full pipeline; the mean is taken as
model2vec takes it (float32 sums in token order, divided by the count, cast to the
embedding's dtype, then unit-normalised), so every vector is bit-identical to
``StaticModel.encode``'s. A text outside that alphabet, or holding a special token's
text (``[UNK]``), goes through model2vec itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import chain, islice
from typing import Any

import numpy as np

_TYPOGRAPHIC = "\u2018\u2019\u201c\u201d\u2013\u2014\u2026"
"""Quotes, dashes and the ellipsis: Unicode punctuation the BERT normaliser leaves as is,
so each is a word of its own, as in ASCII."""
_OUTSIDE = re.compile(rf"[^\t\n\r\x20-\x7e{_TYPOGRAPHIC}]")
_PIECE = re.compile(r"[a-z0-9]+|[^a-z0-9 \t\n\r]")
"""After lower-casing: a run of letters and digits, or one punctuation character (every
printable ASCII character that is neither is punctuation to BERT)."""
GATHER_ROWS = 4096
"""Most token vectors gathered at once (4 MB of 256-dimension float32): a gather that
stays in the CPU's cache is added up several times faster than a large one."""
TEXTS_AT_ONCE = 256
"""Texts split into words before their unseen words are looked up together."""
CACHE_WORDS = 200_000
"""Words whose pieces are kept; a full cache starts over empty (bounded memory)."""


class WordPieceEncoder:
    """``StaticModel.encode(texts)`` for a model :meth:`fits`, computed faster and equal
    to it bit for bit (see the module).

    Raises:
        ValueError: the model does not :meth:`fit`.
    """

    def __init__(self, model: Any) -> None:
        if not self.fits(model):
            raise ValueError("WordPieceEncoder needs a static model whose tokenizer is "
                             "BERT's WordPiece with float16 or float32 vectors")
        self._model = model
        self._unk = model.unk_token_id
        self._max_tokens: int | None = model.max_length
        self._max_chars = (None if model.max_length is None
                           else model.max_length * model.median_token_length)
        self._specials = tuple(t["content"] for t in json.loads(model.tokenizer.to_str())
                               .get("added_tokens", []) if t["content"])
        self._vectors = np.asarray(model.embedding, dtype=np.float32)
        self._pieces: dict[str, tuple[int, ...]] = {}

    @staticmethod
    def fits(model: Any) -> bool:
        """Whether ``model`` (a ``model2vec.StaticModel``) is one this encoder reproduces:
        a lower-casing BERT normaliser, BERT pre-tokenizer and WordPiece, added tokens
        matched as written (not normalised), mean pooling over float16 or float32 vectors
        without token weights or a token mapping."""
        try:
            spec = json.loads(model.tokenizer.to_str())
        except (AttributeError, TypeError, ValueError):
            return False
        normalizer = spec.get("normalizer") or {}
        # An added token is matched in the raw text (where its text sends the text to
        # model2vec) unless it is "normalized": then it would match after lower-casing.
        return (not any(t.get("normalized") for t in spec.get("added_tokens") or [])
                and normalizer.get("type") == "BertNormalizer"
                and normalizer.get("lowercase") is True
                and normalizer.get("clean_text") is True
                and (spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
                and (spec.get("model") or {}).get("type") == "WordPiece"
                and getattr(model, "token_mapping", None) is None
                and getattr(model, "weights", None) is None
                and np.asarray(model.embedding).dtype in (np.float16, np.float32))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """What ``StaticModel.encode(texts)`` returns: a ``(len(texts), dim)`` array of
        the embedding's dtype, rows unit-normalised when the model normalises."""
        model = self._model
        dtype = model.embedding.dtype
        out = np.zeros((len(texts), self._vectors.shape[1]), dtype=dtype)
        slow: list[int] = []
        for start in range(0, len(texts), TEXTS_AT_ONCE):
            ids = self._ids([self._words(t) for t in texts[start:start + TEXTS_AT_ONCE]])
            slow += [start + n for n, found in enumerate(ids) if found is None]
            self._pool(ids, out[start:start + len(ids)])
        if model.normalize:
            as32 = out.astype(np.float32)
            norm = np.linalg.norm(as32, axis=1, keepdims=True) + 1e-32
            out = (as32 / norm).astype(dtype)
        if slow:
            out[slow] = model.encode([texts[n] for n in slow], use_multiprocessing=False)
        return out

    def _words(self, text: str) -> list[str] | None:
        """The words the pipeline would split ``text`` into (after model2vec's cut to
        ``max_length * median_token_length`` characters), or None when the text needs
        the full pipeline."""
        if self._max_chars is not None:
            text = text[:self._max_chars]
        if _OUTSIDE.search(text) or any(s in text for s in self._specials):
            return None
        return _PIECE.findall(text.lower())

    def _ids(self, texts: list[list[str] | None]) -> list[list[int] | None]:
        """Each text's token ids as model2vec averages them (its first ``max_length``
        pieces, unknown ones dropped), given its words; None where its words are None.
        The pieces of words not seen before are looked up in one call."""
        out: list[list[int] | None] = []
        unseen: list[int] = []
        pieces = self._pieces
        for n, words in enumerate(texts):
            if words is None:
                out.append(None)
                continue
            try:
                out.append(self._cut(pieces, words))
            except KeyError:
                out.append(None)
                unseen.append(n)
        if unseen:
            pieces = self._learn([texts[n] or [] for n in unseen])
            for n in unseen:
                out[n] = self._cut(pieces, texts[n] or [])
        return out

    def _cut(self, pieces: dict[str, tuple[int, ...]], words: list[str]) -> list[int]:
        """The ids of ``words``' first ``max_length`` pieces, unknown pieces then dropped
        (the tokenizer truncates, then model2vec drops them). Raises ``KeyError`` for a
        word not in ``pieces``."""
        ids = list(islice(chain.from_iterable(map(pieces.__getitem__, words)),
                          self._max_tokens))
        unk = self._unk
        return ids if unk is None or unk not in ids else [i for i in ids if i != unk]

    def _learn(self, texts: list[list[str]]) -> dict[str, tuple[int, ...]]:
        """The cache with the WordPiece ids of the words of ``texts`` added. A full cache
        is replaced by a new one, never emptied in place: another thread may be reading
        it."""
        pieces = self._pieces
        new = list(dict.fromkeys(w for w in chain.from_iterable(texts) if w not in pieces))
        if len(pieces) + len(new) > CACHE_WORDS:
            pieces = self._pieces = {}
            new = list(dict.fromkeys(chain.from_iterable(texts)))
        # A word split here is already one of the pipeline's pre-tokenized words
        # (lower-case: a run of letters and digits, or one punctuation mark), so
        # WordPiece alone gives its pieces.
        tokenize = self._model.tokenizer.model.tokenize
        for word in new:
            pieces[word] = tuple(token.id for token in tokenize(word))
        return pieces

    def _pool(self, ids: list[list[int] | None], out: np.ndarray) -> None:
        """Write each text's mean token vector (not normalised) into its row of ``out``,
        gathering at most about :data:`GATHER_ROWS` token vectors at a time; rows whose
        ids are None or empty are left as they are."""
        rows = [n for n, found in enumerate(ids) if found]
        at = 0
        while at < len(rows):
            group: list[int] = []
            held = 0
            while at < len(rows) and (not group or held < GATHER_ROWS):
                group.append(rows[at])
                held += len(ids[rows[at]] or ())
                at += 1
            lists = [ids[n] or [] for n in group]
            counts = np.fromiter(map(len, lists), dtype=np.intp, count=len(lists))
            gathered = self._vectors[np.fromiter(chain.from_iterable(lists), dtype=np.intp,
                                                 count=held)]
            sums = np.empty((len(group), gathered.shape[1]), dtype=np.float32)
            bounds = np.concatenate(([0], np.cumsum(counts))).tolist()
            for k in range(len(group)):
                # One text's vectors added in token order, as numpy's mean adds them.
                np.add.reduce(gathered[bounds[k]:bounds[k + 1]], axis=0, out=sums[k])
            # As numpy's mean divides: by an intp count, computed in float64.
            np.true_divide(sums, counts[:, None], out=sums, casting="unsafe")
            out[group] = sums

"""Passage vectors of long nodes, without the store: the model name they are kept under,
what encodes them, the encoding itself, and the backfill an older store's migration runs.

Kept apart from ``vectors.py`` (the store's reads and writes) because the schema's
migration imports :func:`backfill_passages`, and the store's connection imports the schema:
nothing here imports the store."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..embed import DEFAULT_MODEL, Embedder, default_embedder
from ..models import with_caption
from ..passages import PASSAGE_CHARS, split_passages

PASSAGE_SUFFIX = "#passages"
# Not 1.0 (the best passage alone): on the assistant corpus that let long answers crowd
# the short turns holding a user's facts out of the dense channel's top 5.
PASSAGE_SHARE = 0.3
"""How far a long node's dense score moves from its whole vector's cosine toward its best
passage's (see :func:`with_passages`)."""


def passage_model(model: str) -> str:
    """The model name a long node's passage vectors of ``model`` are stored under."""
    return f"{model}{PASSAGE_SUFFIX}"


def passage_encoder(embedder: Embedder | None, model: str) -> Embedder | None:
    """What encodes the passages of nodes embedded with ``model``: ``embedder`` where it is
    that model, the shipped default for the default's name, else None (no passages)."""
    if embedder is not None and embedder.name == model:
        return embedder
    return default_embedder() if model == DEFAULT_MODEL else None


def passage_vectors(encoder: Embedder, texts: Mapping[str, str]) -> dict[str, np.ndarray]:
    """Each long text's passage vectors, ``(passages, dim)`` float32, by node id, in one
    encode call; texts of at most ``PASSAGE_CHARS`` characters are left out."""
    split = {i: split_passages(t) for i, t in texts.items() if len(t) > PASSAGE_CHARS}
    flat = [p for parts in split.values() for p in parts]
    if not flat:
        return {}
    vectors = np.asarray(encoder.encode(flat), dtype=np.float32)
    out, at = {}, 0
    for node_id, parts in split.items():
        out[node_id] = vectors[at:at + len(parts)]
        at += len(parts)
    return out


def counted_models(rows: Any) -> dict[str, int]:
    """(model, count) rows of the embeddings table as ``vector_models`` returns them: the
    passage models left out (they repeat their node's model), most vectors first."""
    found = {str(m): int(n) for m, n in rows if not str(m).endswith(PASSAGE_SUFFIX)}
    return dict(sorted(found.items(), key=lambda pair: (-pair[1], pair[0])))


def node_text(row: Mapping[str, Any]) -> str:
    """A node row's text as the dense channel reads it (a turn's caption included)."""
    return with_caption(row["text"], json.loads(row.get("metadata") or "{}"))


def backfill_passages(conn: Any, encoder: Embedder | None = None, *,
                      postgres: bool = False) -> int:
    """Write the passage vectors of every long node that has a vector of ``encoder``'s
    model (the shipped default's when None) and no passage vectors yet: a store written
    before passages were embedded gains them (schema migration 13 of either backend;
    ``conn`` is the SQLite connection, or with ``postgres`` the psycopg one, as owner).
    Returns how many nodes gained them; the default encoder is loaded only when one
    needs them."""
    model = encoder.name if encoder is not None else DEFAULT_MODEL
    name = passage_model(model)
    mark = "%s" if postgres else "?"
    meta = "t.metadata::text" if postgres else "t.metadata"
    missing = (f"AND NOT EXISTS (SELECT 1 FROM embeddings p WHERE p.node_id = e.node_id"
               f" AND p.model = {mark})")
    rows = conn.execute(
        f"SELECT e.node_id, e.user_id, t.text, {meta} FROM embeddings e JOIN turns t"
        f" ON t.id = e.node_id WHERE e.model = {mark} AND length(t.text) + length({meta})"
        f" > {mark} {missing} UNION ALL SELECT e.node_id, e.user_id, i.text, NULL FROM"
        f" embeddings e JOIN items i ON i.id = e.node_id WHERE e.model = {mark} AND"
        f" length(i.text) > {mark} {missing}",
        (model, PASSAGE_CHARS, name, model, PASSAGE_CHARS, name)).fetchall()
    texts = {r[0]: node_text({"text": r[2], "metadata": r[3]}) for r in rows}
    tenant = {r[0]: r[1] for r in rows}
    if not any(len(t) > PASSAGE_CHARS for t in texts.values()):
        return 0
    encoder = encoder or default_embedder()
    upsert = ("INSERT INTO embeddings (node_id, model, user_id, dim, vector) VALUES"
              " (%s,%s,%s,%s,%s) ON CONFLICT (node_id, model) DO UPDATE SET"
              " dim = excluded.dim, vector = excluded.vector" if postgres else
              "INSERT OR REPLACE INTO embeddings (node_id, model, user_id, dim, vector)"
              " VALUES (?,?,?,?,?)")
    done = 0
    ids = list(texts)
    for start in range(0, len(ids), 2000):
        found = passage_vectors(encoder, {i: texts[i] for i in ids[start:start + 2000]})
        conn.cursor().executemany(upsert, [(i, name, tenant[i], v.shape[1], v.tobytes())
                                           for i, v in found.items()])
        done += len(found)
    return done

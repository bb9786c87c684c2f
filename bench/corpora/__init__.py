"""Evaluation corpora shipped with the bench, each with the generator that wrote it.

``assistant.json`` is written by :mod:`memstrata.bench.corpora.assistant` (see README.md):
an AI assistant's users, their facts scripted first and the conversations written from
them, so every question's evidence is right by construction.
"""

from __future__ import annotations

from pathlib import Path

ASSISTANT = Path(__file__).with_name("assistant.json")
"""The shipped assistant corpus (a labelled-messages file, see ``bench.corpus``)."""

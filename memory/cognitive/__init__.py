"""Seed 003's six cognitive memory types over the one store, with their lifecycles.

``CognitiveMemory(store, user_id)`` bundles them for one tenant: ``sensory`` (raw input
with a TTL, promoted by attention), ``working`` (task-scoped slots with a capacity),
``episodic`` (what happened when, consolidated in batches), ``semantic`` (facts with
``similar_to``/``derives_from``/``contradicts`` edges), ``procedural`` (steps that
strengthen with use) and ``prospective`` (intentions with triggers). Everything lives in
the ``items`` and ``edges`` tables; nothing here calls an LLM except consolidation,
through the summariser it is handed.
"""

from .base import CognitiveSettings, jaccard
from .maintain import MaintenanceReport
from .memory import CognitiveMemory
from .reading import ReadReport
from .recall import Conflict, Recalled

__all__ = ["CognitiveMemory", "CognitiveSettings", "Conflict", "MaintenanceReport",
           "ReadReport", "Recalled", "jaccard"]

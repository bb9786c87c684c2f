"""The inspector: a user's memory in a browser, served by ``memstrata serve`` at ``/ui``
or alone by ``memstrata ui``. Server-rendered pages (Jinja2, one stylesheet, no script),
nothing fetched from another origin. See :func:`create_app`."""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]

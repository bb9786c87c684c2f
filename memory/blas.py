"""One BLAS thread for the matrix-vector products a search runs.

OpenBLAS splits a product as small as one query vector against a tenant's 30,000 word or
row vectors over every core. On a machine whose cores are busy with other work, the
split waits for a core: measured here on 2 busy cores, 33,199 x 256 float32 times one
vector took ~9 ms across both threads and ~1.5 ms on one, and the products were the
same to the last bit. :func:`one_blas_thread` holds BLAS to one thread for a block
(through ``threadpoolctl``). The limit is process-wide, as every BLAS thread setting
is: it is set when the first of any overlapping blocks (other threads') begins and lifted
when the last ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_controller: Any = None  # threadpoolctl's controller, made on first use
_limiter: Any = None  # the limit in force while blocks run
_inside = 0  # blocks running now, all threads


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """A block in which NumPy's BLAS runs on one thread (see the module)."""
    global _controller, _limiter, _inside
    with _lock:
        if _controller is None:
            from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

            _controller = ThreadpoolController()
        if _inside == 0:
            _limiter = _controller.limit(limits=1, user_api="blas")
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _limiter = None

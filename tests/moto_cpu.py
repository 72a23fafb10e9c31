"""The CPU-only part of local/moto_speed.py, for the tests' moto: what spends less CPU on each request and
changes nothing a request answers, nor anything moto keeps.

The functional tests run moto plus its corrections (local/moto_corrections.py), never the offline runtime's
speed-ups as a whole: those also bypass moto's own code for plain updates, conditions and queries, trim
what moto keeps and announce writes.  Installed here are only caches of what moto recomputed on every
request, from inputs that never change:

* an update expression's parsed tree, per text, and each validator's map of node class to method
  (rebuilt twice per node); the clause-count and overlapping-path checks run once on the whole
  expression (moto ran them on every node of it; any error still goes through moto's own traversal).

UpdateItem was the costliest request of the task tests (a settle's expression, validated node by node).
``install()`` is idempotent; ``local.moto_speed.uninstall()`` (the ``aws`` fixture calls it) leaves these in
place, and ``local.moto_speed.install()`` puts the same caches on top of them.
"""

from __future__ import annotations

import threading

from local import moto_speed

_installed = False
_lock = threading.Lock()


def install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        patched = len(moto_speed._patched)
        moto_speed._fast_expression_traversal()
        # not moto_speed's to undo: moto_speed.uninstall() takes off what moto_speed.install() put on only
        del moto_speed._patched[patched:]
        _installed = True

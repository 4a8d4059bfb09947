"""A warning for clients that reduce feasigns before sending them.

Paddle Serving's ElasticCTR Python client sends `feasign % 100000001` (a table size
hard-coded in it), not the raw feasign. Serving maps what it receives with the model's
`sparse_dim`: unless that is the same 100000001, the keys looked up are not the keys the
model trained, and the predictions are near-random with no error anywhere. Raw feasigns
are 64-bit hashes, so after many feasigns all below that bound serving says so, once.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("elasticctr_serving.feasigns")

# The modulus Paddle Serving's ElasticCTR client applies to every feasign before sending.
PADDLE_CLIENT_TABLE_SIZE = 100_000_001
# Feasigns seen before judging: 64-bit hashes fall below the bound with odds of ~5e-12
# each, so a few thousand all below it is no accident.
ENOUGH_FEASIGNS = 10_000


class ReducedFeasignCheck:
    def __init__(self, log: logging.Logger = log) -> None:
        self.active, self.seen, self.largest, self.warned = True, 0, 0, False
        self._lock = threading.Lock()
        self._log = log

    def observe(self, sparse_dim: int, feasigns: int, largest: int) -> None:
        """`feasigns` more received for a model of `sparse_dim`, the largest `largest`."""
        # With sparse_dim equal to the client's table size, reduced feasigns map alike.
        if not self.active or self.warned or sparse_dim == PADDLE_CLIENT_TABLE_SIZE:
            return
        with self._lock:
            self.seen += feasigns
            self.largest = max(self.largest, largest)
            if self.largest >= PADDLE_CLIENT_TABLE_SIZE:
                self.active = False  # raw feasigns: nothing to warn about
            elif self.seen >= ENOUGH_FEASIGNS and not self.warned:
                self.warned = True
                self._log.warning(
                    "all %d feasigns received so far are below %d: a client that reduces "
                    "feasigns modulo its own table size (Paddle Serving's ElasticCTR client "
                    "does, by %d) gets near-random predictions unless data.sparse_dim is "
                    "that size; send raw feasigns, or train with that sparse_dim "
                    "(docs/serving.md, 'Paddle Serving's client')",
                    self.seen,
                    PADDLE_CLIENT_TABLE_SIZE,
                    PADDLE_CLIENT_TABLE_SIZE,
                )

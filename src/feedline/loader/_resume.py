"""Exact resume: a loader's state as small, versioned, fingerprinted data."""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Mapping
from typing import Any

from ..errors import StateError

STATE_FORMAT = "feedline.loader.state"
STATE_VERSION = 1


class Resumable:
    """``state_dict`` / ``load_state_dict`` for ``Loader`` (which provides the attributes).

    The state records the batches delivered (not made ahead) in the current pass, the
    pass and the seed; its fingerprint covers the order (with its sources' lengths and
    salts), the record, the batch size and the options, so a state never loads into a
    loader of another configuration.
    """

    def _make_fingerprint(self) -> str:
        rec = self._datasets[0].record
        doc = {
            "seq": self._seq.to_dict(),
            "plain": self._plain is not None,
            "record": {n: [list(f.shape), str(f.dtype)] for n, f in rec.fields.items()},
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "pad": self.pad,
            "even": self.even,
            "shard": list(self.shard) if self.shard else None,
            "share": list(getattr(self, "_share", (0, 1))),
            "deal": self._deal is not None,
        }
        text = json.dumps(doc, sort_keys=True).encode()
        return hashlib.sha256(text).hexdigest()

    def state_dict(self) -> dict:
        """The state after the last batch delivered: a small JSON-ready dict."""
        with self._lock:
            return {
                "format": STATE_FORMAT,
                "version": STATE_VERSION,
                "fingerprint": self._fingerprint,
                "seed": self._seed,
                "epoch": self._epoch,
                "batches": self._delivered,
                "ended": self._ended and self._delivered == self._claimed,
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly after the batches the saved loader had delivered.

        Raises ``StateError`` when the state is not a loader state, has another version,
        or was saved by a loader of another configuration (order, sources' lengths and
        salts, record, batch size, drop_last, pad, shard).
        """
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise StateError(f"not a feedline loader state (format "
                             f"{state.get('format') if isinstance(state, Mapping) else state!r})")
        if state.get("version") != STATE_VERSION:
            raise StateError(f"loader state version {state.get('version')!r}; this feedline "
                             f"reads version {STATE_VERSION}")
        if state.get("fingerprint") != self._fingerprint:
            raise StateError("the state was saved by a loader of another configuration (order, "
                             "sources, record, batch size or options differ); fingerprint "
                             f"{str(state.get('fingerprint'))[:12]}... is not "
                             f"{self._fingerprint[:12]}...")
        try:
            seed = state["seed"]
            seed = None if seed is None else operator.index(seed)
            epoch = operator.index(state["epoch"])
            batches = operator.index(state["batches"])
            ended = state["ended"]
            if not isinstance(ended, bool) or isinstance(seed, bool):
                raise TypeError("'ended' must be a bool and 'seed' an int or None")
        except (KeyError, TypeError) as e:
            raise StateError(f"the loader state is incomplete or malformed: {e}") from e
        self._drain()
        with self._lock:
            previous = self._seed
            self._seed = seed
            try:
                steps = self._count_steps()
            finally:
                self._seed = previous
            w, k = self._share
            share_steps = max(0, -(-(steps - w) // k))
            if not 0 <= batches <= share_steps or epoch < 0:
                raise StateError(f"the state's position (epoch {epoch}, batch {batches}) does "
                                 f"not fit a pass of {steps} batches")
            self._seed = seed
            self._steps = steps
            self._epoch = epoch
            self._claimed = batches
            self._delivered = batches
            self._ended = ended
            self._block = None
            self._cursor = None

"""Exact resume: a loader's state as small, versioned, fingerprinted data."""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Mapping
from typing import Any

from ..errors import StateError

STATE_FORMAT = "feedline.loader.state"
STATE_VERSION = 2


class Resumable:
    """``state_dict`` / ``load_state_dict`` for ``Loader`` (which provides the attributes).

    The state records the batches delivered (not made ahead) in the current pass, the
    pass and the seed; its fingerprint covers the order (with its sources' lengths and
    salts), the record, the batch size and the options, so a state never loads into a
    loader of another configuration.

    Elastic resume: when the order's positions are dealt to ranks (``shard="auto"``, or
    any shard of a ``Seq``/``Order``), the fingerprint leaves out the rank and the number
    of ranks, and the state records the number of ranks (``world``) and the positions
    of the pass consumed before the dealing started (``base``). Every rank saves at the
    same step (a checkpoint), so together the ranks have consumed the pass's first
    ``base + batches * batch_size * world`` positions; a loader with another number of
    ranks deals the rest of the pass from there, and later passes as usual.
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
            "shard": list(self.shard) if self.shard and not self._dealt else None,
            "share": list(getattr(self, "_share", (0, 1))),
            "dealt": self._dealt,
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
                "world": self.shard[1] if self._dealt else None,
                "base": self._base,
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly after the batches the saved loader had delivered.

        Raises ``StateError`` when the state is not a loader state, has another version,
        or was saved by a loader of another configuration (order, sources' lengths and
        salts, record, batch size, drop_last, pad, shard). A state of dealt shards saved
        with another number of ranks continues the pass from the positions all ranks
        had consumed (see the class docstring).
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
            base = operator.index(state["base"])
            world = state["world"]
            world = None if world is None else operator.index(world)
            ended = state["ended"]
            if not isinstance(ended, bool) or isinstance(seed, bool):
                raise TypeError("'ended' must be a bool and 'seed' an int or None")
        except (KeyError, TypeError) as e:
            raise StateError(f"the loader state is incomplete or malformed: {e}") from e
        if batches < 0 or base < 0 or epoch < 0 or (world is None) == self._dealt or (
                world is not None and world < 1) or (base and not self._dealt) or (
                self._dealt and base > self._full_len):
            raise StateError(f"the state's position (epoch {epoch}, batch {batches}, base "
                             f"{base}, world {world}) is not one this loader can be at")
        if self._dealt and world != self.shard[1] and ended:
            base = batches = 0  # the next pass starts afresh with the new ranks
        elif self._dealt and world != self.shard[1]:
            if self._share != (0, 1):
                raise StateError(f"the state was saved by {world} ranks and this loader is one "
                                 f"of {self.shard[1]}: a change of ranks cannot be resumed "
                                 "when the batches are shared (torch DataLoader workers)")
            # Every rank delivered `batches` batches: together the pass's first
            # base + batches * batch_size * world positions (see the class docstring).
            base = min(base + batches * self.batch_size * world, self._full_len)
            batches = 0
        self._drain()
        with self._lock:
            previous = self._seed, self._base
            self._seed, self._base = seed, base
            try:
                steps = self._count_steps()
            finally:
                self._seed, self._base = previous
            w, k = self._share
            share_steps = max(0, -(-(steps - w) // k))
            if not batches <= share_steps:
                raise StateError(f"the state's position (epoch {epoch}, batch {batches}) does "
                                 f"not fit a pass of {steps} batches")
            self._seed = seed
            self._base = base
            self._steps = steps
            self._epoch = epoch
            self._claimed = batches
            self._delivered = batches
            self._ended = ended
            self._block = None
            self._cursor = None

"""Exact resume: a loader's state as small, versioned, fingerprinted data."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import FeedlineError, StateError
from ..order import ORDERING_VERSION

STATE_FORMAT = "feedline.loader.state"
STATE_VERSION = 4

# Version 4 records the ordering version its positions were counted in. Versions 2 and
# 3 were saved under ordering version 1, whose orders differ (issue 13): they are
# refused, naming both ordering versions, rather than resumed in another order.
_KEYS = frozenset(("format", "version", "fingerprint", "seed", "epoch", "batches",
                   "ended", "world", "base", "ahead", "ordering_version"))


def _state_int(state: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int:
    value = state[key]
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise StateError(f"the state's {key!r} must be an integer {bound}, got {value!r}")
    return value


class Resumable:
    """``state_dict`` / ``load_state_dict`` for ``Loader`` (which provides the attributes),
    and what a state counts: the batches passed (``_mark_delivered``) and the positions
    of the whole pass before sharding (``_seeds``), which stay valid across ranks.

    The state records the batches delivered (not made ahead) in the current pass, the
    pass and the seed: ``batches`` counts them up to the first batch not yet delivered,
    and ``ahead`` lists the ones delivered past it (threads sharing a loader finish
    batches out of order), so a restore makes exactly the batches not delivered. Its
    fingerprint covers the order (with its sources' lengths and salts), the record, the
    batch size and the options, so a state never loads into a loader of another
    configuration.

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

    def _steps_for(self, seed: int | None, base: int, world: int | None) -> int:
        """The batches of a pass for ``seed``, after ``base`` positions, dealt to ``world``
        ranks (this loader's own when ``world`` is its count); under the lock."""
        previous = self._seed, self._base
        try:
            if world is not None and world != self.shard[1]:
                full = self._full_len - base
                longest = -(-full // world)
                b = self.batch_size
                if self.even and self.drop_last:
                    return (full // world) // b
                return longest // b if self.drop_last else -(-longest // b)
            self._seed, self._base = seed, base
            return self._count_steps()
        except (FeedlineError, ValueError, OverflowError) as e:
            raise StateError(f"the state's seed {seed!r} and base {base} do not make an order "
                             f"for this loader: {e}") from e
        finally:
            self._seed, self._base = previous

    def _mark_delivered(self, start: int) -> None:
        """Under the lock: the batch starting at ``start`` reached the caller. Threads may
        deliver out of order, so the state keeps a count without a gap and the batches
        delivered past it (a restore skips those and makes the ones in the gap)."""
        index = self._share_index(start)
        if index == self._delivered:
            self._delivered += 1
            ahead = self._done_ahead
            while self._delivered in ahead:
                ahead.remove(self._delivered)
                self._delivered += 1
        elif index > self._delivered:
            self._done_ahead.add(index)

    def _passed(self, start: int) -> None:
        """The batch at ``start`` is done: delivered, or its error reached the caller (a
        batch that raised is passed over, as iteration goes on after it, so the state's
        count goes on too)."""
        with self._lock:
            self._mark_delivered(start)

    def _seeds(self, start: int, size: int) -> np.ndarray | None:
        """The positions, in the whole pass before sharding, of this shard's positions
        ``start .. start + size``: with the pass, they seed mapped datasets' generators,
        so every rank draws its own and a resume with another number of ranks draws
        the same. None when no dataset is mapped."""
        if not self._mapped:
            return None
        p = np.arange(start, start + size, dtype=np.int64)
        if self.shard is None:
            return p
        index, count = self.shard
        if self._dealt:  # positions dealt round-robin after skipping _base
            return self._base + p * count + index
        return p + index * len(self._plain) // count  # data.nu's contiguous slice

    def state_dict(self) -> dict:
        """The state after the last batch delivered: a small JSON-ready dict."""
        with self._lock:
            return {
                "format": STATE_FORMAT,
                "version": STATE_VERSION,
                "ordering_version": ORDERING_VERSION,
                "fingerprint": self._fingerprint,
                "seed": self._seed,
                "epoch": self._epoch,
                "batches": self._delivered,
                "ahead": sorted(self._done_ahead),
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
        version = state.get("version")
        if type(version) is int and version in (2, 3):
            raise StateError(f"the state was saved with ordering version 1 (loader state "
                             f"version {version}); this feedline computes ordering version "
                             f"{ORDERING_VERSION}, whose orders differ: resume it with the "
                             "feedline that saved it, or start the run afresh")
        if type(version) is not int or version != STATE_VERSION:
            raise StateError(f"loader state version {version!r}; this feedline reads version "
                             f"{STATE_VERSION}")
        keys = _KEYS
        if state.get("ordering_version", ORDERING_VERSION) != ORDERING_VERSION:
            raise StateError(f"the state was saved with ordering version "
                             f"{state['ordering_version']!r}; this feedline computes ordering "
                             f"version {ORDERING_VERSION}")
        if set(state) != keys:
            raise StateError(f"a version {version} loader state has the keys {sorted(keys)}; "
                             f"this one lacks {sorted(keys - set(state))} and has unknown "
                             f"{sorted(map(str, set(state) - keys))}")
        if state["fingerprint"] != self._fingerprint:
            raise StateError("the state was saved by a loader of another configuration (order, "
                             "sources, record, batch size or options differ); fingerprint "
                             f"{str(state['fingerprint'])[:12]}... is not "
                             f"{self._fingerprint[:12]}...")
        seed = None if state["seed"] is None else _state_int(state, "seed", -(1 << 63),
                                                               (1 << 64) - 1)
        epoch = _state_int(state, "epoch", 0)
        batches = _state_int(state, "batches", 0)
        base = _state_int(state, "base", 0)
        world = None if state["world"] is None else _state_int(state, "world", 1)
        ended = state["ended"]
        if not isinstance(ended, bool):
            raise StateError(f"the state's 'ended' must be true or false, got {ended!r}")
        ahead = state.get("ahead", [])
        if (not isinstance(ahead, list) or any(type(a) is not int for a in ahead)
                or ahead != sorted(set(ahead)) or (ahead and (ahead[0] <= batches or ended))):
            raise StateError(f"the state's 'ahead' must list increasing batch numbers past "
                             f"its {batches} batches (none in an ended pass), got {ahead!r:.80}")
        where = f"(epoch {epoch}, batch {batches}, base {base}, world {world})"
        if (world is None) == self._dealt:
            raise StateError(f"the state's world {world!r} does not fit a loader whose "
                             f"positions are {'' if self._dealt else 'not '}dealt to ranks")
        if (base and not self._dealt) or (self._dealt and base > self._full_len):
            raise StateError(f"the state's position {where} is not one this loader can be at")
        restart = False  # an ended pass saved by other ranks: the next pass starts afresh
        with self._lock:
            if self._dealt:
                # what the saving ranks' pass allowed: rank 0 has the most positions
                saved = self._steps_for(seed, base, world)
                if batches > saved or (ended and batches != saved):
                    raise StateError(f"the state's position {where} does not fit the saving "
                                     f"ranks' pass of {saved} batches")
                if world != self.shard[1]:
                    if ended:
                        base, restart = 0, True
                    elif ahead:
                        raise StateError(
                            f"the state was saved by {world} ranks and this loader is one of "
                            f"{self.shard[1]}: a change of ranks cannot be resumed from a state "
                            f"saved while threads had batches {ahead} out of order")
                    elif self._share != (0, 1):
                        raise StateError(
                            f"the state was saved by {world} ranks and this loader is one of "
                            f"{self.shard[1]}: a change of ranks cannot be resumed when the "
                            "batches are shared (torch DataLoader workers)")
                    else:
                        # Every rank delivered `batches` batches: together the pass's first
                        # base + batches * batch_size * world positions (class docstring).
                        base = min(base + batches * self.batch_size * world, self._full_len)
                        batches = 0
            steps = self._steps_for(seed, base, self.shard[1] if self._dealt else None)
            w, k = self._share
            share_steps = max(0, -(-(steps - w) // k))
            if restart:
                batches = share_steps
            if (batches > share_steps or (ended and batches != share_steps)
                    or (ahead and ahead[-1] >= share_steps)):
                raise StateError(f"the state's position {where} does not fit a pass of "
                                 f"{share_steps} batches")
        self._drain()
        with self._lock:
            self._seed = seed
            self._base = base
            self._steps = steps
            self._epoch = epoch
            self._claimed = batches
            self._delivered = batches
            self._done_ahead = set(ahead)
            self._ended = ended
            self._block = None
            self._ahead = None

"""Exact resume: the ledger as small, versioned, fingerprinted data, and back.

A state records the pass (``epoch``), its seed, the batches delivered without a gap
(``batches``) and past it (``ahead``), whether the pass ended, and for positions dealt
to ranks the number of ranks (``world``) and the positions of the pass consumed before
the dealing started (``base``). Its ``fingerprint`` covers the order (with its sources'
lengths and salts), the record and the options that decide what a batch holds
(``options``, also recorded in the clear so a refusal names the option that differs).

Elastic resume is a pure function of (state, ranks): every rank saves at the same step
(a checkpoint), so together the ranks have consumed the pass's first
``base + batches * batch_size * world`` positions; a loader with another number of
ranks deals the rest of the pass from there, and later passes as usual.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import FeedlineError, StateError
from ..order import ORDERING_VERSION
from ._options import SEED_MAX, SEED_MIN

STATE_FORMAT = "feedline.loader.state"
STATE_VERSION = 4

# Version 4 records the ordering version its positions were counted in and the options
# in the clear. Versions 2 and 3 were saved under ordering version 1, whose orders differ
# (issue 13): they are refused, naming both ordering versions, rather than resumed in
# another order.
_KEYS = frozenset(
    (
        "format",
        "version",
        "ordering_version",
        "fingerprint",
        "options",
        "seed",
        "epoch",
        "batches",
        "ahead",
        "ended",
        "world",
        "base",
    )
)


@dataclass(frozen=True)
class Geometry:
    """What decides the number of batches of a pass: the batch size, how the last batch
    ends, the shard, the length of the whole pass before dealing (``full_len``) and this
    rank's pass length after ``base`` positions (``order_len``)."""

    batch_size: int
    drop_last: bool
    even: bool
    shard: tuple[int, int] | None
    full_len: int
    order_len: Callable[[int], int]

    def steps(self, base: int = 0, world: int | None = None) -> int:
        """Batches of a pass after ``base`` positions (all shares), for this rank, or for
        rank 0 of ``world`` ranks (the one with the most positions)."""
        b = self.batch_size
        if self.shard is not None and (self.even or (world is not None and world != self.shard[1])):
            count = world if world is not None else self.shard[1]
            full = self.full_len - base
            if self.even and self.drop_last:  # the full batches the shortest rank has
                return (full // count) // b
            longest = -(-full // count)
            if self.even:
                return -(-longest // b)
            return longest // b if self.drop_last else -(-longest // b)
        n = self.order_len(base)
        return n // b if self.drop_last else -(-n // b)


def map_seeds(datasets: list) -> dict[str, Any]:
    """``{"map_seeds": [[seed, ...] per dataset]}``: the seeds of the datasets' maps
    that take a generator decide the examples' random draws (augmentations), so a state
    resumes the stream it was saved from only under the same ones. (The map functions
    are not recorded: a map fixed between runs resumes, and so does one added or taken
    away that draws nothing.) Checked in the clear, outside the fingerprint, and only
    where the state records them: a state saved before they were recorded still loads."""
    return {"map_seeds": [[e[1] for e in ds._maps if e[2]] for ds in datasets]}


_UNPRINTED = ("map_seeds",)  # options checked in the clear only (``map_seeds``)


def fingerprint(
    seq_doc: dict, plain: bool, record: Any, options: dict[str, Any], share: tuple[int, int]
) -> str:
    doc = {
        "seq": seq_doc,
        "plain": plain,
        "record": {n: [list(f.shape), f.type_name] for n, f in record.fields.items()},
        "options": {k: v for k, v in options.items() if k not in _UNPRINTED},
        "share": list(share),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def to_dict(ledger: Any, print_: str, options: dict[str, Any], world: int | None) -> dict:
    """The state of ``ledger`` (its lock held)."""
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "ordering_version": ORDERING_VERSION,
        "fingerprint": print_,
        "options": dict(options),
        "seed": ledger.seed,
        "epoch": ledger.epoch,
        "batches": ledger.delivered,
        "ahead": sorted(ledger.ahead),
        "ended": ledger.finished(),
        "world": world,
        "base": ledger.base,
    }


@dataclass(frozen=True)
class Restored:
    """Where a state puts a loader: the ledger's new values."""

    seed: int | None
    epoch: int
    base: int
    steps: int
    batches: int
    ahead: tuple[int, ...]
    ended: bool


def _int(state: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int:
    value = state[key]
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise StateError(f"the state's {key!r} must be an integer {bound}, got {value!r}")
    return value


def _check_header(state: Any, print_: str, options: dict[str, Any]) -> None:
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        raise StateError(
            f"not a feedline loader state (format "
            f"{state.get('format') if isinstance(state, Mapping) else state!r})"
        )
    version = state.get("version")
    if type(version) is int and version in (2, 3):
        raise StateError(
            f"the state was saved with ordering version 1 (loader state "
            f"version {version}); this feedline computes ordering version "
            f"{ORDERING_VERSION}, whose orders differ: resume it with the "
            "feedline that saved it, or start the run afresh"
        )
    if type(version) is not int or version != STATE_VERSION:
        raise StateError(
            f"loader state version {version!r}; this feedline reads version {STATE_VERSION}"
        )
    if state.get("ordering_version", ORDERING_VERSION) != ORDERING_VERSION:
        raise StateError(
            f"the state was saved with ordering version "
            f"{state['ordering_version']!r}; this feedline computes ordering "
            f"version {ORDERING_VERSION}"
        )
    if set(state) != _KEYS:
        raise StateError(
            f"a version {version} loader state has the keys {sorted(_KEYS)}; "
            f"this one lacks {sorted(_KEYS - set(state))} and has unknown "
            f"{sorted(map(str, set(state) - _KEYS))}"
        )
    saved = state["options"]
    if not isinstance(saved, Mapping):
        raise StateError(f"the state's 'options' must be an object, got {saved!r:.80}")
    differ = [
        k
        for k in sorted(set(options) | set(saved))
        if saved.get(k) != options.get(k) and (k in saved or k not in _UNPRINTED)
    ]
    if differ:
        raise StateError(
            "the state was saved by a loader with other options: "
            + "; ".join(
                f"{k} {json.dumps(saved.get(k))} saved, {json.dumps(options.get(k))} here"
                for k in differ
            )
            + (
                " (the maps' seeds decide the examples' random draws: to resume under "
                "these on purpose, set the state's options['map_seeds'] to them)"
                if "map_seeds" in differ
                else ""
            )
        )
    if state["fingerprint"] != print_:
        raise StateError(
            "the state was saved by a loader of another configuration: its "
            "order, its sources (lengths and salts), its record or its share of "
            f"the batches differ (fingerprint {str(state['fingerprint'])[:12]}... "
            f"is not {print_[:12]}...)"
        )


def parse(
    state: Any, print_: str, options: dict[str, Any], geo: Geometry, share: tuple[int, int]
) -> Restored:
    """Where ``state`` puts a loader of this configuration; ``StateError`` when it was
    saved by another one, or is not a state at all."""
    _check_header(state, print_, options)
    seed = None if state["seed"] is None else _int(state, "seed", SEED_MIN, SEED_MAX)
    epoch = _int(state, "epoch", 0)
    batches = _int(state, "batches", 0)
    base = _int(state, "base", 0)
    world = None if state["world"] is None else _int(state, "world", 1)
    ended = state["ended"]
    if not isinstance(ended, bool):
        raise StateError(f"the state's 'ended' must be true or false, got {ended!r}")
    ahead = state["ahead"]
    if (
        not isinstance(ahead, list)
        or any(type(a) is not int for a in ahead)
        or ahead != sorted(set(ahead))
        or (ahead and (ahead[0] <= batches or ended))
    ):
        raise StateError(
            f"the state's 'ahead' must list increasing batch numbers past "
            f"its {batches} batches (none in an ended pass), got {ahead!r:.80}"
        )
    where = f"(epoch {epoch}, batch {batches}, base {base}, world {world})"
    dealt = geo.shard is not None
    if (world is None) == dealt:
        raise StateError(
            f"the state's world {world!r} does not fit a loader whose "
            f"positions are {'' if dealt else 'not '}dealt to ranks"
        )
    if (base and not dealt) or (dealt and base > geo.full_len):
        raise StateError(f"the state's position {where} is not one this loader can be at")
    restart = False  # an ended pass saved by other ranks: the next pass starts afresh
    try:
        if dealt:
            assert geo.shard is not None and world is not None  # dealt (and checked above)
            # what the saving ranks' pass allowed: rank 0 has the most positions
            saved = geo.steps(base, world)
            # an ended pass of another number of ranks may be any rank's (a short one
            # took fewer batches); with the same ranks, it is this rank's own
            if batches > saved or (ended and batches != saved and world == geo.shard[1]):
                raise StateError(
                    f"the state's position {where} does not fit the saving "
                    f"ranks' pass of {saved} batches"
                )
            if world != geo.shard[1]:
                if ended:
                    base, restart = 0, True
                elif ahead:
                    raise StateError(
                        f"the state was saved by {world} ranks and this loader is one of "
                        f"{geo.shard[1]}: a change of ranks cannot be resumed from a state "
                        f"saved while threads had batches {ahead} out of order"
                    )
                elif share != (0, 1):
                    raise StateError(
                        f"the state was saved by {world} ranks and this loader is one of "
                        f"{geo.shard[1]}: a change of ranks cannot be resumed when the "
                        "batches are shared (torch DataLoader workers)"
                    )
                elif "bucket" in options and batches % (group := int(options["bucket"][1])):
                    # a group's batches hold its positions sorted by length: part of a
                    # group consumed is not the pass's first positions the ranks deal on
                    raise StateError(
                        f"the state was saved by {world} ranks and this loader is one of "
                        f"{geo.shard[1]}: with bucket= a change of ranks resumes only from "
                        f"a state saved at a whole group of bucket_batches={group} batches, "
                        f"and this one was saved at batch {batches} (save every {group} "
                        f"steps, or resume with {world} ranks)"
                    )
                else:
                    base = min(base + batches * geo.batch_size * world, geo.full_len)
                    batches = 0
        steps = geo.steps(base)
    except (FeedlineError, ValueError, OverflowError) as e:
        if isinstance(e, StateError):
            raise
        raise StateError(
            f"the state's position {where} does not make an order for this loader: {e}"
        ) from e
    w, k = share
    share_steps = max(0, -(-(steps - w) // k))
    if restart:
        batches = share_steps
    if (
        batches > share_steps
        or (ended and batches != share_steps)
        or (ahead and ahead[-1] >= share_steps)
    ):
        raise StateError(
            f"the state's position {where} does not fit a pass of {share_steps} batches"
        )
    return Restored(seed, epoch, base, steps, batches, tuple(ahead), ended)

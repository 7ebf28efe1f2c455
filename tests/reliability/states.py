"""Saved loader states, truncated and tampered with: refused with ``StateError``, and the
loader that refused them left usable and unchanged.

A reference loader (a scheduled mix, repeated, read 3 batches into its first pass)
saves its state; ``INVALID`` (and ``INVALID_SHARDED``) change each of its fields to
values no loader of that configuration can have saved (other values, other types,
missing), and ``mutations`` applies random JSON mutations
(``fuzz_formats.mutate_json``) and sorts the outcomes.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

import feedline as fl

from . import maps
from .fuzzing import fuzz_formats

BATCH = 8
READ = 3  # batches read before the state is saved


def mixed(workers: bool = False) -> fl.Seq:
    a = fl.Dataset.from_arrays(name="a", i=np.arange(45))
    b = fl.Dataset(a.record, {"i": np.arange(1000, 1019)}, name="b")
    if workers:
        a, b = a.map(maps.identity), b.map(maps.identity)
    return fl.Seq.mix([a.shuffle(1), (b.shuffle(2), fl.Schedule.ramp(0.1, 0.6))]).repeat(2)


KINDS = ("mix", "plain", "shard")


def loader(kind: str = "mix", workers: int = 0) -> fl.Loader:
    """The reference loader: a repeated scheduled mix (``shard``: rank 1 of 3 of it, its
    state then records the ranks), or a plain dataset, shuffled."""
    if kind == "plain":
        return fl.Loader(
            fl.Dataset.from_arrays(name="p", i=np.arange(90)), BATCH, seed=3, workers=workers
        )
    shard = (1, 3) if kind == "shard" else None
    return fl.Loader(mixed(workers > 0), BATCH, seed=2, shard=shard, workers=workers, prefetch=2)


def snaps(batches: Any) -> list[tuple]:
    return [
        (b.meta.positions.tolist(), b.meta.source_ordinals.tolist(), b.i.tolist()) for b in batches
    ]


def rest(loader: fl.Loader) -> list[tuple]:
    """The rest of the loader's pass and the whole next pass."""
    return snaps(loader) + snaps(loader)


def started(kind: str = "mix", workers: int = 0) -> fl.Loader:
    """The reference loader, ``READ`` batches into its first pass."""
    target = loader(kind, workers)
    it = iter(target)
    for _ in range(READ):
        next(it)
    return target


def saved(kind: str = "mix", workers: int = 0) -> tuple[dict, list[tuple]]:
    """A state saved ``READ`` batches in (through JSON), and the stream that follows it."""
    with started(kind, workers) as ref:
        state = json.loads(json.dumps(ref.state_dict()))
        return state, rest(ref)


def without(key: str) -> Callable[[dict], dict]:
    return lambda s: {k: v for k, v in s.items() if k != key}


def setting(key: str, value: Any) -> Callable[[dict], dict]:
    return lambda s: {**s, key: value}


def shifted(key: str, by: int) -> Callable[[dict], dict]:
    return lambda s: {**s, key: s[key] + by}


# Fields changed to what no loader of the reference configuration ("mix") can have saved.
INVALID: dict[str, Callable[[dict], Any]] = {
    "format changed": setting("format", "feedline.loader.state2"),
    "format None": setting("format", None),
    "format missing": without("format"),
    "version older": shifted("version", -1),
    "version newer": shifted("version", 1),
    "version text": lambda s: {**s, "version": str(s["version"])},
    "version None": setting("version", None),
    "version missing": without("version"),
    "fingerprint empty": setting("fingerprint", ""),
    "fingerprint None": setting("fingerprint", None),
    "fingerprint upper case": lambda s: {**s, "fingerprint": s["fingerprint"].upper()},
    "fingerprint truncated": lambda s: {**s, "fingerprint": s["fingerprint"][:32]},
    "fingerprint a number": setting("fingerprint", 7),
    "fingerprint missing": without("fingerprint"),
    "seed text": setting("seed", "2"),
    "seed float": setting("seed", 2.0),
    "seed list": setting("seed", [2]),
    "seed missing": without("seed"),
    "epoch negative": setting("epoch", -1),
    "epoch text": setting("epoch", "0"),
    "epoch float": setting("epoch", 0.0),
    "epoch None": setting("epoch", None),
    "epoch missing": without("epoch"),
    "batches negative": setting("batches", -1),
    "batches past the pass": setting("batches", 17),  # a pass is 16 batches
    "batches far past the pass": setting("batches", 2**70),
    "batches text": setting("batches", "3"),
    "batches float": setting("batches", 3.0),
    "batches None": setting("batches", None),
    "batches missing": without("batches"),
    "ended an int": setting("ended", 0),
    "ended text": setting("ended", "false"),
    "ended None": setting("ended", None),
    "ended missing": without("ended"),
    "world of unsharded loader": setting("world", 2),
    "world zero": setting("world", 0),
    "world text": setting("world", "1"),
    "world missing": without("world"),
    "base of unsharded loader": setting("base", 8),
    "base negative": setting("base", -1),
    "base text": setting("base", "0"),
    "base None": setting("base", None),
    "base missing": without("base"),
    "no keys": lambda s: {},
    "None": lambda s: None,
    "a list": lambda s: [s],
    "a list of pairs": lambda s: list(s.items()),
    "the JSON text": lambda s: json.dumps(s),
    "the JSON bytes": lambda s: json.dumps(s).encode(),
}

# ...and for rank 1 of 3 ("shard"), whose state records the ranks.
INVALID_SHARDED: dict[str, Callable[[dict], Any]] = {
    "world None": setting("world", None),
    "world zero": setting("world", 0),
    "world negative": setting("world", -3),
    "world float": setting("world", 3.0),
    "base past the pass": setting("base", 10**6),
    "base negative": setting("base", -1),
    "base float": setting("base", 0.0),
}


def fingerprint_variants(state: dict) -> list[dict]:
    """The state with each hex digit of its fingerprint changed in turn."""
    fp = state["fingerprint"]
    out = []
    for k, ch in enumerate(fp):
        other = "0123456789abcdef"[("0123456789abcdef".index(ch) + 1) % 16]
        out.append({**state, "fingerprint": fp[:k] + other + fp[k + 1 :]})
    return out


def truncations(state: dict) -> list[Any]:
    """What a state file cut short gives: the text of every proper prefix, parsed where
    it parses (it never does: a JSON object ends with its brace), else the text itself;
    and the dict cut after each of its first keys."""
    text = json.dumps(state)
    out: list[Any] = []
    for n in range(len(text)):
        try:
            out.append(json.loads(text[:n]))
        except json.JSONDecodeError:
            out.append(text[:n])
    keys = list(state)
    out += [{k: state[k] for k in keys[:n]} for n in range(len(keys))]
    return out


def refuses(target: fl.Loader, bad: Any) -> tuple[bool, str]:
    """Whether ``target`` refuses ``bad`` with StateError leaving its state unchanged;
    and what happened otherwise."""
    before = target.state_dict()
    try:
        target.load_state_dict(bad)
    except fl.StateError:
        after = target.state_dict()
        return after == before, "" if after == before else f"changed to {after}"
    except Exception as e:  # anything else is the finding
        return False, f"{type(e).__name__}: {e}"
    return False, f"accepted, now {target.state_dict()}"


def same(a: Any, b: Any) -> bool:
    """Equal as JSON (so True is not 1, nor 2.0 2)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


POSITIONS = 128  # a pass of the reference order (45 + 19 positions, repeated twice)
RANKS = 3  # of the "shard" reference loader


def elastic(state: dict) -> dict:
    """What rank 1 of 3 saves after loading ``state`` saved by another number of ranks:
    the positions the ranks consumed together become its ``base``."""
    world = state.get("world")
    if isinstance(world, bool) or not isinstance(world, int) or world == RANKS:
        return {}
    base = min(state["base"] + state["batches"] * BATCH * world, POSITIONS)
    return {**state, "world": RANKS, "batches": 0, "base": base}


def plausible(state: dict) -> bool:
    """Whether ``world`` ranks, each at step ``batches``, can have saved ``state``: no
    rank of a pass dealt to them has more steps than that."""
    world, base = state["world"], state["base"]
    longest = -(-(POSITIONS - base) // world)  # positions of the first rank
    return state["batches"] <= -(-longest // BATCH)


def mutations(
    count: int, seed: int, kind: str = "mix"
) -> tuple[Counter, list[tuple[int, str, str]]]:
    """Random JSON mutations of a saved state: (outcome counts, failures).

    Outcomes: "refused" (StateError, loader unchanged); "accepted" (the loader then
    saves exactly the mutated state: it was a valid state); "accepted, altered" (the
    loader took it but saves something else: the state was coerced, e.g. True for 1,
    or had keys the loader ignored), listed among the failures with "accepted ... as";
    for "shard", "accepted as saved by other ranks" (another ``world``: an elastic
    resume, which recomputes ``base``), or "accepted, impossible for its ranks" (more
    batches than a pass dealt to that many ranks has); "accepted, ended mid-pass" (a
    state that says its pass ended before its last batch: the rest is skipped);
    "failure": another exception, a refusal that changed the loader, or an accepted
    state the loader then fails to read from. Failures are (case, outcome, what).
    """
    mutate = fuzz_formats().mutate_json
    state, _ = saved(kind)
    counts: Counter = Counter()
    failures: list[tuple[int, str, str]] = []
    target = started(kind)
    steps = len(target)
    try:
        for i in range(count):
            rng = random.Random(seed * 1_000_003 + i)
            bad = mutate(rng, state)
            if bad == state:
                counts["unchanged by the mutation"] += 1
                continue
            ok, what = refuses(target, bad)
            if ok:
                counts["refused"] += 1
                continue
            if not what.startswith("accepted"):
                counts["failure"] += 1
                failures.append((i, "failure", what))
                continue
            now = target.state_dict()
            if same(now, bad) and now["ended"] and now["batches"] < steps:
                counts["accepted, ended mid-pass"] += 1
                failures.append(
                    (
                        i,
                        "accepted, ended mid-pass",
                        f"{json.dumps(bad)[:300]}: ended after {now['batches']} of {steps} batches",
                    )
                )
            elif same(now, bad):
                counts["accepted"] += 1
            elif kind == "shard" and same(now, elastic(bad)):
                if plausible(bad):
                    counts["accepted as saved by other ranks"] += 1  # an elastic resume
                else:
                    counts["accepted, impossible for its ranks"] += 1
                    failures.append(
                        (
                            i,
                            "accepted, impossible for its ranks",
                            f"{json.dumps(bad)[:300]}: its batches do not fit a pass "
                            f"dealt to its ranks",
                        )
                    )
            else:
                counts["accepted, altered"] += 1
                failures.append(
                    (
                        i,
                        "accepted, altered",
                        f"{json.dumps(bad)[:300]} loaded as {json.dumps(now)[:300]}",
                    )
                )
            try:
                next(iter(target), None)
            except Exception as e:
                counts["failure"] += 1
                failures.append((i, "failure", f"reading after {bad!r}: {type(e).__name__}: {e}"))
            target.close()
            target = started(kind)
    finally:
        target.close()
    return counts, failures

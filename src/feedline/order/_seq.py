"""``Seq``: an ordering configuration, as plain immutable data.

A ``Seq`` is a tree: sources at the leaves, ordering operations above them.
Building one does no work and checks only the arguments' types and signs;
``Order(seq)`` validates the whole tree and compiles it. ``Seq`` is hashable,
compares by structure (sources by identity, bare lengths by value), and
round-trips through JSON with ``to_json`` / ``from_json``.

>>> seq = Seq.source(1000).shuffle(42).repeat(2)
>>> Seq.from_json(seq.to_json()) == seq
True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._base.hashing import MASK64
from ..errors import OrderError, OrderErrorKind
from ._schedule import Schedule
from ._sources import LengthSource, _Handle, _not_a_source, _u64, source_len, source_salt

ORDERING_VERSION = 2
"""Orders are identical for every feedline version with the same ordering version.

Version 2 (feedline 0.2) follows the dataorder crate 0.4 rule for rule: nested repeats
count total epochs, mixes pass epochs through, shuffle salts follow the configuration
as written, and a shuffle containing a mix is an error. Version 1 orders differ from
version 2 wherever those rules apply and are not computed any more."""

_JSON_FORMAT = "feedline.order"


@dataclass(frozen=True)
class Seq:
    """An ordering configuration: which record comes next, as a tree of operations.

    ======================  ================================================================
    builder                 semantics
    ======================  ================================================================
    ``Seq.source(x)``       the records ``0..len(x)`` of one source, in order
    ``Seq.concat(seqs)``    the sequences one after another
    ``Seq.mix(parts)``      interleaved by their schedules, each keeping its own order
    ``.shuffle(seed)``      a seeded permutation, O(1) memory (of a sequence with no mix)
    ``.repeat(times)``      ``times`` passes; each later pass reshuffles the shuffles inside
    ``.cycle_to(length)``   repeated (reshuffled) or truncated to exactly ``length``
    ``.skip(n)``            all but the first ``n`` positions (``n <= len``)
    ``.take(n)``            the first ``n`` positions (``n <= len``)
    ``.step_by(step)``      every ``step``-th position from the first
    ``.shard(i, count)``    ``skip(i).step_by(count)``: positions dealt round-robin
    ``.split(i, count)``    the contiguous slice ``[i*n//count, (i+1)*n//count)``
    ======================  ================================================================
    """

    op: str
    children: tuple[Seq, ...] = ()
    args: tuple = ()

    # -- builders -----------------------------------------------------------------------
    @classmethod
    def source(cls, src: object) -> Seq:
        """One source: an ``int`` (a length) or any object with ``__len__`` (and ``salt``).

        Anything else (a dataset's name or path) is kept as it is, to be resolved with
        ``map_sources`` before ``Order`` (which refuses it: ``NOT_A_SOURCE``).
        """
        if isinstance(src, Seq):
            raise TypeError("Seq.source takes a dataset or a length, not a Seq")
        if isinstance(src, (int, np.integer, float, complex, np.number, np.bool_)) or src is None:
            source_len(src)  # a length, or a number or None that cannot be one: TypeError
        return cls("source", (), (_Handle(src),))

    @classmethod
    def concat(cls, seqs: Iterable[Seq]) -> Seq:
        """The sequences one after another."""
        children = tuple(_as_seq(s) for s in seqs)
        return cls("concat", children, ())

    @classmethod
    def mix(cls, parts: Iterable[Seq | tuple[Seq, Schedule]]) -> Seq:
        """Interleave parts, each a ``Seq`` or a ``(Seq, Schedule)`` pair.

        Every element of every part appears once; longer parts are drawn more often.
        """
        children = []
        schedules = []
        for part in parts:
            if isinstance(part, tuple):
                if len(part) != 2 or not isinstance(part[1], Schedule):
                    raise TypeError("a mix part is a Seq or a (Seq, Schedule) pair")
                children.append(_as_seq(part[0]))
                schedules.append(part[1])
            else:
                children.append(_as_seq(part))
                schedules.append(Schedule.uniform())
        return cls("mix", tuple(children), tuple(schedules))

    def shuffle(self, seed: int) -> Seq:
        """A seeded permutation of this sequence (O(1) memory; no mix may be inside)."""
        return Seq("shuffle", (self,), (_u64(seed, "a shuffle seed"),))

    def repeat(self, times: int) -> Seq:
        """``times`` passes over this sequence; passes after the first are reshuffled."""
        return Seq("repeat", (self,), (_u64(times, "repeat times"),))

    def cycle_to(self, length: int) -> Seq:
        """Repeat (reshuffling each extra pass) or truncate to exactly ``length`` positions."""
        return Seq("cycle_to", (self,), (_u64(length, "cycle_to length"),))

    def skip(self, n: int) -> Seq:
        """All positions but the first ``n`` (an error at ``Order`` if ``n > len``)."""
        return Seq("skip", (self,), (_u64(n, "skip count"),))

    def take(self, n: int) -> Seq:
        """The first ``n`` positions (an error at ``Order`` if ``n > len``)."""
        return Seq("take", (self,), (_u64(n, "take count"),))

    def step_by(self, step: int) -> Seq:
        """Every ``step``-th position, starting with the first (``step >= 1``)."""
        return Seq("step_by", (self,), (_u64(step, "step"),))

    def shard(self, index: int, count: int) -> Seq:
        """``skip(index).step_by(count)``: positions dealt round-robin to ``count`` shards.

        Together the ``count`` shards hold every position exactly once; their lengths
        differ by at most one. A shard whose index is past the end is empty.
        """
        index = _u64(index, "shard index")
        count = _u64(count, "shard count")
        if count == 0 or index >= count:
            raise OrderError(
                OrderErrorKind.INVALID_SHARD,
                f"a shard index must satisfy 0 <= index < count, got index {index} of {count}",
            )
        return Seq("shard", (self,), (index, count))

    def split(self, index: int, count: int) -> Seq:
        """The contiguous slice ``[index*n//count, (index+1)*n//count)`` (data.nu's shards)."""
        index = _u64(index, "split index")
        count = _u64(count, "split count")
        if count == 0 or index >= count:
            raise OrderError(
                OrderErrorKind.INVALID_SHARD,
                f"a split index must satisfy 0 <= index < count, got index {index} of {count}",
            )
        return Seq("split", (self,), (index, count))

    def batches(
        self, n: int | None = None, *, batch_size: int | None = None, **loader_options: Any
    ) -> Any:
        """A ``fl.Loader`` over this order: batches of ``n`` (by position or ``n=``, as
        ShapeScript's ``batches(64)``; ``batch_size=`` is the same; see ``Loader``)."""
        if (n is None) == (batch_size is None):
            raise TypeError(
                f"batches takes the batch size once, as n (by position or n=) or "
                f"batch_size=; got n={n!r} and batch_size={batch_size!r}"
            )
        # The contract's convenience constructor, and the one import here that points up
        # the layers, at call time (tests/test_layers.py names it).
        from ..loader import Loader

        size = n if n is not None else batch_size
        assert size is not None  # one of the two, checked above
        return Loader(self, size, **loader_options)

    # -- sources ------------------------------------------------------------------------
    def map_sources(self, fn: Callable[[object], object]) -> Seq:
        """The same configuration with every source ``s`` replaced by ``fn(s)``, in tree
        order (to resolve names or paths into datasets before ``Order``)."""
        return self._map(fn, [0], wrap=False)

    def try_map_sources(self, fn: Callable[[object], object]) -> Seq:
        """``map_sources`` that stops at the first source ``fn`` fails on, raising an
        ``OrderError`` (``NOT_A_SOURCE``) that names the source and its node, with
        ``fn``'s exception as its cause."""
        return self._map(fn, [0], wrap=True, root=self)

    def _map(
        self,
        fn,
        counter: list[int],
        wrap: bool,
        root: Seq | None = None,
        path: tuple[int, ...] = (),
    ) -> Seq:
        if self.op == "source":
            ordinal = counter[0]
            counter[0] += 1
            if not wrap:
                return Seq.source(fn(self.args[0].obj))
            try:
                return Seq.source(fn(self.args[0].obj))
            except Exception as e:  # the caller's resolver: any failure is reported
                assert root is not None  # try_map_sources passes the root with wrap
                raise OrderError(
                    OrderErrorKind.NOT_A_SOURCE,
                    f"source {ordinal} ({self.args[0]!r}) could not be mapped: {e}",
                    path,
                    render_path(root, path),
                    source=ordinal,
                ) from e
        children = tuple(
            c._map(fn, counter, wrap, root, (*path, i)) for i, c in enumerate(self.children)
        )
        return Seq(self.op, children, self.args)

    # -- inspection ---------------------------------------------------------------------
    def sources(self) -> list[object]:
        """The source handles, in tree order (their index is their ``source_ordinal``)."""
        out: list[object] = []
        stack = [self]
        while stack:
            node = stack.pop()
            if node.op == "source":
                out.append(node.args[0].obj)
            else:
                stack.extend(reversed(node.children))
        return out

    def __repr__(self) -> str:
        if self.op == "source":
            return f"Seq.source({self.args[0]!r})"
        if self.op == "concat":
            return f"Seq.concat([{', '.join(map(repr, self.children))}])"
        if self.op == "mix":
            parts = ", ".join(
                repr(c) if s.is_uniform else f"({c!r}, {s!r})"
                for c, s in zip(self.children, self.args)
            )
            return f"Seq.mix([{parts}])"
        return f"{self.children[0]!r}.{self.op}({', '.join(map(str, self.args))})"

    # -- configuration as data ----------------------------------------------------------
    def to_dict(self) -> dict:
        """The configuration as plain JSON-ready data (sources by length and salt)."""
        return {
            "format": _JSON_FORMAT,
            "ordering_version": ORDERING_VERSION,
            "seq": _node_to_dict(self),
        }

    def to_json(self, indent: int | None = None) -> str:
        """The configuration as JSON; sources are recorded by length and salt."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes | dict, sources: Sequence[object] | None = None) -> Seq:
        """Rebuild a configuration; ``sources[i]`` replaces the i-th recorded source.

        Each given source must have the recorded length and salt (``SOURCE_CHANGED``
        otherwise), so a resumed run never silently orders a changed dataset. Without
        ``sources``, length-only stand-ins carrying the recorded salts are used.
        """
        data = text if isinstance(text, dict) else _loads(text)
        _expect_keys(data, {"format", "ordering_version", "seq"}, "the document")
        if data["format"] != _JSON_FORMAT:
            raise OrderError(
                OrderErrorKind.INVALID_JSON,
                f"expected format {_JSON_FORMAT!r}, got {data['format']!r}",
            )
        if data["ordering_version"] != ORDERING_VERSION:
            raise OrderError(
                OrderErrorKind.VERSION_MISMATCH,
                f"the configuration was saved with ordering version "
                f"{data['ordering_version']!r}; this feedline computes ordering version "
                f"{ORDERING_VERSION} only (orders differ between versions: resume it with "
                "the feedline that saved it, or start a new run)",
            )
        counter = [0]
        seq = _node_from_dict(data["seq"], sources, counter)
        if sources is not None and counter[0] != len(sources):
            raise OrderError(
                OrderErrorKind.SOURCE_CHANGED,
                f"the configuration has {counter[0]} sources, {len(sources)} were given",
            )
        return seq


def _as_seq(x: object) -> Seq:
    if isinstance(x, Seq):
        return x
    if hasattr(x, "to_seq"):
        return x.to_seq()
    return Seq.source(x)


# A document deeper than this cannot compile (MAX_DEPTH levels); refusing it while
# reading also refuses a cyclic dict, which is infinitely deep.
_MAX_DOC_DEPTH = 16


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise OrderError(
                OrderErrorKind.INVALID_JSON, f"the key {key!r} appears twice in one object"
            )
        out[key] = value
    return out


def _loads(text: str | bytes) -> dict:
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as e:
        raise OrderError(OrderErrorKind.INVALID_JSON, f"not valid JSON: {e}") from e
    except RecursionError as e:
        raise OrderError(
            OrderErrorKind.INVALID_JSON,
            "the JSON is nested deeper than any ordering document (at most 16 levels of nodes)",
        ) from e
    if not isinstance(data, dict):
        raise OrderError(OrderErrorKind.INVALID_JSON, "an ordering document is a JSON object")
    return data


def _expect_keys(d: object, keys: set[str], what: str) -> None:
    if not isinstance(d, dict) or set(d) != keys:
        found = sorted(d) if isinstance(d, dict) else type(d).__name__
        raise OrderError(
            OrderErrorKind.INVALID_JSON,
            f"{what} must have exactly the fields {sorted(keys)}, found {found}",
        )


_UNARY_FIELDS = {
    "shuffle": ("seed",),
    "repeat": ("times",),
    "cycle_to": ("length",),
    "skip": ("n",),
    "take": ("n",),
    "step_by": ("step",),
    "shard": ("index", "count"),
    "split": ("index", "count"),
}


def _node_to_dict(seq: Seq) -> dict:
    if seq.op == "source":
        obj = seq.args[0].obj
        problem = "" if isinstance(obj, (int, np.integer)) else _not_a_source(obj)
        if problem:
            raise OrderError(OrderErrorKind.NOT_A_SOURCE, f"cannot record a source: {problem}")
        return {"source": {"len": source_len(obj), "salt": source_salt(obj)}}
    if seq.op == "concat":
        return {"concat": [_node_to_dict(c) for c in seq.children]}
    if seq.op == "mix":
        return {
            "mix": [
                {"seq": _node_to_dict(c), "schedule": s.to_dict()}
                for c, s in zip(seq.children, seq.args)
            ]
        }
    body = dict(zip(_UNARY_FIELDS[seq.op], seq.args))
    body["seq"] = _node_to_dict(seq.children[0])
    return {seq.op: body}


def _int_field(body: dict, name: str) -> int:
    v = body[name]
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MASK64:
        raise OrderError(
            OrderErrorKind.INVALID_JSON,
            f"field {name!r} must be an integer in [0, 2**64), got {v!r}",
        )
    return v


def _node_from_dict(
    d: object, sources: Sequence[object] | None, counter: list[int], depth: int = 1
) -> Seq:
    if depth > _MAX_DOC_DEPTH:
        raise OrderError(
            OrderErrorKind.INVALID_JSON,
            f"the configuration is nested deeper than any ordering document "
            f"(at most {_MAX_DOC_DEPTH} levels of nodes), or is cyclic",
        )
    if not isinstance(d, dict) or len(d) != 1:
        raise OrderError(
            OrderErrorKind.INVALID_JSON, f"a node is an object with one operation, got {d!r}"
        )
    ((op, body),) = d.items()
    if op == "source":
        _expect_keys(body, {"len", "salt"}, "a source")
        length, salt_ = _int_field(body, "len"), _int_field(body, "salt")
        i = counter[0]
        counter[0] += 1
        if sources is None:
            return Seq.source(length if salt_ == 0 else LengthSource(length, salt_))
        if i >= len(sources):
            raise OrderError(
                OrderErrorKind.SOURCE_CHANGED,
                f"the configuration has more sources than the {len(sources)} given",
            )
        src = sources[i]
        got_len, got_salt = source_len(src), source_salt(src)
        if (got_len, got_salt) != (length, salt_):
            raise OrderError(
                OrderErrorKind.SOURCE_CHANGED,
                f"source {i} was recorded with length {length} and salt {salt_}, "
                f"the given one has length {got_len} and salt {got_salt}",
                source=i,
            )
        return Seq.source(src)
    if op == "concat":
        if not isinstance(body, list):
            raise OrderError(OrderErrorKind.INVALID_JSON, "concat takes a list of nodes")
        return Seq.concat([_node_from_dict(c, sources, counter, depth + 1) for c in body])
    if op == "mix":
        if not isinstance(body, list):
            raise OrderError(OrderErrorKind.INVALID_JSON, "mix takes a list of parts")
        parts = []
        for part in body:
            _expect_keys(part, {"seq", "schedule"}, "a mix part")
            parts.append(
                (
                    _node_from_dict(part["seq"], sources, counter, depth + 1),
                    Schedule.from_dict(part["schedule"]),
                )
            )
        return Seq.mix(parts)
    if op not in _UNARY_FIELDS:
        raise OrderError(OrderErrorKind.INVALID_JSON, f"unknown operation {op!r}")
    fields = _UNARY_FIELDS[op]
    _expect_keys(body, {*fields, "seq"}, f"a {op} node")
    child = _node_from_dict(body["seq"], sources, counter, depth + 1)
    return getattr(child, op)(*(_int_field(body, f) for f in fields))


def render_path(seq: Seq, path: tuple[int, ...]) -> str:
    """``mix[1].take``: the operations from the root to a node, with part indices."""
    text = seq.op
    node = seq
    for i in path:
        child = node.children[i]
        text += f"[{i}].{child.op}" if node.op in ("concat", "mix") else f".{child.op}"
        node = child
    return text

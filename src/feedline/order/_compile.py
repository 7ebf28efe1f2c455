"""Validate a ``Seq`` and compile it into the nodes that answer lookups.

Compilation follows the crate's rules (ordering version 2). What decides the order is
read off the configuration as written, so no pruning below can change it:

- Every node has a configuration salt: a source's from its own salt and original
  length (also when it is empty or selected away), a concat's or a mix's its children's
  folded left to right, every other node's its child's. A shuffle keys with its
  child's salt.
- ``repeat(1)`` is its child; ``repeat(0)`` and repeats of empty children are empty
  (the child is still validated); other repeats keep their count, which multiplies
  the enclosing epoch (nested repeats count total epochs).
- ``cycle_to(L)`` is ``take(L)`` when ``L <= len``, else a repeat of
  ``ceil(L / len)`` passes cut to ``L``.
- Selections (skip, take, step_by, split, shard) fold into one another. A contiguous
  selection (or one position) passes into a concat, keeping only the children it
  touches, and into a source (as an offset); a selection of a repeat stays above it,
  keeping its count.
- Empty children of a concat or mix are dropped; a concat or mix left with one child
  is that child; a shuffle of fewer than two positions is its child.
- A mix anywhere below a shuffle is ``SHUFFLE_CONTAINS_MIX``, at the nearest shuffle.
  Children are validated in configuration order, a mix's before its schedules.
"""

from __future__ import annotations

from .._base import hashing
from ..errors import OrderError, OrderErrorKind
from ._mixplan import MixPlan
from ._nodes import Concat, Empty, Leaf, Mix, Node, Repeat, Select, Shuffle
from ._seq import Seq, render_path
from ._sources import resolved_len, source_salt

MAX_DEPTH = 16
"""Configurations nest at most this many levels (the root is level 1)."""
MAX_LEN = (1 << 64) - 1
MAX_MIX_LEN = 1 << 46


class _Compiler:
    def __init__(self, root: Seq) -> None:
        self.root = root
        self.next_ordinal = 0
        # The path of the nearest shuffle above the node being compiled.
        self.shuffle_at: tuple[int, ...] | None = None

    def fail(
        self, kind: OrderErrorKind, message: str, path: tuple[int, ...], **details: object
    ) -> OrderError:
        return OrderError(kind, message, path, render_path(self.root, path), **details)

    def compile(self, seq: Seq, path: tuple[int, ...] = ()) -> tuple[Node, int]:
        """The compiled node of ``seq`` and its configuration salt."""
        if len(path) >= MAX_DEPTH:
            raise self.fail(
                OrderErrorKind.TOO_DEEP, f"configuration nests deeper than {MAX_DEPTH} levels", path
            )
        op = seq.op
        if op == "source":
            obj = seq.args[0].obj
            ordinal = self.next_ordinal
            self.next_ordinal += 1
            n = resolved_len(obj, ordinal, lambda k, m: self.fail(k, m, path))
            salt = hashing.source_salt(source_salt(obj), n)
            if n == 0:
                return Empty(0), salt
            return Leaf(n, ordinal=ordinal, length=n, salt=salt), salt
        if op == "concat":
            compiled = [self.compile(c, (*path, i)) for i, c in enumerate(seq.children)]
            salt = hashing.combine_salts([s for _, s in compiled])
            return self.concat([c for c, _ in compiled], path), salt
        if op == "mix":
            return self.mix(seq, path)
        if op == "step_by":
            step = seq.args[0]
            if step == 0:
                raise self.fail(OrderErrorKind.ZERO_STEP, "step is zero", path)
            child, salt = self.compile(seq.children[0], (*path, 0))
            return select(child, 0, step, -(-child.n // step)), salt
        if op == "shuffle":
            enclosing, self.shuffle_at = self.shuffle_at, path
            try:
                child, salt = self.compile(seq.children[0], (*path, 0))
            finally:
                self.shuffle_at = enclosing
            if child.n <= 1:
                return child, salt
            return Shuffle(child.n, child=child, seed=seq.args[0], salt=salt), salt
        child, salt = self.compile(seq.children[0], (*path, 0))
        return self.unary(seq, child, path), salt

    def unary(self, seq: Seq, child: Node, path: tuple[int, ...]) -> Node:
        op = seq.op
        n = child.n
        if op == "repeat":
            return self.repeat(child, seq.args[0], path)
        if op == "cycle_to":
            length = seq.args[0]
            if length > 0 and n == 0:
                raise self.fail(
                    OrderErrorKind.EMPTY_CYCLE, "cannot cycle a sequence without elements", path
                )
            if length <= n:
                return select(child, 0, 1, length)
            rep = self.repeat(child, -(-length // n), path)
            return select(rep, 0, 1, length)
        if op == "skip":
            k = seq.args[0]
            if k > n:
                raise self.fail(
                    OrderErrorKind.SKIP_OUT_OF_RANGE,
                    f"cannot skip {k} of {n} positions",
                    path,
                    n=k,
                    len=n,
                )
            return select(child, k, 1, n - k)
        if op == "take":
            k = seq.args[0]
            if k > n:
                raise self.fail(
                    OrderErrorKind.TAKE_OUT_OF_RANGE,
                    f"cannot take {k} of {n} positions",
                    path,
                    n=k,
                    len=n,
                )
            return select(child, 0, 1, k)
        if op == "shard":
            index, count = seq.args
            start = min(index, n)
            return select(select(child, start, 1, n - start), 0, count, -(-(n - start) // count))
        if op == "split":
            index, count = seq.args
            a, b = index * n // count, (index + 1) * n // count
            return select(child, a, 1, b - a)
        raise AssertionError(f"unknown operation {op!r}")  # Seq's builders make no others

    def repeat(self, child: Node, times: int, path: tuple[int, ...]) -> Node:
        n = child.n * times
        if n > MAX_LEN:
            raise self.fail(
                OrderErrorKind.LENGTH_OVERFLOW, "sequence length exceeds 2**64 - 1", path
            )
        if n == 0:
            return Empty(0)
        if times == 1:
            return child
        return Repeat(n, child=child, times=times)

    def concat(self, children: list[Node], path: tuple[int, ...]) -> Node:
        total = sum(c.n for c in children)
        if total > MAX_LEN:
            raise self.fail(
                OrderErrorKind.LENGTH_OVERFLOW, "sequence length exceeds 2**64 - 1", path
            )
        return make_concat(children)

    def mix(self, seq: Seq, path: tuple[int, ...]) -> tuple[Node, int]:
        if self.shuffle_at is not None:
            at = self.shuffle_at
            raise self.fail(
                OrderErrorKind.SHUFFLE_CONTAINS_MIX,
                f"a shuffle contains a mix (at {render_path(self.root, path)}): shuffle each "
                "part before mixing; a shuffle over a mix would scatter its schedules",
                at,
            )
        compiled = [self.compile(c, (*path, i)) for i, c in enumerate(seq.children)]
        parts = [c for c, _ in compiled]
        salt = hashing.combine_salts([s for _, s in compiled])
        for i, (part, schedule) in enumerate(zip(parts, seq.args)):
            problem = schedule.problem()
            if problem is not None:
                raise self.fail(
                    OrderErrorKind.INVALID_SCHEDULE,
                    f"invalid schedule {schedule!r}: {problem.value}",
                    (*path, i),
                    schedule=schedule,
                    reason=problem,
                )
            if (
                part.n
                and not schedule.is_uniform
                and float(part.n) * schedule.peak_rate() > float(MAX_MIX_LEN)
            ):
                raise self.fail(
                    OrderErrorKind.SCHEDULE_TOO_STEEP,
                    f"mix part too long for the steepness of its schedule: length {part.n} "
                    f"x peak rate {schedule.peak_rate()} exceeds {MAX_MIX_LEN}",
                    (*path, i),
                    len=part.n,
                    peak_rate=schedule.peak_rate(),
                    limit=MAX_MIX_LEN,
                )
        total = sum(p.n for p in parts)
        if total > MAX_MIX_LEN:
            raise self.fail(
                OrderErrorKind.MIX_TOO_LONG,
                f"mix longer than {MAX_MIX_LEN} ({total} positions)",
                path,
            )
        kept = [(p, s) for p, s in zip(parts, seq.args) if p.n]
        if not kept:
            return Empty(0), salt
        if len(kept) == 1:
            return kept[0][0], salt
        plan = MixPlan([p.n for p, _ in kept], [s for _, s in kept])
        return Mix(total, parts=tuple(p for p, _ in kept), plan=plan), salt


def make_concat(children: list[Node]) -> Node:
    kept = [c for c in children if c.n]
    if not kept:
        return Empty(0)
    if len(kept) == 1:
        return kept[0]
    offsets = []
    total = 0
    for c in kept:
        offsets.append(total)
        total += c.n
    return Concat(total, children=tuple(kept), offsets=tuple(offsets))


def select(node: Node, start: int, step: int, length: int) -> Node:
    """Positions ``start + i * step`` (``i < length``) of ``node``, folded where possible."""
    if length == 0:
        return Empty(0)
    if length == 1:
        step = 1
    if start == 0 and step == 1 and length == node.n:
        return node
    if isinstance(node, Select):
        return select(node.child, node.start + start * node.step, node.step * step, length)
    if step == 1:
        if isinstance(node, Leaf):
            return Leaf(
                length,
                ordinal=node.ordinal,
                length=node.length,
                salt=node.salt,
                offset=node.offset + start,
            )
        if isinstance(node, Concat):
            end = start + length
            kept = []
            for child, off in zip(node.children, node.offsets):
                lo, hi = max(start, off), min(end, off + child.n)
                if lo < hi:
                    kept.append(select(child, lo - off, 1, hi - lo))
            return make_concat(kept)
    return Select(length, child=node, start=start, step=step)


def compile_seq(seq: Seq) -> tuple[Node, int]:
    """The compiled root of ``seq`` and its number of sources."""
    compiler = _Compiler(seq)
    root, _ = compiler.compile(seq)
    return root, compiler.next_ordinal

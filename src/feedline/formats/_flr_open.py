"""Opening an ``.flr``'s ragged columns: each section's place, then every row's offsets
and shapes, then the dims fields share, checked before the column is trusted; and the
whole-file UTF-8 check of a string column that ``RecFile.verify()`` runs.

A problem is a ``FormatError`` naming the file and the byte that holds the lie: the
header (its column entry) or the offset or shape of the first bad row.
"""

from __future__ import annotations

import codecs
from typing import Any

import numpy as np

from ..errors import FormatError
from ._flr_layout import ALIGN, INDEX_DTYPE, SECTION_KEYS, SLICE, has_shapes, section_names
from ._flr_layout import value_dtype as _value_dtype
from ._flr_ragged import FileRagged, column_lengths, ragged_problem, shapes_for

# Shared-dim lengths and string starts are checked this many rows at a time.
_STEP = 1 << 20


def _is_int(v: Any) -> bool:
    return type(v) is int  # not True, not 1.0: JSON's 1 only


def check_place(path: str, what: str, off: int, length: int, low: int, size: int, at: int) -> None:
    """A section lies at a multiple of 64, after ``low`` (the header, the previous
    section) and inside the file."""
    if off % ALIGN or off < low or off + length > size:
        raise FormatError(
            f"{what} at [{off}, {off + length}) is not an aligned range after "
            f"the header and the previous section, inside the file of {size}",
            path,
            at,
        )


def open_ragged(
    rf: Any, f: Any, c: dict, n: int, low: int, h_off: int
) -> tuple[FileRagged, dict[str, tuple[int, int, int]], int]:
    """A ragged, blob or string column of the open file ``rf`` (its ``path``, ``_file``,
    ``record`` and ``_check_open``) from its header entry ``c``, checked: its sections'
    places and lengths, and every row (offsets from 0, nondecreasing, to the values'
    end; shapes that hold its sizes, within the dims' maxima). Returns the column, its
    sections' (offset, length, crc32) by name, and where the next section may start."""
    path, size = rf.path, rf._file.size
    names = section_names(f)
    keys = {"field", "kind", *names}
    if set(c) != keys:
        raise FormatError(
            f"a {c['kind']} column entry has the keys {sorted(keys)}; found {sorted(c)}",
            path,
            h_off,
        )
    placed: dict[str, tuple[int, int, int]] = {}
    for name in names:
        e = c[name]
        if not (isinstance(e, dict) and set(e) == SECTION_KEYS) or not all(
            _is_int(e[k]) and e[k] >= 0 for k in SECTION_KEYS
        ):
            raise FormatError(
                f"column `{f.name}`'s {name} should be an object of the JSON integers "
                f"{sorted(SECTION_KEYS)}, found {e!r:.120}",
                path,
                h_off,
            )
        off, length = e["offset"], e["length"]
        check_place(path, f"column `{f.name}`'s {name}", off, length, low, size, h_off)
        low = off + length
        placed[name] = (off, length, e["crc32"])
    vdt = _value_dtype(f)
    k = len(f.varying) if f.kind == "array" else 1
    want = {"offsets": (n + 1) * INDEX_DTYPE.itemsize, "shapes": n * k * INDEX_DTYPE.itemsize}
    for name in names[1:]:
        if placed[name][1] != want[name]:
            raise FormatError(
                f"column `{f.name}`'s {name} should hold {want[name]} bytes for {n} rows "
                f"(int64), its length is {placed[name][1]}",
                path,
                h_off,
            )
    v_off, v_len, _ = placed["values"]
    if v_len % vdt.itemsize:
        raise FormatError(
            f"column `{f.name}`'s values should be whole {vdt} items, found {v_len} bytes",
            path,
            h_off,
        )
    count = v_len // vdt.itemsize
    values = rf._file.array(vdt, v_off, count)
    offsets = rf._file.array(INDEX_DTYPE, placed["offsets"][0], n + 1)
    shapes = None
    if has_shapes(f):
        shapes = rf._file.array(INDEX_DTYPE, placed["shapes"][0], n * k, (n, k))
    if not isinstance(offsets, np.ndarray):  # a remote file: checked whole, then kept
        offsets = np.asarray(offsets)
        shapes = None if shapes is None else np.asarray(shapes)
    rf._check_open()
    problem = ragged_problem(f, rf.record, offsets, shapes, count)
    if problem is not None:
        section, i, message = problem
        at = placed[section][0] + i * INDEX_DTYPE.itemsize * (k if section == "shapes" else 1)
        raise FormatError(f"column `{f.name}`'s {section}: {message}", path, at)
    column = FileRagged(
        values,
        offsets,
        shapes_for(f, offsets, shapes),
        f.shape if f.kind == "array" else (None,),
        path=path,
        at=v_off,
        intact=rf._check_open,
        strings=f.kind == "str",
        handle=rf._file,
    )
    return column, placed, low


def check_shared_dims(
    path: str, record: Any, columns: dict[str, Any], offsets_at: dict[str, int], n: int
) -> None:
    """Fields sharing a varying dim (or a field using one twice) have equal lengths on it
    in every row, as the record requires of every example. ``offsets_at`` maps a ragged
    field to its offsets section's place (where the error points)."""
    users: dict[str, list[tuple[str, int]]] = {}
    for f in record.fields.values():
        if f.kind == "array":
            for k, dim in enumerate(f.varying):
                users.setdefault(dim, []).append((f.name, k))
    for dim, pairs in users.items():
        if len(pairs) < 2:
            continue
        (name0, k0), rest = pairs[0], pairs[1:]
        for a in range(0, n, _STEP):
            b = min(n, a + _STEP)
            first = column_lengths(columns[name0], k0, a, b)
            for name, k in rest:
                other = column_lengths(columns[name], k, a, b)
                if not np.array_equal(first, other):
                    r = a + int(np.argmax(first != other))
                    raise FormatError(
                        f"fields `{name0}` and `{name}` share the varying dim {dim}, "
                        f"but in row {r} `{name0}` has {dim} = {int(first[r - a])} and "
                        f"`{name}` has {dim} = {int(other[r - a])}",
                        path,
                        offsets_at[name] + r * INDEX_DTYPE.itemsize,
                    )


def verify_utf8(path: str, name: str, col: Any, at: int, n: int, check: Any) -> None:
    """A string column's bytes decode as UTF-8, and no string starts inside a character
    (so each string decodes on its own), a slice at a time; ``at`` is where its values
    lie in the file, ``check()`` runs before each slice is read."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    total = len(col.values)
    for a in range(0, max(total, 1), SLICE):
        check()
        part = np.ascontiguousarray(col.values[a : a + SLICE]).tobytes()
        pending = len(decoder.getstate()[0])
        try:
            decoder.decode(part, final=a + SLICE >= total)
        except UnicodeDecodeError as e:
            bad = at + a - pending + e.start
            raise FormatError(f"column `{name}` is not UTF-8 at byte {bad}", path, bad) from e
    for a in range(0, n, _STEP):
        check()
        starts = np.asarray(col.offsets[a : min(n, a + _STEP) + 1], dtype=np.int64)
        starts = starts[:-1][starts[:-1] < starts[1:]]
        if len(starts):
            inside = (np.asarray(col.values[starts]) & 0xC0) == 0x80
            if inside.any():
                bad = at + int(starts[np.argmax(inside)])
                raise FormatError(
                    f"a string of column `{name}` starts inside a UTF-8 character (byte {bad})",
                    path,
                    bad,
                )

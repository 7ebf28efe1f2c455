"""The 64-bit mixing arithmetic of the dataorder crate (ordering version 2).

Every integer operation is on unsigned 64-bit values and wraps. Scalars use
Python ints masked to 64 bits; arrays use numpy ``uint64`` (whose arithmetic
wraps the same way). Both give the same bits.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
PHI = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB

KEY_SEED_XOR = 0x2545F4914F6CDD1D
KEY_FINAL_XOR = 0x1F83D9ABFB41BD6B
SALT_XOR = 0x6A09E667F3BCC908
EPOCH_XOR = 0x3C6EF372FE94F82B

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3

_U_M1 = np.uint64(_M1)
_U_M2 = np.uint64(_M2)
_U30 = np.uint64(30)
_U27 = np.uint64(27)
_U31 = np.uint64(31)


def mix64(z: int) -> int:
    """SplitMix64's finaliser on one value (a bijection of the 64-bit words)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * _M1) & MASK64
    z = ((z ^ (z >> 27)) * _M2) & MASK64
    return z ^ (z >> 31)


def mix64_array(z: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """``mix64`` of every element of a ``uint64`` array, in place; returns ``z``."""
    if tmp is None:
        tmp = np.empty_like(z)
    np.right_shift(z, _U30, out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, _U_M1, out=z)
    np.right_shift(z, _U27, out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, _U_M2, out=z)
    np.right_shift(z, _U31, out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    return z


def salt(name: str | bytes) -> int:
    """A stable 64-bit salt from a dataset's name: FNV-1a 64 over its UTF-8 bytes.

    Give a source a ``salt`` attribute made this way so that its shuffle stays the
    same when its files move, and differs from other datasets of the same length.

    >>> salt("web")
    6818697334544801521
    """
    data = name.encode("utf-8") if isinstance(name, str) else bytes(name)
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


def source_salt(salt_: int, length: int) -> int:
    """A source's configuration salt: its own salt and its original length (also 0)."""
    return mix64(mix64(salt_ ^ SALT_XOR) ^ ((length * PHI) & MASK64))


def combine_salts(salts: list[int]) -> int:
    """A concat's or a mix's salt: its children's salts folded left to right.

    No children give 0 and one child passes through, so grouping matters:
    ``concat([a, concat([b, c])])`` differs from the flat (and left-nested) form.
    """
    if not salts:
        return 0
    acc = salts[0]
    for s in salts[1:]:
        acc = mix64(((acc + PHI) & MASK64) ^ s)
    return acc


def round_keys(seed: int, ctx: int, shuffle_salt_: int) -> tuple[int, ...]:
    """The six Feistel round keys of a shuffle with ``seed`` in context ``ctx``."""
    a = mix64(
        ((mix64(seed ^ KEY_SEED_XOR) + ctx * PHI + mix64(shuffle_salt_)) & MASK64) ^ KEY_FINAL_XOR
    )
    return tuple(mix64(a + i * PHI) for i in range(6))


def round_keys_array(seed: int, ctx: np.ndarray, shuffle_salt_: int) -> np.ndarray:
    """Round keys for many contexts at once: a ``(6, len(ctx))`` ``uint64`` array."""
    base = np.uint64((mix64(seed ^ KEY_SEED_XOR) + mix64(shuffle_salt_)) & MASK64)
    a = ctx.astype(np.uint64) * np.uint64(PHI)
    a += base
    a ^= np.uint64(KEY_FINAL_XOR)
    mix64_array(a)
    out = np.empty((6, len(ctx)), dtype=np.uint64)
    for i in range(6):
        np.add(a, np.uint64((i * PHI) & MASK64), out=out[i])
        mix64_array(out[i])
    return out


def epoch_word(seed: int, epoch: int) -> int:
    """The word a shuffle keys with in context ``(order seed, epoch)``.

    ``epoch`` is the total epoch number: each enclosing repeat of ``t`` passes makes it
    ``epoch * t + e`` (wrapping), so nested repeats count as one flat repeat.
    """
    if epoch == 0:
        return seed
    return mix64(((mix64(seed ^ EPOCH_XOR) + epoch * PHI) & MASK64) ^ PHI)


def epoch_word_array(seed: int, epoch: np.ndarray) -> np.ndarray:
    """``epoch_word`` of every epoch of a ``uint64`` array, for one order seed."""
    z = epoch * np.uint64(PHI)
    z += np.uint64(mix64(seed ^ EPOCH_XOR))
    z ^= np.uint64(PHI)
    mix64_array(z)
    return np.where(epoch == 0, np.uint64(seed), z)

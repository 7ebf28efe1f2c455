"""The file label of neuralnet.cpp's files, and the ``.nnvocab`` vocabulary container.

Every file starts with ``[magic 4 bytes][u32 version]``: ``NNDS`` for a dataset, ``NNVC``
for a vocabulary, both version 1. A ``.nnvocab`` is the label and the vocabulary as a
version 2 kvrec at byte 8, ending the file.
"""

from __future__ import annotations

import operator
import os
import struct
from collections.abc import Mapping
from typing import Any

from ..errors import FormatError
from . import kvrec

DATASET_MAGIC, VOCAB_MAGIC, VERSION, LABEL_SIZE = b"NNDS", b"NNVC", 1, 8
VOCAB_VERSION = VERSION  # both files are version 1
_LABEL = struct.Struct("<4sI")


def write_file_label(magic: bytes, version: int) -> bytes:
    """The 8-byte file label ``[magic 4 bytes][u32 version]`` (neuralnet.cpp's
    ``write_file_label``): ``write_file_label(MAGIC, VERSION)`` starts a ``.nndataset``,
    ``write_file_label(VOCAB_MAGIC, VOCAB_VERSION)`` a ``.nnvocab``. Any magic of 4
    bytes and version in ``[0, 2**32)`` is written (the label is generic); anything
    else is refused (``TypeError``/``ValueError``).

    >>> write_file_label(b"NNDS", 1)
    b'NNDS\\x01\\x00\\x00\\x00'
    """
    if not isinstance(magic, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"a file label's magic is 4 bytes (e.g. b'NNDS'), got {type(magic).__name__} {magic!r}"
        )
    magic = bytes(magic)
    if len(magic) != 4:
        raise ValueError(f"a file label's magic is 4 bytes, got {len(magic)}: {magic!r}")
    try:
        if isinstance(version, bool):
            raise TypeError
        version = operator.index(version)
    except TypeError:
        raise TypeError(f"a file label's version is an int, got {type(version).__name__}") from None
    if not 0 <= version < 1 << 32:
        raise ValueError(f"a file label's version is a u32 in [0, 2**32), got {version}")
    return _LABEL.pack(magic, version)


def write_nnvocab(vocab: Mapping[str, Any]) -> bytes:
    """The bytes of a ``.nnvocab`` file: label ``NNVC`` v1, then ``vocab`` as a version 2
    kvrec at base 8. Write them with any file API (they are the whole file).

    >>> parse_nnvocab(write_nnvocab({"size": 3}))
    {'size': 3}
    """
    return _LABEL.pack(VOCAB_MAGIC, VERSION) + kvrec.encode_v2(vocab, LABEL_SIZE)


def _check_label(data: Any, size: int, path: Any) -> bytes:
    if size < LABEL_SIZE:
        raise FormatError(f"expected an 8-byte file label, the file has {size} bytes", path, 0)
    magic, version = _LABEL.unpack_from(data, 0)
    if magic not in (DATASET_MAGIC, VOCAB_MAGIC):
        hint = " (an old JSON vocabulary? convert it first)" if magic[:1] == b"{" else ""
        raise FormatError(
            f"expected magic b'NNDS' (dataset) or b'NNVC' (vocabulary), found {magic!r}{hint}",
            path,
            0,
        )
    if version != VERSION:
        raise FormatError(f"expected {magic.decode()} version {VERSION}, found {version}", path, 4)
    return magic


def _parse_vocab_file(data: Any, size: int, path: Any) -> dict[str | bytes, Any]:
    fields, end = kvrec.decode_fields(data, LABEL_SIZE, LABEL_SIZE, path)
    if end != size:
        raise FormatError(
            f"the vocabulary record ends at byte {end}, the file has {size} bytes", path, end
        )
    return kvrec.to_dict(fields)


def parse_nnvocab(
    data: bytes, path: str | os.PathLike[str] | None = None
) -> dict[str | bytes, Any]:
    """The vocabulary record of ``.nnvocab`` bytes (``path`` only names them in errors).

    Checks the label (``NNVC``, version 1), the record, and that it ends the data.
    """
    size = len(memoryview(data).cast("B"))
    if _check_label(data, size, path) != VOCAB_MAGIC:
        raise FormatError("expected a vocabulary (b'NNVC'), found a dataset (b'NNDS')", path, 0)
    return _parse_vocab_file(data, size, path)

"""The file label of neuralnet.cpp's files, and the ``.nnvocab`` vocabulary container.

Every file starts with ``[magic 4 bytes][u32 version]``: ``NNDS`` for a dataset, ``NNVC``
for a vocabulary, both version 1. A ``.nnvocab`` is the label and the vocabulary as a
version 2 kvrec at byte 8, ending the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from typing import Any

from ..errors import FormatError
from . import kvrec

DATASET_MAGIC, VOCAB_MAGIC, VERSION, LABEL_SIZE = b"NNDS", b"NNVC", 1, 8
_LABEL = struct.Struct("<4sI")


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
        raise FormatError(f"expected magic b'NNDS' (dataset) or b'NNVC' (vocabulary), found "
                          f"{magic!r}{hint}", path, 0)
    if version != VERSION:
        raise FormatError(f"expected {magic.decode()} version {VERSION}, found {version}",
                          path, 4)
    return magic


def _parse_vocab_file(data: Any, size: int, path: Any) -> dict[str, Any]:
    fields, end = kvrec.decode_fields(data, LABEL_SIZE, LABEL_SIZE, path)
    if end != size:
        raise FormatError(f"the vocabulary record ends at byte {end}, the file has {size} "
                          "bytes", path, end)
    return kvrec.to_dict(fields)


def parse_nnvocab(data: bytes, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The vocabulary record of ``.nnvocab`` bytes (``path`` only names them in errors).

    Checks the label (``NNVC``, version 1), the record, and that it ends the data.
    """
    size = len(memoryview(data).cast("B"))
    if _check_label(data, size, path) != VOCAB_MAGIC:
        raise FormatError("expected a vocabulary (b'NNVC'), found a dataset (b'NNDS')", path, 0)
    return _parse_vocab_file(data, size, path)

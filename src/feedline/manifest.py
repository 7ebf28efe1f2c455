"""A manifest opened as one dataset: the concat of its shards, in manifest order.

::

    from feedline.manifest import open_manifest

    with open_manifest("web-flr/manifest.json") as m:     # every shard checked
        seq = m.seq()                                      # fl.Seq.concat of the shards
        for batch in fl.Loader(seq.shuffle(1), 512):       # or fl.Order(seq), mixes...
            ...

Each ``.flr`` shard is ``fl.Dataset(record, fl.recfile.open(shard), name=shard_name)``,
so each shard's shuffle salt comes from its name in the manifest: moving the
directory does not change an order, and two shards of the same length do not
shuffle alike. ``.nndataset`` shards give their open handles (``m.handles``) and
language-model windows over every shard (``m.windows(seq_len)``; a window never
crosses from one shard into the next).

The file layer (reading, checking, writing manifests) is
:mod:`feedline.formats.manifest`.
"""

from __future__ import annotations

import os
from typing import Any

from .formats.manifest import ManifestInfo, Shard, read_manifest
from .order import Seq
from .records import Record
from .sources import Dataset
from .text import Windows, window_record

__all__ = ["Manifest", "open_manifest"]


class Manifest:
    """An open manifest: its shards' handles and, for ``.flr``, one typed dataset per
    shard; ``seq()`` concatenates them for ``fl.Order``, ``fl.Loader`` and mixes.

    ==================  ================================================================
    ``info``            the checked manifest (:class:`~feedline.formats.manifest.ManifestInfo`)
    ``format``          ``"flr"`` or ``"nndataset"``
    ``shards``          the manifest's entries, in order
    ``handles``         the open shard files (``RecFile`` or ``Nndataset``), in order
    ``record``          the ``.flr`` record (``None`` for ``.nndataset``)
    ``datasets``        ``.flr``: one ``fl.Dataset`` per shard, named by the shard
    ``seq()``           ``.flr``: ``fl.Seq.concat`` of the datasets
    ``windows(n)``      ``.nndataset``: ``fl.Seq.concat`` of each shard's ``fl.text.Windows``
    ``len(m)``          rows (``.flr``) or train documents (``.nndataset``)
    ``close()``         give up the handles (datasets and loaders keep their own shares)
    ==================  ================================================================
    """

    def __init__(self, info: ManifestInfo) -> None:
        self.info = info
        self.handles: tuple[Any, ...] = tuple(info.open_shards())
        self.datasets: tuple[Dataset, ...] = ()
        self._windows: list[Windows] = []
        if info.format == "flr":
            record = info.record
            assert record is not None  # an .flr manifest's record, checked when it was read
            try:
                self.datasets = tuple(
                    Dataset(record, h, name=s.name) for h, s in zip(self.handles, info.shards)
                )
            except BaseException:
                for h in self.handles:
                    h.close()
                raise

    # -- what it holds --------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.info.path

    @property
    def format(self) -> str:
        return self.info.format

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.info.shards

    @property
    def record(self) -> type[Record] | None:
        return self.info.record

    @property
    def tokens(self) -> int:
        """Train tokens over every ``.nndataset`` shard (0 for ``.flr``)."""
        return sum(s.tokens or 0 for s in self.shards)

    def __len__(self) -> int:
        return len(self.info)

    # -- as orders ------------------------------------------------------------------------
    def seq(self) -> Seq:
        """The shards' datasets one after another, in manifest order (``.flr``)."""
        if self.format != "flr":
            raise TypeError(
                f"{self.path}: seq() reads .flr shards; this manifest lists "
                f".{self.format} shards (use windows(seq_len))"
            )
        return Seq.concat([ds.to_seq() for ds in self.datasets])

    def windows(
        self,
        seq_len: int,
        *,
        stride: int | None = None,
        subset: str = "train",
        cross_docs: bool = True,
        position_ids: bool = False,
        pad_id: int = 0,
    ) -> Seq:
        """Language-model windows over every ``.nndataset`` shard, in manifest order: a
        concat of one ``fl.Dataset`` of ``fl.text.Windows`` per shard (named by the shard,
        so its shuffle salt comes from the name). Options are ``Windows``'. Windows do
        not cross shards: each shard's last window may be short (padded)."""
        if self.format != "nndataset":
            raise TypeError(
                f"{self.path}: windows() reads .nndataset shards; this manifest "
                f"lists .{self.format} shards (use seq())"
            )
        record = window_record(seq_len, position_ids)
        parts = []
        for handle, shard in zip(self.handles, self.shards):
            w = Windows(
                handle,
                seq_len,
                stride=stride,
                subset=subset,
                cross_docs=cross_docs,
                position_ids=position_ids,
                pad_id=pad_id,
            )
            self._windows.append(w)  # the datasets take their own shares; closed with us
            parts.append(Dataset(record, w, name=shard.name).to_seq())
        return Seq.concat(parts)

    # -- handles --------------------------------------------------------------------------
    def verify(self) -> None:
        """Read every shard to check its SHA-256 and its own checksums (one full pass)."""
        self.info.verify()

    def close(self) -> None:
        """Give up this manifest's handles. The datasets it made hold shares of their
        own, so orders and loaders built from ``seq()`` or ``windows()`` keep reading; a
        file closes when its last share is given up (``Dataset.close()``, or the
        dataset's garbage collection)."""
        for w in self._windows:
            w.close()
        self._windows = []
        self.datasets = ()
        for h in self.handles:
            h.close()

    def __enter__(self) -> Manifest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Manifest({self.path!r}, {self.format}, {len(self.shards)} shards, "
            f"{len(self):,} {'rows' if self.format == 'flr' else 'documents'})"
        )


def open_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Open the manifest ``path`` as one dataset, checking every field and every shard
    (it exists, has the listed size and length, and the manifest's record). A mismatch
    is a ``FormatError`` naming the manifest and the shard. Cost: one open per shard
    (its header; no data read); ``Manifest.verify()`` hashes the data."""
    return Manifest(read_manifest(path))

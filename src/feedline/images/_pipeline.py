"""From stored images to training batches: decode, crop, flip, resize, as a map.

``Augment`` is the map function (a frozen dataclass: options as data, picklable to
worker processes); ``decoded(ds, ...)`` maps a dataset of encoded images with it, in
threads of the process (the decoders release the GIL). Every random choice comes from
the example's generator (seed, pass, position), so a stream is identical for any
number of threads or workers, and resumes exactly.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..errors import FormatError, RecordError
from ..records import Record, record_from_schema
from ..sources import Dataset
from . import _augment
from ._decode import decode, kind_of, size_of

#: threads for decoding when ``decoded`` is not told (benchmarks/decoders.py)
DEFAULT_THREADS = 2


@dataclass(frozen=True)
class Augment:
    """Decode an example's ``field`` (bytes) and make it ``size x size`` uint8.

    ``crop``: ``"random"`` (a random-resized crop of ``scale`` of the area and aspect
    ``ratio``, then a flip with probability 1/2 when ``flip``), ``"center"`` (the
    central square of ``fraction`` of the shorter side: evaluation), or ``"resize"``
    (the whole image, squashed). ``layout``: ``"CHW"`` (torch) or ``"HWC"``. The
    example's ``width`` and ``height`` fields, when it has them, let a JPEG be decoded
    at the smallest DCT scale that covers the crop. ``on_error="skip"``: an image that
    does not decode becomes zeros with the output's ``valid`` field False (and a
    warning naming it), instead of a ``FormatError``.
    """

    size: int = 224
    crop: Literal["random", "center", "resize"] = "random"
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    fraction: float = 0.875
    layout: Literal["CHW", "HWC"] = "CHW"
    field: str = "image"
    on_error: Literal["raise", "skip"] = "raise"

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"Augment: size must be a positive int, got {self.size!r}")
        if self.crop not in ("random", "center", "resize"):
            raise ValueError(
                f"Augment: crop must be 'random', 'center' or 'resize', got {self.crop!r}"
            )
        if self.layout not in ("CHW", "HWC"):
            raise ValueError(f"Augment: layout must be 'CHW' or 'HWC', got {self.layout!r}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"Augment: on_error must be 'raise' or 'skip', got {self.on_error!r}")
        lo, hi = self.scale
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"Augment: scale must be 0 < lo <= hi <= 1, got {self.scale!r}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"Augment: ratio must be 0 < lo <= hi, got {self.ratio!r}")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"Augment: fraction must be in (0, 1], got {self.fraction!r}")

    def __call__(self, example: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        data = example[self.field]
        out = {k: v for k, v in example.items() if k not in (self.field, "width", "height")}
        try:
            image = self._image(data, example, rng)
            valid = True
        except FormatError as e:
            if self.on_error == "raise":
                raise
            warnings.warn(f"an image was skipped (zeros, valid=False): {e}", stacklevel=2)
            image = np.zeros((self.size, self.size, 3), dtype=np.uint8)
            valid = False
        out[self.field] = (
            np.ascontiguousarray(image.transpose(2, 0, 1)) if (self.layout == "CHW") else image
        )
        if self.on_error == "skip":
            out["valid"] = valid
        return out

    def _image(self, data: bytes, example: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
        s = self.size
        width, height = example.get("width"), example.get("height")
        if (width is None or height is None) and kind_of(data) == "jpeg":
            # the header's size (microseconds): the crop is drawn first, and the JPEG
            # decoded at the scale it needs, as when the sizes are stored
            width, height = size_of(data)
        if width is None or height is None:
            full = decode(data)
            width, height = full.shape[1], full.shape[0]
        else:
            width, height, full = int(width), int(height), None
        if self.crop == "random":
            box = _augment.random_resized_box(width, height, rng, self.scale, self.ratio)
        elif self.crop == "center":
            box = _augment.center_box(width, height, self.fraction)
        else:
            box = (0, 0, width, height)
        flip = self.crop == "random" and self.flip and bool(rng.random() < 0.5)
        if full is None:
            # the smallest DCT scale at which the box still has the output's pixels
            need_w = -(-width * s // max(1, box[2]))
            need_h = -(-height * s // max(1, box[3]))
            full = decode(data, min_width=min(width, need_w), min_height=min(height, need_h))
            if full.shape[1] != width or full.shape[0] != height:
                box = _augment.scaled_box(box, width, height, full)
        x, y, w, h = box
        crop = full[y : y + h, x : x + w]
        if flip:
            crop = crop[:, ::-1]
        return _augment.resize(crop, s, s)

    def record(self, encoded: type[Record]) -> type[Record]:
        """The record of this map's examples: ``encoded``'s fields, with ``field`` an
        array of ``size x size`` pixels and ``width``/``height`` gone (and ``valid`` with
        ``on_error="skip"``)."""
        schema = encoded.schema()
        if not any(f["name"] == self.field for f in schema["fields"]):
            raise RecordError(
                f"Augment: record {encoded.__name__} has no field `{self.field}` to decode "
                f"(it has {[f['name'] for f in schema['fields']]})"
            )
        shape = [3, self.size, self.size] if self.layout == "CHW" else [self.size, self.size, 3]
        fields = []
        for f in schema["fields"]:
            if f["name"] in ("width", "height"):
                continue
            if f["name"] == self.field:
                f = {
                    "name": self.field,
                    "dims": shape,
                    "shape": shape,
                    "dtype": "|u1",
                    "domain": None,
                    "doc": f"decoded pixels ({self.layout}, uint8)",
                }
            fields.append(f)
        if self.on_error == "skip":
            fields.append(
                {
                    "name": "valid",
                    "dims": [],
                    "shape": [],
                    "dtype": "|b1",
                    "domain": None,
                    "doc": "False where the image did not decode",
                }
            )
        schema = {**schema, "name": f"{schema['name']}Pixels", "fields": fields}
        return record_from_schema(schema, f"<{encoded.__name__} decoded>")


def decoded(
    ds: Any,
    size: int = 224,
    *,
    train: bool = True,
    seed: int = 0,
    threads: int = DEFAULT_THREADS,
    **options: Any,
) -> Any:
    """``ds`` (a ``fl.Dataset`` of encoded images) mapped by ``Augment``: a random-resized
    crop and flip when ``train``, the center crop otherwise; decoded in ``threads``
    threads. ``options`` are ``Augment``'s (``scale``, ``ratio``, ``layout``, ...). A
    typed source (``fl.sources.parquet(...)`` with a binary column, ``recfile.open``)
    is taken as the ``fl.Dataset`` of its record."""
    if not isinstance(ds, Dataset):
        record = getattr(ds, "record", None)
        if record is None:
            raise TypeError(
                f"fl.images.decoded reads a fl.Dataset or a typed source (one with a "
                f".record), not a {type(ds).__name__}"
            )
        ds = Dataset(record, ds)
    options.setdefault("crop", "random" if train else "center")
    augment = Augment(size=size, **options)
    return ds.map(augment, seed=seed, record=augment.record(ds.record), threads=threads)


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Normalize:
    """A batch transform: ``field`` (uint8 ``B x 3 x H x W``, or ``B x H x W x 3`` with
    ``layout="HWC"``) as float32 ``(x / 255 - mean) / std``, where the batch is: on the
    device for torch tensors there (``Loader(..., device="cuda", batch_transform=
    fl.images.Normalize())``), with numpy for numpy arrays. The other fields and the
    metadata are the batch's own."""

    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    field: str = "image"
    layout: Literal["CHW", "HWC"] = "CHW"

    def __post_init__(self) -> None:
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(
                f"Normalize: mean and std are three numbers each, std > 0; got "
                f"{self.mean!r}, {self.std!r}"
            )
        if self.layout not in ("CHW", "HWC"):
            raise ValueError(f"Normalize: layout must be 'CHW' or 'HWC', got {self.layout!r}")

    def __call__(self, batch: Any) -> Any:
        x = batch[self.field]
        shape = (1, 3, 1, 1) if self.layout == "CHW" else (1, 1, 1, 3)
        scale = np.array([1 / (255 * s) for s in self.std], dtype=np.float32).reshape(shape)
        shift = np.array([m / s for m, s in zip(self.mean, self.std)], np.float32).reshape(shape)
        if hasattr(x, "device") and hasattr(x, "to"):  # a torch tensor: where it is
            import torch

            out = x.to(torch.float32) * torch.from_numpy(scale).to(x.device)
            out -= torch.from_numpy(shift).to(x.device)
        else:
            out = np.asarray(x, dtype=np.float32) * scale - shift
        fields = {**batch.fields, self.field: out}
        # the batch's own class (the loader's Batch: this layer does not import it)
        return type(batch).with_meta(
            fields, batch.meta.size, len(batch), 0, None, None, meta=batch.meta
        )

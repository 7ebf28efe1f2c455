"""fl.images (issue 17): decoding JPEG, PNG and WebP, crops drawn from each example's
generator, decoding in threads, the same stream for any number of threads or workers,
corrupt images named (or skipped, counted, with a warning)."""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import pytest

import feedline as fl

Image = pytest.importorskip("PIL.Image")
sklearn_datasets = pytest.importorskip("sklearn.datasets")

PHOTOS = sklearn_datasets.load_sample_images().images  # china.jpg and flower.jpg, 427x640


def encode(a: np.ndarray, fmt: str = "JPEG", **kw) -> bytes:
    out = io.BytesIO()
    Image.fromarray(a).save(out, fmt, **kw)
    return out.getvalue()


class Encoded(fl.Record, dims={"C": 2}):
    image = fl.field((), "bytes")
    width = fl.field((), "int32")
    height = fl.field((), "int32")
    label = fl.field((), "int64", domain=fl.Index("C"))


def photo(i: int, w: int = 500, h: int = 375) -> np.ndarray:
    src = PHOTOS[i % 2]
    y, x = (i * 7) % (src.shape[0] - h), (i * 11) % (src.shape[1] - w)
    return src[y : y + h, x : x + w]


def items(n: int = 24, fmt: str = "JPEG") -> list[dict]:
    out = []
    for i in range(n):
        a = photo(i)
        kw = {"quality": 90} if fmt in ("JPEG", "WEBP") else {}
        out.append({"image": encode(a, fmt, **kw), "width": 500, "height": 375, "label": i % 2})
    return out


def test_decoding_each_format_gives_rgb_pixels_close_to_the_original():
    a = photo(3)
    for fmt, tolerance in (("JPEG", 12), ("PNG", 0), ("WEBP", 16)):
        data = encode(a, fmt, **({"quality": 95} if fmt != "PNG" else {}))
        assert fl.images.kind_of(data) == fmt.lower().replace("webp", "webp")
        got = fl.images.decode(data)
        assert got.shape == (375, 500, 3) and got.dtype == np.uint8
        assert np.abs(got.astype(int) - a).mean() <= tolerance, fmt
        assert fl.images.size_of(data) == (500, 375)


def test_a_jpeg_decodes_at_a_reduced_scale_when_fewer_pixels_are_needed():
    data = encode(photo(1), quality=90)
    half = fl.images.decode(data, min_width=250, min_height=187)
    assert half.shape == (188, 250, 3)
    full = fl.images.decode(data)
    small = fl.images.resize(full, 250, 188)
    assert np.abs(half.astype(int) - small).mean() < 6


def test_a_16_bit_png_decodes_to_its_high_bytes_not_saturated():
    """Pillow's convert of a 16-bit gray ("I;16") to RGB clips at 255: a ramp over 0 -
    65535 came out 99.6% white. The 8-bit image is each value's high byte."""
    ramp = (np.arange(64 * 64).reshape(64, 64) * 16).astype(np.uint16)
    data = encode(ramp, "PNG")
    assert Image.open(io.BytesIO(data)).mode == "I;16"
    got = fl.images.decode(data)
    want = (ramp // 256).astype(np.uint8)
    assert got.shape == (64, 64, 3) and got.dtype == np.uint8
    assert all(np.array_equal(got[..., c], want) for c in range(3))


def test_32_bit_and_float_gray_images_decode_to_8_bits_by_their_scale():
    """Modes no 8-bit convert scales: ``I`` (what older Pillows opened a 16-bit PNG as)
    holds 16-bit samples, clipped to 0 - 65535 then taken to their high byte;
    ``F`` is on Pillow's 0 - 255 scale, rounded and clipped."""
    from feedline.images._decode import pixels_rgb

    wide = np.array([[-5, 0, 255, 256], [40_000, 65_535, 65_536, 1 << 30]], dtype=np.int32)
    floats = np.array([[-3.0, 0.4, 0.6, 127.5], [200.2, 254.6, 255.0, 1e9]], dtype=np.float32)
    for a, want in (
        (wide, np.clip(wide, 0, 65_535) // 256),
        (wide.astype(np.uint16), wide.astype(np.uint16) // 256),
        (floats, np.clip(np.round(floats), 0, 255)),
    ):
        im = Image.fromarray(a)
        got = pixels_rgb(im)
        assert got.shape == (2, 4, 3) and got.dtype == np.uint8, im.mode
        assert all(np.array_equal(got[..., c], want.astype(np.uint8)) for c in range(3)), im.mode
    rgb = photo(0)[:8, :8]
    assert np.array_equal(pixels_rgb(Image.fromarray(rgb)), rgb)  # 8-bit images as they are


@pytest.mark.parametrize(
    "data", [b"", b"not an image", b"\xff\xd8\xff\xe0" + b"\x00" * 40, encode(photo(0))[:200]]
)
def test_bytes_that_do_not_decode_are_a_format_error(data):
    with pytest.raises(fl.FormatError, match="expected a JPEG, PNG or WebP image"):
        fl.images.decode(data, where="row 7")


def test_random_resized_boxes_stay_inside_and_follow_their_draws():
    rng = np.random.default_rng(0)
    areas = []
    for _ in range(500):
        x, y, w, h = fl.images.random_resized_box(500, 375, rng)
        assert x >= 0 and y >= 0 and x + w <= 500 and y + h <= 375 and w > 0 and h > 0
        areas.append(w * h / (500 * 375))
    assert 0.08 <= min(areas) < 0.2 and max(areas) > 0.9
    again = [fl.images.random_resized_box(500, 375, np.random.default_rng(5)) for _ in range(3)]
    assert again[0] == again[1] == again[2]
    assert fl.images.center_box(500, 375) == (86, 23, 328, 328)


def test_decoded_examples_have_the_record_s_shape_and_keep_the_label():
    ds = fl.images.decoded(fl.Dataset(Encoded, items(8)), 64, seed=1)
    assert list(ds.record.fields) == ["image", "label"]
    assert ds.record.fields["image"].shape == (3, 64, 64)
    assert ds.record.fields["label"].domain == fl.Index("C")
    batch = next(iter(fl.Loader(ds, 4, workers=0)))
    assert batch.image.shape == (4, 3, 64, 64) and batch.image.dtype == np.uint8
    assert batch.label.tolist() == [0, 1, 0, 1]
    hwc = fl.images.decoded(fl.Dataset(Encoded, items(2)), 32, train=False, layout="HWC")
    assert next(iter(fl.Loader(hwc, 2, workers=0))).image.shape == (2, 32, 32, 3)


def test_an_evaluation_crop_is_the_resized_center():
    data = items(1)
    ds = fl.images.decoded(fl.Dataset(Encoded, data), 64, train=False)
    got = ds[0]["image"].transpose(1, 2, 0)
    full = fl.images.decode(data[0]["image"])
    x, y, w, h = fl.images.center_box(500, 375)
    want = fl.images.resize(full[y : y + h, x : x + w], 64, 64)
    error = np.abs(got.astype(int) - want).mean()
    # decoded at a reduced DCT scale: close to the full decode's, and closer than the
    # same crop shifted by 24 pixels
    shifted = fl.images.resize(full[y : y + h, x + 24 : x + 24 + w], 64, 64)
    assert error < 10 and error < np.abs(got.astype(int) - shifted).mean() / 2


def stream(ds, **options) -> list:
    return [
        (b.label.tolist(), b.meta.record_indices.tolist(), b.image.tobytes())
        for b in fl.Loader(ds, 5, seed=3, **options)
    ]


def test_the_stream_is_the_same_for_any_number_of_threads_and_workers():
    base = fl.Dataset(Encoded, items(20))
    one = stream(fl.images.decoded(base, 48, seed=9, threads=1), workers=0)
    assert stream(fl.images.decoded(base, 48, seed=9, threads=2), workers=0) == one
    assert stream(fl.images.decoded(base, 48, seed=9, threads=3), workers=0) == one
    assert stream(fl.images.decoded(base, 48, seed=9, threads=2), workers=2) == one
    other = stream(fl.images.decoded(base, 48, seed=10, threads=2), workers=0)
    assert other != one  # another seed, other crops
    assert Counter(r for _, recs, _ in one for r in recs) == Counter(range(20))


def test_each_pass_draws_other_crops_and_resume_redraws_the_same():
    ds = fl.images.decoded(fl.Dataset(Encoded, items(12)), 32, seed=2)
    loader = fl.Loader(ds, 4, seed=1, workers=0)
    first = [b.image.tobytes() for b in loader]
    second = [b.image.tobytes() for b in loader]
    assert first != second
    again = fl.Loader(ds, 4, seed=1, workers=0)
    it = iter(again)
    next(it)
    state = again.state_dict()
    resumed = fl.Loader(ds, 4, seed=1, workers=0)
    resumed.load_state_dict(state)
    assert [b.image.tobytes() for b in resumed] == first[1:]


def test_a_corrupt_image_is_named_by_its_item():
    data = items(6)
    data[4] = {**data[4], "image": data[4]["image"][:300]}
    ds = fl.images.decoded(fl.Dataset(Encoded, data), 32)
    with pytest.raises(fl.FormatError, match=r"Encoded item 4: .*expected a JPEG"):
        list(fl.Loader(ds, 3, workers=0))


def test_skipping_corrupt_images_counts_them_and_warns():
    data = items(6)
    data[1] = {**data[1], "image": b"junk"}
    data[5] = {**data[5], "image": b""}
    ds = fl.images.decoded(fl.Dataset(Encoded, data), 32, on_error="skip", threads=1)
    assert ds.record.fields["valid"].dtype == np.bool_
    with pytest.warns(UserWarning, match="an image was skipped"):
        batches = list(fl.Loader(ds, 3, workers=0))
    valid = {r: v for b in batches for r, v in zip(b.meta.record_indices.tolist(), b.valid)}
    assert [r for r, v in sorted(valid.items()) if not v] == [1, 5]
    bad = [
        b.image[list(b.meta.record_indices).index(1)] for b in batches if 1 in b.meta.record_indices
    ]
    assert not bad[0].any()


def test_bad_augment_options_name_themselves():
    for kwargs, match in (
        ({"size": 0}, "size"),
        ({"crop": "corner"}, "crop"),
        ({"layout": "NCHW"}, "layout"),
        ({"scale": (0.5, 0.2)}, "scale"),
        ({"on_error": "ignore"}, "on_error"),
    ):
        with pytest.raises(ValueError, match=match):
            fl.images.Augment(**kwargs)
    with pytest.raises(fl.RecordError, match="no field `photo`"):
        fl.images.Augment(field="photo").record(Encoded)


def image_folder(root, per_class: int = 5) -> list[tuple[str, int]]:
    """An ImageFolder layout of real photos: class ``china`` and ``flower``."""
    files = []
    for label, name in enumerate(["china", "flower"]):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            fmt, ext = ("PNG", "png") if i == 0 else ("JPEG", "jpg")
            a = PHOTOS[label][i * 9 : i * 9 + 300, i * 13 : i * 13 + 400]
            path = root / name / f"{i:03d}.{ext}"
            path.write_bytes(encode(a, fmt, **({"quality": 90} if fmt == "JPEG" else {})))
            files.append((str(path), label))
    (root / "flower" / "notes.txt").write_text("not an image")  # not an image suffix
    return files


def test_an_image_folder_converts_to_a_flr_of_the_bytes_as_they_are(tmp_path):
    files = image_folder(tmp_path / "photos")
    out = tmp_path / "photos.flr"
    summary = fl.images.from_folder(tmp_path / "photos", out, progress=False)
    assert summary.images == 10 and summary.classes == ("china", "flower")
    with fl.recfile.open(out) as f:
        assert fl.images.class_names(f.record) == ["china", "flower"]
        assert f.record.fields["label"].domain == fl.Index("C") and f.record.dims["C"] == 2
        for i, (path, label) in enumerate(files):
            row = fl.Dataset(f.record, f)[i]
            with open(path, "rb") as original:
                assert row["image"] == original.read()  # never re-encoded
            assert (row["width"], row["height"], row["label"]) == (400, 300, label)
        ds = fl.images.decoded(fl.Dataset(f.record, f), 64, seed=1)
        seen = Counter()
        for batch in fl.Loader(ds, 4, seed=2, workers=0):
            assert batch.image.shape[1:] == (3, 64, 64)
            seen.update(batch.meta.record_indices.tolist())
        assert seen == Counter(range(10))


def test_a_file_that_is_not_an_image_is_named_and_nothing_is_written(tmp_path):
    image_folder(tmp_path / "photos")
    (tmp_path / "photos" / "china" / "zzz.jpg").write_bytes(b"GIF89a not a jpeg")
    out = tmp_path / "photos.flr"
    with pytest.raises(fl.FormatError, match=r"zzz\.jpg: byte 0: expected a JPEG"):
        fl.images.from_folder(tmp_path / "photos", out, progress=False)
    assert not out.exists() and not list(tmp_path.glob(".photos.flr*"))
    with pytest.raises(fl.FormatError, match="class subfolders"):
        fl.images.from_folder(tmp_path / "photos" / "china", out, progress=False)


def test_feedline_convert_takes_an_image_folder(tmp_path, capsys):
    from feedline.cli import main

    image_folder(tmp_path / "photos", per_class=3)
    out = tmp_path / "photos.flr"
    assert main(["convert", str(tmp_path / "photos"), str(out)]) == 0
    assert "6 images of 2 classes (china, flower)" in capsys.readouterr().out
    with fl.recfile.open(out) as f:
        assert len(f) == 6 and fl.images.class_names(f.record) == ["china", "flower"]
    assert main(["inspect", str(out)]) == 0
    assert "image" in capsys.readouterr().out


def webdataset_shard(path, start: int, n: int, captions: bool = True) -> list[bytes]:
    import tarfile

    images = []
    with tarfile.open(path, "w") as tar:
        for i in range(start, start + n):
            data = encode(photo(i, 320, 240), quality=90)
            images.append(data)
            members = {"jpg": data, "cls": str(i % 2).encode()}
            if captions:
                members["txt"] = f"photo {i} — {('china', 'flower')[i % 2]}".encode()
            for ext, blob in members.items():
                info = tarfile.TarInfo(f"{i:06d}.{ext}")
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    return images


def test_webdataset_shards_convert_with_classes_and_captions(tmp_path):
    first = webdataset_shard(tmp_path / "a.tar", 0, 5)
    second = webdataset_shard(tmp_path / "b.tar", 5, 4)
    out = tmp_path / "wds.flr"
    summary = fl.images.from_webdataset([tmp_path / "a.tar", tmp_path / "b.tar"], out, classes=2)
    assert summary.images == 9
    with fl.recfile.open(out) as f:
        ds = fl.Dataset(f.record, f)
        assert f.record.fields["caption"].kind == "str"
        assert f.record.fields["label"].domain == fl.Index("C")
        for i, data in enumerate(first + second):
            row = ds[i]
            assert row["image"] == data and row["label"] == i % 2
            assert (row["width"], row["height"]) == (320, 240)
            assert row["caption"] == f"photo {i} — {('china', 'flower')[i % 2]}"
        batch = next(iter(fl.Loader(fl.images.decoded(ds, 32), 9, workers=0)))
        assert batch.image.shape == (9, 3, 32, 32) and len(batch.caption) == 9


def test_a_webdataset_sample_without_an_image_is_named(tmp_path):
    import tarfile

    webdataset_shard(tmp_path / "a.tar", 0, 2, captions=False)
    with tarfile.open(tmp_path / "a.tar", "a") as tar:
        info = tarfile.TarInfo("000009.cls")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"1"))
    out = tmp_path / "wds.flr"
    with pytest.raises(fl.FormatError, match=r"a\.tar: 000009\.cls: .*image member .* '000009'"):
        fl.images.from_webdataset(tmp_path / "a.tar", out)
    assert not out.exists()
    (tmp_path / "bad.tar").write_bytes(b"not a tar at all" * 40)
    with pytest.raises(fl.FormatError, match="tar shard"):
        fl.images.from_webdataset(tmp_path / "bad.tar", out)


def cut_shards(tmp_path) -> dict[str, tuple[bytes, str]]:
    """A shard of 6 samples (.jpg, .cls) cut or broken where tarfile's stream reading
    takes the damage for the archive's end: each the bytes and the member before it."""
    import tarfile

    webdataset_shard(tmp_path / "a.tar", 0, 6, captions=False)
    raw = (tmp_path / "a.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tar:
        members = tar.getmembers()
    at = [m.offset for m in members]
    end = members[-1].offset_data + -(-members[-1].size // 512) * 512
    return {
        "at a header": (raw[: at[6]], "000002.cls"),  # 3 of 6 samples were kept
        "inside a header": (raw[: at[6] + 100], "000002.cls"),
        "before the last .cls": (raw[: at[11]], "000005.jpg"),  # its label was -1
        "in the end blocks": (raw[: end + 512], "000005.cls"),  # one of the two
        "a bad header": (raw[: at[8]] + b"\x17" * 512 + raw[at[8] + 512 :], "000003.cls"),
    }


@pytest.mark.parametrize("cut", ["at a header", "inside a header", "before the last .cls"])
def test_a_webdataset_shard_cut_short_is_a_format_error_naming_it(tmp_path, cut):
    data, after = cut_shards(tmp_path)[cut]
    (tmp_path / "cut.tar").write_bytes(data)
    out = tmp_path / "wds.flr"
    with pytest.raises(fl.FormatError, match=rf"cut\.tar: .*after member {after}"):
        fl.images.from_webdataset(tmp_path / "cut.tar", out)
    assert not out.exists()


@pytest.mark.parametrize("cut", ["in the end blocks", "a bad header"])
def test_a_webdataset_shard_without_its_end_or_with_a_bad_header_is_a_format_error(tmp_path, cut):
    data, after = cut_shards(tmp_path)[cut]
    (tmp_path / "bad.tar").write_bytes(data)
    what = "the data's end" if cut == "in the end blocks" else "an invalid tar header"
    with pytest.raises(fl.FormatError, match=rf"bad\.tar: .*after member {after}, found {what}"):
        fl.images.from_webdataset(tmp_path / "bad.tar", tmp_path / "wds.flr")


def test_a_compressed_shard_converts_and_a_corrupt_one_is_a_format_error(tmp_path):
    import bz2
    import gzip

    webdataset_shard(tmp_path / "a.tar", 0, 6, captions=False)
    raw = (tmp_path / "a.tar").read_bytes()
    for name, packed in (("a.tar.gz", gzip.compress(raw)), ("a.tar.bz2", bz2.compress(raw))):
        (tmp_path / name).write_bytes(packed)
        assert fl.images.from_webdataset(tmp_path / name, tmp_path / "ok.flr").images == 6
    packed = bytearray(gzip.compress(raw))
    for at in (len(packed) // 2, len(packed) - 4):  # the data (3 samples read), the length
        bad = bytearray(packed)
        bad[at] ^= 0xFF
        (tmp_path / "bad.tar.gz").write_bytes(bytes(bad))
        with pytest.raises(fl.FormatError, match=r"bad\.tar\.gz: "):
            fl.images.from_webdataset(tmp_path / "bad.tar.gz", tmp_path / "wds.flr")
    (tmp_path / "cut.tar.gz").write_bytes(bytes(packed[: len(packed) // 2]))
    with pytest.raises(fl.FormatError, match=r"cut\.tar\.gz: "):
        fl.images.from_webdataset(tmp_path / "cut.tar.gz", tmp_path / "wds.flr")


def test_a_webdataset_sample_without_its_class_or_out_of_range_is_named(tmp_path):
    import tarfile

    webdataset_shard(tmp_path / "a.tar", 0, 2, captions=False)
    with tarfile.open(tmp_path / "a.tar", "a") as tar:
        blob = encode(photo(2, 64, 48))
        info = tarfile.TarInfo("000002.jpg")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(fl.FormatError, match=r"a\.tar: 000002\.jpg: .*000002\.cls"):
        fl.images.from_webdataset(tmp_path / "a.tar", tmp_path / "wds.flr", classes=2)
    webdataset_shard(tmp_path / "b.tar", 0, 3, captions=False)
    with pytest.raises(fl.DomainError, match=r"b\.tar: 000001\.jpg: 000001\.cls is 1, .* 1 class"):
        fl.images.from_webdataset(tmp_path / "b.tar", tmp_path / "wds.flr", classes=1)


def test_feedline_convert_takes_a_webdataset_shard(tmp_path, capsys):
    from feedline.cli import main

    webdataset_shard(tmp_path / "a.tar", 0, 3)
    assert main(["convert", str(tmp_path / "a.tar"), str(tmp_path / "a.flr")]) == 0
    assert "3 images" in capsys.readouterr().out
    with fl.recfile.open(tmp_path / "a.flr") as f:
        assert len(f) == 3 and "caption" in f.record.fields


def test_normalize_makes_float_pixels_where_the_batch_is():
    ds = fl.images.decoded(fl.Dataset(Encoded, items(4)), 16, train=False)
    raw = next(iter(fl.Loader(ds, 4, workers=0)))
    normal = next(iter(fl.Loader(ds, 4, workers=0, batch_transform=fl.images.Normalize())))
    mean = np.array(fl.images.IMAGENET_MEAN).reshape(1, 3, 1, 1)
    std = np.array(fl.images.IMAGENET_STD).reshape(1, 3, 1, 1)
    assert normal.image.dtype == np.float32
    np.testing.assert_allclose(normal.image, (raw.image / 255 - mean) / std, atol=1e-5)
    assert normal.label.tolist() == raw.label.tolist() and normal.meta.size == 4
    torch = pytest.importorskip("torch")
    tensors = fl.Loader(ds, 4, workers=0, output="torch", batch_transform=fl.images.Normalize())
    t = next(iter(tensors))
    assert isinstance(t.image, torch.Tensor) and t.image.dtype == torch.float32
    np.testing.assert_allclose(t.image.numpy(), normal.image, atol=1e-5)
    with pytest.raises(ValueError, match="std > 0"):
        fl.images.Normalize(std=(0.1, 0.0, 0.2))


def test_an_hf_image_dataset_converts_with_its_encoded_bytes(tmp_path):
    datasets = pytest.importorskip("datasets")
    data = items(4, fmt="PNG")
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    hf = datasets.Dataset.from_dict(
        {
            "image": [{"bytes": d["image"], "path": None} for d in data],
            "label": [d["label"] for d in data],
        },
        features=features,
    )
    hf.save_to_disk(str(tmp_path / "hf"))
    from feedline.formats import convert

    convert.convert(tmp_path / "hf", tmp_path / "hf.flr")
    with fl.recfile.open(tmp_path / "hf.flr") as f:
        assert f.record.fields["image"].kind == "bytes"
        ds = fl.Dataset(f.record, f)
        assert ds[2]["image"] == data[2]["image"]  # the PNG as it was stored
        batch = next(iter(fl.Loader(fl.images.decoded(ds, 32), 4, workers=0)))
        assert batch.image.shape == (4, 3, 32, 32) and batch.label.tolist() == [0, 1, 0, 1]
        # each image's size from its header, as an image folder's conversion stores it
        assert [ds[i]["width"] for i in range(4)] == [500] * 4
        assert [ds[i]["height"] for i in range(4)] == [375] * 4
    # the hub's Parquet of the same dataset carries the same features: the same fields
    hf.to_parquet(str(tmp_path / "hf.parquet"))
    convert.convert(tmp_path / "hf.parquet", tmp_path / "pq.flr")
    with fl.recfile.open(tmp_path / "pq.flr") as f:
        assert list(f.record.fields) == ["image", "label", "width", "height"]
        assert f.columns["width"].tolist() == [500] * 4
        assert f.columns["image"].blobs()[3] == data[3]["image"]


def test_an_hf_image_that_is_not_an_image_is_named_by_its_row(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"image": datasets.Image()})
    images = [{"bytes": encode(photo(0)), "path": None}, {"bytes": b"not a jpeg", "path": None}]
    hf = datasets.Dataset.from_dict({"image": images}, features=features)
    hf.save_to_disk(str(tmp_path / "hf"))
    from feedline.formats import convert

    with pytest.raises(fl.FormatError, match=r"column 'image' row 1\b"):
        convert.convert(tmp_path / "hf", tmp_path / "bad.flr")
    assert not (tmp_path / "bad.flr").exists()


class Photo(fl.Record):
    image = fl.field((), "bytes")
    label = fl.field((), "int64")


def test_a_parquet_file_of_images_is_a_live_source_of_decoded_batches(tmp_path):
    """Image bytes in a Parquet file (a binary column, or HF's Image storage, the
    struct<bytes, path> of every HF hub image dataset's Parquet) feed fl.images.decoded
    straight from the file, read by row group: the batches are those of the same images
    in memory."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    data = items(12)
    images = pa.array([d["image"] for d in data], pa.binary())
    labels = pa.array([d["label"] for d in data], pa.int64())
    hf_images = pa.StructArray.from_arrays(
        [images, pa.array([f"{i}.jpg" for i in range(12)])], names=["bytes", "path"]
    )
    pq.write_table(
        pa.table({"image": images, "label": labels}), tmp_path / "bin.parquet", row_group_size=5
    )
    pq.write_table(
        pa.table({"image": hf_images, "label": labels}), tmp_path / "hf.parquet", row_group_size=5
    )
    in_memory = fl.Dataset(Photo, [{"image": d["image"], "label": d["label"]} for d in data])
    want = stream(fl.images.decoded(in_memory, 48, seed=4), workers=0)
    for name in ("bin.parquet", "hf.parquet"):
        src = fl.sources.parquet(tmp_path / name)
        assert src.record.fields["image"].kind == "bytes"
        assert src[3]["image"] == data[3]["image"]  # the JPEG as stored
        assert stream(fl.images.decoded(src, 48, seed=4), workers=0) == want
        assert stream(fl.images.decoded(src, 48, seed=4), workers=2) == want


def test_an_hf_image_stored_by_its_path_only_is_named_by_its_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    data = items(3)
    images = pa.array([data[0]["image"], None, data[2]["image"]], pa.binary())
    hf_images = pa.StructArray.from_arrays(
        [images, pa.array(["0.jpg", "1.jpg", "2.jpg"])], names=["bytes", "path"]
    )
    pq.write_table(pa.table({"image": hf_images}), tmp_path / "paths.parquet")
    src = fl.sources.parquet(tmp_path / "paths.parquet")
    with pytest.raises(fl.FormatError, match=r"column 'image' row 1 holds no bytes"):
        src[1]


def test_a_jpeg_without_stored_sizes_is_cropped_and_decoded_as_with_them():
    """Without width/height fields (an HF or Parquet image column) a JPEG's size comes
    from its header: the crop is drawn first and the JPEG decoded at the scale it needs,
    so the batches are those of the same images with their sizes stored."""
    data = items(10)
    with_sizes = fl.Dataset(Encoded, data)
    without = fl.Dataset(Photo, [{"image": d["image"], "label": d["label"]} for d in data])
    for train in (True, False):
        want = stream(fl.images.decoded(with_sizes, 40, train=train, seed=6), workers=0)
        assert stream(fl.images.decoded(without, 40, train=train, seed=6), workers=0) == want


def test_a_map_s_format_error_names_where_the_source_s_row_lies(tmp_path):
    """A map's ``FormatError`` (bytes that do not decode) names the item and, for a
    source that says (``locate``), its file, row group and row, as a ShapeError does."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from feedline.sources._items import apply_maps, map_entry

    images = [d["image"] for d in items(12)]
    images[7] = images[7][:300]
    pq.write_table(
        pa.table({"image": pa.array(images, pa.binary())}),
        tmp_path / "bad.parquet",
        row_group_size=5,
    )
    src = fl.sources.parquet(tmp_path / "bad.parquet")
    augment = fl.images.Augment(32)
    record = augment.record(src.record)
    maps = (map_entry(augment, 0, record, 1),)
    idx = np.array([6, 7, 8])
    with pytest.raises(
        fl.FormatError,
        match=r"ParquetRow item 7: <image>: .*; the item is row 2 of row group 1 of .*bad\.parquet",
    ):
        apply_maps(src.record, record, maps, src.getitems(idx), idx, None, 0, False, source=src)

"""Files at URLs: a real S3 endpoint on loopback (moto's server), faults injected."""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import feedline as fl

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from .s3_endpoint import S3Endpoint, double_y

BLOCK = 16 << 10


class Row(fl.Record, dims={"D": 12}):
    """Features and a label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    endpoint = S3Endpoint()
    fs = endpoint.bucket("data")
    folder = tmp_path_factory.mktemp("s3")
    rng = np.random.default_rng(0)
    cols = {
        "x": rng.standard_normal((3000, 12), dtype=np.float32),
        "y": np.arange(3000, dtype=np.int64),
    }
    fl.recfile.write(folder / "rows.flr", Row, cols)
    fl.ndf.save(folder / "rows.ndf", cols["x"].astype(np.float64), cols["y"][:, None] * 1.0)
    docs = [rng.integers(0, 900, rng.integers(0, 300)).tolist() for _ in range(60)]
    masks = [rng.integers(0, 2, len(d)).tolist() for d in docs]
    fl.nndataset.write(
        folder / "text.nndataset",
        fl.nndataset.Build(
            {"size": 900},
            "c.txt",
            "",
            60,
            "assistant",
            train_docs=docs[:50],
            train_masks=masks[:50],
            test_docs=docs[50:],
            test_masks=masks[50:],
            created=1,
        ),
    )
    for name in ("rows.flr", "rows.ndf", "text.nndataset"):
        fs.put(str(folder / name), f"data/{name}")
    endpoint.local = folder
    yield endpoint
    endpoint.close()


def remote(s3, name: str, proxied: bool = False, **options) -> fl.remote.RemoteFile:
    options.setdefault("block_size", BLOCK)
    return fl.remote.open(f"s3://data/{name}", storage_options=s3.options(proxied), **options)


def batches(source, **options) -> list:
    return [{k: v.copy() for k, v in b.fields.items()} for b in fl.Loader(source, 64, **options)]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        set(x) == set(y) and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b)
    )


def test_a_flr_on_s3_gives_the_batches_of_the_local_file(s3):
    with (
        fl.recfile.open(remote(s3, "rows.flr")) as f,
        fl.recfile.open(s3.local / "rows.flr") as local,
    ):
        assert f.record.same_schema(local.record)
        assert same(batches(f, seed=3), batches(local, seed=3))
        f.verify()
        assert np.array_equal(f[17]["x"], local[17]["x"])


def test_a_mix_of_a_flr_on_s3_and_a_local_one_gives_the_local_mixs_batches(s3):
    # The plain path over a mix: the remote file's columns are fetched by ranges (never
    # gathered ahead in chunks), the local file's mapped; the batches are those of the
    # same mix of two local files.
    with (
        fl.recfile.open(remote(s3, "rows.flr")) as f,
        fl.recfile.open(s3.local / "rows.flr") as local,
        fl.recfile.open(s3.local / "rows.flr") as twin,
    ):

        def mix(a, b):
            return fl.Seq.mix([fl.Seq.source(a).shuffle(1), fl.Seq.source(b).shuffle(2)])

        loader = fl.Loader(mix(f, local), 64, seed=3)
        assert type(loader._plan).__name__ == "PlainPlan"
        assert same(batches(mix(f, local), seed=3), batches(mix(twin, local), seed=3))
        assert same(batches(mix(f, local), seed=3, threads=2), batches(mix(twin, local), seed=3))


def test_an_ndf_and_an_nndataset_on_s3_read_as_the_local_files(s3):
    with fl.ndf.open(remote(s3, "rows.ndf")) as f, fl.ndf.open(s3.local / "rows.ndf") as g:
        idx = np.array([5, 2999, 0, 77])
        assert all(np.array_equal(p, q) for p, q in zip(f.rows(idx), g.rows(idx)))
    with (
        fl.nndataset.open(remote(s3, "text.nndataset")) as ds,
        fl.nndataset.open(s3.local / "text.nndataset") as local,
    ):
        assert ds.info.num_docs == 50 and ds.info.test_docs == 10
        assert np.array_equal(ds.text_doc("test", 3).tokens, local.text_doc("test", 3).tokens)
        for subset in ("train", "test"):
            w, v = fl.text.Windows(ds, 32, subset=subset), fl.text.Windows(local, 32, subset=subset)
            assert same(batches(w, seed=1), batches(v, seed=1))
            w.close()
            v.close()


def test_a_plain_url_opens_with_the_default_options(s3, monkeypatch):
    # s3fs takes its endpoint and credentials from the environment here
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with fl.recfile.open("s3://data/rows.flr") as f:
        assert len(f) == 3000
        assert f.getitems(np.array([4]))["y"].tolist() == [4]


def test_injected_failures_are_retried(s3):
    s3.proxy.plan = ["500", "drop", "500", "drop"]
    with (
        fl.recfile.open(remote(s3, "rows.flr", proxied=True, backoff=0.01)) as f,
        fl.recfile.open(s3.local / "rows.flr") as local,
    ):
        assert same(batches(f, seed=5), batches(local, seed=5))
    assert s3.proxy.plan == []
    assert sorted(s3.proxy.injected[-4:]) == ["500", "500", "drop", "drop"]


def test_failures_past_the_retries_are_an_error_naming_the_url_and_range(s3):
    f = fl.recfile.open(
        remote(s3, "rows.flr", proxied=True, block_size=4096, retries=1, backoff=0.01)
    )
    s3.proxy.plan = ["500"] * 40  # s3fs retries some itself: more than both layers try
    with pytest.raises(OSError, match=r"s3://data/rows.flr: reading .* failed after 2"):
        f.getitems(np.array([2999]))
    s3.proxy.plan = []
    assert f.getitems(np.array([2999]))["y"].tolist() == [2999]  # the handle still works
    f.close()


def test_a_missing_object_and_a_refused_one_are_clear_errors(s3):
    with pytest.raises(FileNotFoundError, match=r"s3://data/nothing\.flr: no such object"):
        fl.recfile.open(remote(s3, "nothing.flr"))
    with pytest.raises(FileNotFoundError, match=r"s3://absent-bucket/rows\.flr"):
        fl.remote.open("s3://absent-bucket/rows.flr", storage_options=s3.options())
    f = fl.recfile.open(remote(s3, "rows.flr", proxied=True, block_size=4096))
    s3.proxy.plan = ["403"]
    with pytest.raises(PermissionError, match=r"s3://data/rows\.flr: access refused"):
        f.getitems(np.array([1500]))
    f.close()


def test_the_cache_stays_within_its_bound(s3, tmp_path):
    limit = 6 * BLOCK
    local = fl.recfile.open(s3.local / "rows.flr")
    with fl.recfile.open(remote(s3, "rows.flr", cache_dir=str(tmp_path), cache_bytes=limit)) as f:
        seen = 0
        for b in fl.Loader(f, 128, seed=2):
            # rows stay right while blocks are evicted and fetched again (y is the row)
            assert np.array_equal(b.x, local.getitems(b.y)["x"])
            seen += b.meta.size
            index = f._file._obj.index
            assert np.count_nonzero(index) * BLOCK <= limit + 4 * BLOCK
        data = next(p for p in tmp_path.iterdir() if p.suffix == ".data")
        assert os.stat(data).st_blocks * 512 <= limit + 8 * BLOCK
    local.close()
    assert seen == 3000


def test_processes_sharing_a_cache_directory_read_correct_rows(s3, tmp_path):
    script = textwrap.dedent(f"""
        import sys, numpy as np, feedline as fl
        opts = {s3.options()!r}
        f = fl.recfile.open(fl.remote.open("s3://data/rows.flr", storage_options=opts,
                                           block_size={BLOCK}, cache_dir={str(tmp_path)!r},
                                           cache_bytes={8 * BLOCK}))
        rng = np.random.default_rng(int(sys.argv[1]))
        for _ in range(40):
            idx = rng.integers(0, 3000, 50)
            assert f.getitems(idx)["y"].tolist() == idx.tolist()
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]


def in_memory(tmp_path, data: bytes) -> str:
    """A memory:// URL of ``data``, named after the test (fsspec's memory is global)."""
    import fsspec

    path = f"/feedline-tests/{tmp_path.name}/obj.bin"
    fsspec.filesystem("memory").pipe(path, data)
    return f"memory:/{path}"


SMALL = 4096  # the smallest block: p4's layout, 8 blocks of never-zero bytes
NEVER_ZERO = (np.arange(8 * SMALL) % 251 + 1).astype(np.uint8)


def test_a_handle_that_never_evicts_keeps_its_blocks_from_one_that_does(tmp_path):
    # two handles on one cache: the whole object fits the first's budget, not the second's
    url = in_memory(tmp_path, NEVER_ZERO.tobytes())
    cache = str(tmp_path / "cache")
    big = fl.remote.open(url, block_size=SMALL, cache_dir=cache, cache_bytes=1 << 30)
    small = fl.remote.open(url, block_size=SMALL, cache_dir=cache, cache_bytes=2 * SMALL)
    arr = big.array(np.uint8, 0, 4 * SMALL)
    with arr.spans(np.array([0]), np.array([4 * SMALL])) as local:  # blocks 0-3, held
        assert small.pread(4 * SMALL, 4 * SMALL) == NEVER_ZERO[4 * SMALL :].tobytes()
        assert small.pread(1, 4 * SMALL) == NEVER_ZERO[4 * SMALL : 4 * SMALL + 1].tobytes()
        got = np.array(local[: 4 * SMALL])
    assert np.array_equal(got, NEVER_ZERO[: 4 * SMALL])
    # the eviction was put off, not lost: the next read, with no reader left, does it
    assert small.pread(SMALL, 0) == NEVER_ZERO[:SMALL].tobytes()
    assert np.count_nonzero(small._obj.index) <= 2
    big.close()
    small.close()


def test_a_reader_whose_budget_fits_the_object_holds_the_shared_lock(tmp_path):
    import fcntl

    data = tmp_path / "obj.bin"
    data.write_bytes(NEVER_ZERO.tobytes())
    cache = tmp_path / "cache"
    opts = f"block_size={SMALL}, cache_dir={str(cache)!r}"
    script = textwrap.dedent(f"""
        import numpy as np, feedline as fl
        f = fl.remote.open("local://{data}", {opts}, cache_bytes=1 << 30)
        arr = f.array(np.uint8, 0, {4 * SMALL})
        with arr.spans(np.array([0]), np.array([{4 * SMALL}])) as local:
            print("ready", flush=True)
            input()
            got = np.array(local[:{4 * SMALL}])
        want = (np.arange({4 * SMALL}) % 251 + 1).astype(np.uint8)
        print("ok" if np.array_equal(got, want) else f"zeros: {{int((got == 0).sum())}}")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    reader = subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read()[-2000:]
        (lock_path,) = cache.glob("*.lock")
        fd = os.open(lock_path, os.O_RDWR)
        try:  # another process cannot take the lock to evict while the reader copies
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        small = fl.remote.open(
            f"local://{data}", block_size=SMALL, cache_dir=str(cache), cache_bytes=2 * SMALL
        )
        assert small.pread(4 * SMALL, 4 * SMALL) == NEVER_ZERO[4 * SMALL :].tobytes()
        reader.stdin.write("go\n")
        reader.stdin.flush()
        # this read evicts, once the reader has let go of its blocks
        assert small.pread(1, 4 * SMALL) == NEVER_ZERO[4 * SMALL : 4 * SMALL + 1].tobytes()
        out, err = reader.communicate(timeout=120)
        assert reader.returncode == 0 and out.strip() == "ok", err[-2000:]
        assert np.count_nonzero(small._obj.index) <= 2
        small.close()
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()


def test_an_nnvocab_at_a_url_opens_as_the_local_file(tmp_path):
    vocab = {"size": 3, "merges": [1, 2], "meta": {"x": "y"}}
    path = tmp_path / "v.nnvocab"
    path.write_bytes(fl.nndataset.write_nnvocab(vocab))
    url = in_memory(tmp_path, path.read_bytes())
    with fl.nndataset.open(url) as ds, fl.nndataset.open(path) as local:
        assert ds.info.kind == local.info.kind == "vocab"
        assert ds.vocab["merges"].tolist() == local.vocab["merges"].tolist() == [1, 2]
        assert {k: v for k, v in ds.vocab.items() if k != "merges"} == {
            "size": 3,
            "meta": {"x": "y"},
        }
        with pytest.raises(fl.FormatError, match="vocabulary"):
            ds.load_text("train")
    truncated = in_memory(tmp_path / "t", path.read_bytes()[:-3])
    with pytest.raises(fl.FormatError, match=r"memory://.*obj\.bin"):
        fl.nndataset.open(truncated)


def test_a_remote_file_pickles_with_its_options(s3):
    f = fl.recfile.open(remote(s3, "rows.flr"))
    again = pickle.loads(pickle.dumps(f))
    assert again._file.options == f._file.options
    assert np.array_equal(again.getitems(np.array([9, 8]))["x"], f.getitems(np.array([9, 8]))["x"])
    f.close()
    again.close()


def test_workers_open_the_remote_file_themselves(s3):
    with fl.recfile.open(remote(s3, "rows.flr")) as f:
        ds = fl.Dataset(f.record, f).map(double_y)
        with fl.Loader(ds, 100, seed=4, workers=2) as loader:
            got = sorted(y for b in loader for y in b.y.tolist())
    assert got == list(range(0, 6000, 2))


def test_bad_remote_options_are_refused():
    with pytest.raises(ValueError, match="block_size must be a multiple of the page size"):
        fl.remote.RemoteOptions(block_size=5000)
    with pytest.raises(ValueError, match="retries must be an int >= 0"):
        fl.remote.RemoteOptions(retries=-1)
    with pytest.raises(ValueError, match="expected a URL"):
        fl.remote.open("/local/path.flr")


def test_a_manifest_on_s3_opens_its_shards_beside_it(s3, tmp_path, monkeypatch):
    from feedline.formats.manifest import write_manifest
    from feedline.manifest import open_manifest

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    parts = []
    for i in range(2):
        part = tmp_path / f"part-{i}.flr"
        fl.recfile.write(
            part, Row, {"x": np.zeros((50, 12), np.float32), "y": np.arange(100 * i, 100 * i + 50)}
        )
        parts.append(part)
    write_manifest(tmp_path / "manifest.json", parts)
    import s3fs

    fs = s3fs.S3FileSystem(**s3.options())
    for name in ("manifest.json", "part-0.flr", "part-1.flr"):
        fs.put(str(tmp_path / name), f"data/m/{name}")
    with open_manifest("s3://data/m/manifest.json") as m:
        assert len(m) == 100
        got = sorted(y for b in fl.Loader(m.seq(), 16, seed=2) for y in b.y.tolist())
        m.verify()
    assert got == list(range(50)) + list(range(100, 150))
    fs.rm("data/m/part-1.flr")
    with pytest.raises(fl.FormatError, match=r"part-1\.flr"):
        open_manifest("s3://data/m/manifest.json")


# -- pinned to the version opened; a cache that cannot be turned against its user ---------


def flr_bytes(tmp_path, value: float, n: int = 3000) -> bytes:
    path = tmp_path / f"rows-{value}.flr"
    fl.recfile.write(
        path, Row, {"x": np.full((n, 12), value, np.float32), "y": np.arange(n, dtype=np.int64)}
    )
    return path.read_bytes()


def test_a_memory_object_replaced_while_open_is_a_format_error_naming_the_url(tmp_path):
    import fsspec

    old, new = flr_bytes(tmp_path, 1.0), flr_bytes(tmp_path, 2.0)
    assert len(old) == len(new)
    url = in_memory(tmp_path, old)
    f = fl.recfile.open(fl.remote.open(url, block_size=SMALL))
    assert f.getitems(np.array([0]))["x"].max() == 1.0
    fsspec.filesystem("memory").pipe(url[len("memory:/") :], new)  # same size, same name
    with pytest.raises(fl.FormatError, match="changed since it was opened") as info:
        f.getitems(np.array([2999]))  # a block not fetched yet
    assert info.value.path == url and url in str(info.value)
    with pytest.raises(fl.FormatError, match="changed since it was opened"):
        f.verify()
    assert f.getitems(np.array([0]))["x"].max() == 1.0  # cached blocks: the version opened
    f.close()


def test_an_s3_object_replaced_while_open_is_a_format_error_naming_the_url(s3, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem(**s3.options())
    fs.pipe("data/replaced.flr", flr_bytes(tmp_path, 1.0))
    f = fl.recfile.open(remote(s3, "replaced.flr"))
    assert f.getitems(np.array([0]))["x"].max() == 1.0
    fs.pipe("data/replaced.flr", flr_bytes(tmp_path, 2.0))
    with pytest.raises(fl.FormatError, match="changed since it was opened") as info:
        f.getitems(np.array([2999]))
    assert info.value.path == "s3://data/replaced.flr"
    f.close()
    with fl.recfile.open(remote(s3, "replaced.flr")) as g:  # reopened: the new version
        assert g.getitems(np.array([0, 2999]))["x"].min() == 2.0


def test_a_replaced_s3_object_is_not_served_stale_from_a_persistent_cache(s3, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem(**s3.options())
    cache = str(tmp_path / "cache")
    fs.pipe("data/cached.flr", flr_bytes(tmp_path, 1.0))
    with fl.recfile.open(remote(s3, "cached.flr", cache_dir=cache)) as f:
        f.verify()  # every block cached
    fs.pipe("data/cached.flr", flr_bytes(tmp_path, 2.0))
    with fl.recfile.open(remote(s3, "cached.flr", cache_dir=cache)) as f:
        f.verify()
        assert f.getitems(np.arange(3000))["x"].min() == 2.0


class Unversioned:
    """A memory file system that, like an HTTP server without ETag or Last-Modified,
    reports no version of its objects."""

    @staticmethod
    def register() -> str:
        import fsspec
        from fsspec.implementations.memory import MemoryFileSystem

        class NoVersionFS(MemoryFileSystem):
            protocol = "noversion"
            store = MemoryFileSystem.store
            pseudo_dirs = MemoryFileSystem.pseudo_dirs

            @classmethod
            def _strip_protocol(cls, path):
                return MemoryFileSystem._strip_protocol(
                    path.replace("noversion://", "memory://", 1)
                )

            def info(self, path, **kwargs):
                out = dict(super().info(path, **kwargs))
                out.pop("created", None)
                return out

        fsspec.register_implementation("noversion", NoVersionFS, clobber=True)
        return "noversion"


def test_without_a_version_from_the_backend_the_cache_is_not_persisted(tmp_path):
    import fsspec

    Unversioned.register()
    old, new = flr_bytes(tmp_path, 1.0), flr_bytes(tmp_path, 2.0)
    url = in_memory(tmp_path, old).replace("memory://", "noversion://")
    cache = tmp_path / "cache"
    with fl.recfile.open(fl.remote.open(url, block_size=SMALL, cache_dir=str(cache))) as f:
        f.verify()
        assert f.getitems(np.array([5]))["x"].max() == 1.0
    fsspec.filesystem("memory").pipe(url[len("noversion:/") :], new)
    with fl.recfile.open(fl.remote.open(url, block_size=SMALL, cache_dir=str(cache))) as f:
        assert f.getitems(np.arange(3000))["x"].min() == 2.0  # not the stale blocks
        f.verify()
    assert not cache.exists() or not any(cache.iterdir())  # nothing persisted


def test_a_memory_object_replaced_between_handles_is_read_anew_from_a_persistent_cache(tmp_path):
    import fsspec

    url = in_memory(tmp_path, flr_bytes(tmp_path, 1.0))
    cache = str(tmp_path / "cache")
    with fl.recfile.open(fl.remote.open(url, block_size=SMALL, cache_dir=cache)) as f:
        f.verify()
    fsspec.filesystem("memory").pipe(url[len("memory:/") :], flr_bytes(tmp_path, 2.0))
    with fl.recfile.open(fl.remote.open(url, block_size=SMALL, cache_dir=cache)) as f:
        f.verify()
        assert f.getitems(np.arange(3000))["x"].min() == 2.0


def _cache_files(url: str, cache) -> list:
    """The names the cache files of ``url`` get (made by one open, then removed)."""
    fl.remote.open(url, block_size=SMALL, cache_dir=str(cache)).close()
    names = sorted(p.name for p in cache.iterdir())
    for p in cache.iterdir():
        p.unlink()
    return names


@pytest.mark.parametrize("planted", [".data", ".blocks", ".lock"])
def test_a_symlink_planted_in_the_cache_directory_is_refused_not_followed(tmp_path, planted):
    url = in_memory(tmp_path, NEVER_ZERO.tobytes())
    cache = tmp_path / "cache"
    names = _cache_files(url, cache)
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"the victim's file")
    (name,) = [n for n in names if n.endswith(planted)]
    os.symlink(precious, cache / name)
    with pytest.raises(fl.FormatError, match="symbolic link") as info:
        f = fl.remote.open(url, block_size=SMALL, cache_dir=str(cache))
        f.pread(SMALL, 0)
    assert info.value.path == str(cache / name)
    assert precious.read_bytes() == b"the victim's file"


def test_cache_files_are_created_for_this_user_alone(tmp_path):
    url = in_memory(tmp_path, NEVER_ZERO.tobytes())
    cache = tmp_path / "cache"
    f = fl.remote.open(url, block_size=SMALL, cache_dir=str(cache))
    assert f.pread(SMALL, 0) == NEVER_ZERO[:SMALL].tobytes()
    modes = {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in cache.iterdir()}
    assert len(modes) == 3 and set(modes.values()) == {0o600}, modes
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    f.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user needs root")
@pytest.mark.parametrize("what", ["directory", "file"])
def test_a_cache_directory_or_file_of_another_user_is_refused(tmp_path, what):
    url = in_memory(tmp_path, NEVER_ZERO.tobytes())
    cache = tmp_path / "cache"
    names = _cache_files(url, cache)
    if what == "directory":
        os.chown(cache, 12345, 12345)
        target = cache
    else:
        target = cache / names[0]
        target.write_bytes(b"")
        os.chown(target, 12345, 12345)
    with pytest.raises(fl.FormatError, match="uid 12345") as info:
        fl.remote.open(url, block_size=SMALL, cache_dir=str(cache))
    assert info.value.path == str(target)

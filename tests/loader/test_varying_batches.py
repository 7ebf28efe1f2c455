"""Batches of variable-length examples (issue 16): padded to the batch's longest (or a
multiple, or a boundary), lengths in ``batch.meta.lengths``, bytes and str as lists,
from every kind of source, exactly once, resumable, through maps that change the
record."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

import feedline as fl


class Doc(fl.Record, dims={"T": None, "V": 1000}):
    tokens = fl.field("T", "int32", domain=fl.Index("V"))
    tags = fl.field("T", "int8", pad=-1)
    name = fl.field((), "str")


LENGTHS = [3, 0, 5, 2, 7, 1, 4, 6, 2, 3, 8, 1]


def item(i: int) -> dict:
    n = LENGTHS[i % len(LENGTHS)]
    return {
        "tokens": (np.arange(n) + 10 * i) % 1000,
        "tags": np.full(n, i % 100, np.int8),
        "name": f"doc-{i}",
    }


def docs(n: int = len(LENGTHS)) -> fl.Dataset:
    return fl.Dataset(Doc, [item(i) for i in range(n)])


def check_rows(batch) -> list[int]:
    """Each real row matches the record it came from, with padding where it should be;
    returns the record indices."""
    recs = batch.meta.record_indices.tolist()
    lengths = np.asarray(batch.meta.lengths["T"])
    tokens, tags = np.asarray(batch.tokens), np.asarray(batch.tags)
    for r, rec in enumerate(recs):
        want = item(rec)
        n = len(want["tokens"])
        assert lengths[r] == n
        assert tokens[r, :n].tolist() == want["tokens"].tolist()
        assert (tokens[r, n:] == 0).all() and (tags[r, n:] == -1).all()
        assert tags[r, :n].tolist() == want["tags"].tolist()
        assert batch.name[r] == want["name"]
    return recs


def test_a_batch_pads_to_its_longest_example_with_the_lengths_in_meta():
    loader = fl.Loader(docs(), 4, seed=3, workers=0)
    seen = []
    for batch in loader:
        seen += check_rows(batch)
        longest = max(LENGTHS[r] for r in batch.meta.record_indices.tolist())
        assert batch.tokens.shape == (batch.meta.size, longest)
        assert batch.tokens.dtype == np.int32 and batch.tags.dtype == np.int8
        assert isinstance(batch.name, list)
    assert sorted(seen) == list(range(len(LENGTHS)))


def test_the_issue_s_first_failure_a_source_of_lengths_3_to_19_now_batches():
    class Sent(fl.Record, dims={"T": None}):
        tokens = fl.field("T", "int64")

    rng = np.random.default_rng(1)
    lens = rng.integers(3, 20, 50)
    ds = fl.Dataset(Sent, [{"tokens": np.arange(n)} for n in lens])
    total = sum(int(np.asarray(b.meta.lengths["T"]).sum()) for b in fl.Loader(ds, 8, seed=1))
    assert total == int(lens.sum())


def test_padding_rows_have_length_zero_and_the_pad_values():
    loader = fl.Loader(docs(5), 4, pad=True, workers=0)
    last = list(loader)[-1]
    assert last.meta.size == 1 and last.tokens.shape[0] == 4
    assert np.asarray(last.meta.lengths["T"]).tolist() == [LENGTHS[4], 0, 0, 0]
    assert (last.tags[1:] == -1).all() and (last.tokens[1:] == 0).all()
    assert last.name == ["doc-4", "", "", ""]


def test_pad_to_multiple_rounds_the_padded_length_up():
    for batch in fl.Loader(docs(), 3, seed=2, pad_to_multiple=4, workers=0):
        check_rows(batch)
        longest = int(np.asarray(batch.meta.lengths["T"]).max())
        assert batch.tokens.shape[1] == -(-longest // 4) * 4


@pytest.mark.parametrize("pad_to", [(4, 8), {"T": (4, 8)}])
def test_pad_to_pads_to_the_smallest_boundary_that_holds_the_batch(pad_to):
    widths = set()
    for batch in fl.Loader(docs(), 3, seed=5, pad_to=pad_to, workers=0):
        check_rows(batch)
        longest = int(np.asarray(batch.meta.lengths["T"]).max())
        assert batch.tokens.shape[1] == (4 if longest <= 4 else 8)
        widths.add(batch.tokens.shape[1])
    assert widths <= {4, 8}


def test_a_batch_longer_than_the_largest_boundary_is_an_error_naming_the_option():
    loader = fl.Loader(docs(), 12, pad_to=(4, 6), workers=0)
    with pytest.raises(fl.ShapeError, match=r"pad_to: a batch's longest T is 8, more than"):
        next(iter(loader))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"pad_to_multiple": 0}, "pad_to_multiple"),
        ({"pad_to": (8, 4)}, "ascending"),
        ({"pad_to": ()}, "non-empty"),
        ({"pad_to": "8"}, "sequence"),
        ({"pad_to": (4,), "pad_to_multiple": 8}, "exclude each other"),
        ({"pad_to": {1: (4,)}}, "named by a str"),
        ({"pad_to": {"X": (8,)}}, r"pad_to\['X'\]: boundaries for a varying dim.*\['T'\]"),
        ({"pad_to": {"T": (8,), "Z": (4,)}}, r"pad_to\['Z'\]"),
    ],
)
def test_bad_padding_options_are_refused_when_the_loader_is_built(options, match):
    with pytest.raises((ValueError, TypeError), match=match):
        fl.Loader(docs(), 4, **options)


def test_the_padding_options_are_data():
    loader = fl.Loader(docs(), 4, pad_to={"T": [16, 32]})
    assert loader.options.pad_to == (("T", (16, 32)),)
    assert fl.Loader(docs(), 4, pad_to_multiple=8).options.pad_to_multiple == 8


def test_a_mix_of_sources_gives_every_pair_once_with_its_own_contents():
    a, b = docs(12), docs(12)
    seq = fl.Seq.mix([a.shuffle(1), b.shuffle(2)])
    pairs = Counter()
    for batch in fl.Loader(seq, 5, workers=0):
        check_rows(batch)
        pairs.update(zip(batch.meta.source_ordinals.tolist(), batch.meta.record_indices.tolist()))
    assert pairs == Counter({(s, r): 1 for s in (0, 1) for r in range(12)})


def test_threads_sharing_a_loader_see_each_pair_once_per_pass():
    loader = fl.Loader(docs(240), 4, seed=9, workers=0)
    iter(loader)  # one pass, shared: each thread takes batches from it
    pairs: Counter = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(3)

    def run():
        barrier.wait()
        while True:
            try:
                batch = next(loader)
            except StopIteration:
                return
            recs = check_rows(batch)
            with lock:
                pairs.update(recs)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert pairs == Counter(range(240))


def test_resume_mid_pass_gives_the_same_batches():
    ds = docs(30)
    full = [b.meta.record_indices.tolist() for b in fl.Loader(ds, 4, seed=4, workers=0)]
    first = fl.Loader(ds, 4, seed=4, workers=0)
    it = iter(first)
    head = [next(it).meta.record_indices.tolist() for _ in range(3)]
    state = first.state_dict()
    second = fl.Loader(ds, 4, seed=4, workers=0)
    second.load_state_dict(state)
    tail = [check_rows(b) for b in second]
    assert head + tail == full


def test_torch_output_pads_into_tensors_and_keeps_strings_as_lists():
    torch = pytest.importorskip("torch")
    for batch in fl.Loader(docs(), 4, seed=1, output="torch", workers=0):
        assert isinstance(batch.tokens, torch.Tensor) and batch.tokens.dtype == torch.int32
        assert isinstance(batch.meta.lengths["T"], torch.Tensor)
        assert isinstance(batch.meta.mask, torch.Tensor)
        assert isinstance(batch.name, list) and all(isinstance(s, str) for s in batch.name)
        check_rows(batch)


def test_sources_of_every_kind_hold_varying_examples():
    want = [item(i) for i in range(6)]
    as_lists = {k: [w[k] for w in want] for k in ("tokens", "tags", "name")}
    sources = [want, as_lists]
    torch = pytest.importorskip("torch")

    class Tensors(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            w = want[i]
            return {
                "tokens": torch.from_numpy(w["tokens"]),
                "tags": torch.from_numpy(w["tags"]),
                "name": w["name"],
            }

    sources.append(Tensors())
    datasets = pytest.importorskip("datasets")
    sources.append(
        datasets.Dataset.from_dict(
            {
                "tokens": [w["tokens"].tolist() for w in want],
                "tags": [w["tags"].tolist() for w in want],
                "name": [w["name"] for w in want],
            }
        )
    )
    for src in sources:
        ds = fl.Dataset(Doc, src)
        assert ds[4]["tokens"].tolist() == want[4]["tokens"].tolist(), type(src)
        assert ds[1]["tokens"].shape == (0,)
        seen = []
        for batch in fl.Loader(ds, 4, seed=2, workers=0):
            seen += check_rows(batch)
        assert sorted(seen) == list(range(6)), type(src)


class Blob(fl.Record):
    data = fl.field((), "bytes")
    label = fl.field((), "int64")


class Decoded(fl.Record, dims={"N": None}):
    pixels = fl.field("N", "uint8")
    noise = fl.field((), "float64")
    label = fl.field((), "int64")


def decode(example, rng):
    return {
        "pixels": np.frombuffer(example["data"], np.uint8),
        "noise": rng.random(),
        "label": example["label"],
    }


def blobs(n: int) -> fl.Dataset:
    return fl.Dataset(Blob, [{"data": bytes(range(i % 7)), "label": i} for i in range(n)])


def test_a_map_may_return_another_record_and_is_checked_against_it():
    # issue 16: a map could not change the record ("field 'data' of item 192 is missing")
    mapped = blobs(20).map(decode, seed=3, record=Decoded)
    assert mapped.record is Decoded
    runs = []
    for _ in range(2):
        got = {}
        for batch in fl.Loader(mapped, 6, seed=1, workers=0):
            lengths = np.asarray(batch.meta.lengths["N"])
            for r, label in enumerate(batch.label.tolist()):
                assert lengths[r] == label % 7
                assert batch.pixels[r, : label % 7].tolist() == list(range(label % 7))
                got[label] = batch.noise[r]
        runs.append(got)
    assert runs[0] == runs[1] and sorted(runs[0]) == list(range(20))
    bad = blobs(4).map(lambda e: {"pixels": np.zeros(2, np.uint8)}, record=Decoded)
    with pytest.raises(fl.ShapeError, match="`noise` of item"):
        next(iter(fl.Loader(bad, 2, workers=0)))
    with pytest.raises(TypeError, match=r"record is a fl\.Record subclass"):
        blobs(4).map(decode, record=dict)


class Length(fl.Record):
    n = fl.field((), "int64")
    noise = fl.field((), "float64")


def test_a_map_to_a_fixed_record_runs_in_worker_processes_with_the_same_stream():
    mapped = blobs(24).map(_length, seed=5, record=Length)
    here = [(b.n.tolist(), b.noise.tolist()) for b in fl.Loader(mapped, 5, seed=2, workers=0)]
    in_workers = fl.Loader(mapped, 5, seed=2, workers=2)
    there = [(b.n.tolist(), b.noise.tolist()) for b in in_workers]
    assert in_workers._workers_pool() is not None  # made in worker processes
    in_workers.close()
    assert here == there
    assert sorted(n for ns, _ in here for n in ns) == sorted(i % 7 for i in range(24))


def _length(example, rng):
    return {"n": len(example["data"]), "noise": rng.random()}


# -- length bucketing -------------------------------------------------------------------------

RNG_LENGTHS = np.minimum(np.random.default_rng(0).lognormal(np.log(20), 0.9, 700), 300).astype(int)


class Seq1(fl.Record, dims={"T": None}):
    tokens = fl.field("T", "int32")


def sequences(n: int = len(RNG_LENGTHS)) -> fl.Dataset:
    return fl.Dataset(Seq1, {"tokens": [np.full(RNG_LENGTHS[i], i, np.int32) for i in range(n)]})


def padding(batches) -> float:
    real = sum(int(np.asarray(b.meta.lengths["T"])[: b.meta.size].sum()) for b in batches)
    total = sum(int(np.asarray(b.tokens)[: b.meta.size].size) for b in batches)
    return 1 - real / total


def pairs_of(batches) -> Counter:
    out: Counter = Counter()
    for b in batches:
        size = b.meta.size
        recs = b.meta.record_indices[:size].tolist()
        for r, rec in enumerate(recs):  # every row holds its own record
            assert (np.asarray(b.tokens)[r, : RNG_LENGTHS[rec]] == rec).all()
        out.update(zip(b.meta.source_ordinals[:size].tolist(), recs))
    return out


def test_bucketing_makes_batches_of_similar_lengths_each_example_once():
    plain = list(fl.Loader(sequences(), 16, seed=1, workers=0))
    bucketed = list(fl.Loader(sequences(), 16, seed=1, bucket="T", workers=0))
    everyone = Counter({(0, r): 1 for r in range(len(RNG_LENGTHS))})
    assert pairs_of(plain) == everyone and pairs_of(bucketed) == everyone
    assert len(bucketed) == len(plain)
    assert padding(bucketed) < padding(plain) / 2
    # every batch but the groups' last is full, and the short one is the pass's last
    assert [b.meta.size for b in bucketed[:-1]] == [16] * (len(bucketed) - 1)


@pytest.mark.parametrize("workers", [0, 2])
def test_bucketing_a_flr_gives_the_in_memory_batches(tmp_path, workers):
    # a .flr's lengths come from its offsets (no shapes stored): bucketing one raised
    # an IndexError, the lengths being row 0's instead of every row's
    path = tmp_path / "seq.flr"
    fl.recfile.write(path, Seq1, {"tokens": sequences().columns["tokens"]})
    with fl.recfile.open(path) as f:
        assert fl.Dataset(Seq1, f).lengths("T").tolist() == RNG_LENGTHS.tolist()
        got = list(fl.Loader(f, 16, seed=1, bucket="T", workers=workers))
    want = list(fl.Loader(sequences(), 16, seed=1, bucket="T", workers=0))
    assert pairs_of(got) == Counter({(0, r): 1 for r in range(len(RNG_LENGTHS))})
    assert [b.meta.record_indices.tolist() for b in got] == [
        b.meta.record_indices.tolist() for b in want
    ]


def test_a_bucketed_batch_reports_its_rows_own_positions():
    loader = fl.Loader(sequences(), 16, seed=4, bucket="T", bucket_batches=8, workers=0)
    order = fl.Order(fl.Seq.source(sequences()).shuffle(4))
    for batch in loader:
        pos = np.asarray(batch.meta.positions)
        _, recs = order.lookup(pos)
        assert recs.tolist() == batch.meta.record_indices.tolist()
        assert (pos // (16 * 8) == pos[0] // (16 * 8)).all()  # from one group


def test_bucketing_is_a_pure_function_of_seed_and_pass():
    def run(seed):
        loader = fl.Loader(sequences(), 16, seed=seed, bucket="T", workers=0)
        return [[b.meta.record_indices.tolist() for b in loader] for _ in range(2)]

    first, again, other = run(3), run(3), run(5)
    assert first == again
    assert first[0] != first[1]  # each pass has its own groups' order
    assert first != other


@pytest.mark.parametrize("options", [{"drop_last": True}, {"pad": True}, {}])
def test_bucketing_keeps_the_last_batch_rules(options):
    loader = fl.Loader(sequences(100), 16, seed=2, bucket="T", bucket_batches=3, **options)
    batches = list(loader)
    sizes = [b.meta.size for b in batches]
    if options.get("drop_last"):
        assert sizes == [16] * 6
        assert sum(pairs_of(batches).values()) == 96
    else:
        assert sizes == [16] * 6 + [4]
        assert pairs_of(batches) == Counter({(0, r): 1 for r in range(100)})
    if options.get("pad"):
        assert all(b.tokens.shape[0] == 16 for b in batches)


def test_bucketed_ranks_together_see_every_example_once_with_even_steps():
    seen: Counter = Counter()
    steps = []
    for rank in range(3):
        loader = fl.Loader(
            sequences(), 16, seed=1, bucket="T", shard=(rank, 3), even=True, workers=0
        )
        batches = list(loader)
        steps.append(len(batches))
        seen += pairs_of(batches)
    assert len(set(steps)) == 1
    assert seen == Counter({(0, r): 1 for r in range(len(RNG_LENGTHS))})


def test_a_bucketed_pass_resumes_exactly():
    full = [b.meta.record_indices.tolist() for b in fl.Loader(sequences(), 16, seed=7, bucket="T")]
    first = fl.Loader(sequences(), 16, seed=7, bucket="T", workers=0)
    it = iter(first)
    head = [next(it).meta.record_indices.tolist() for _ in range(11)]
    state = first.state_dict()
    second = fl.Loader(sequences(), 16, seed=7, bucket="T", workers=0)
    second.load_state_dict(state)
    assert head + [b.meta.record_indices.tolist() for b in second] == full
    plain = fl.Loader(sequences(), 16, seed=7, workers=0)
    with pytest.raises(fl.StateError, match="bucket"):
        plain.load_state_dict(state)


@pytest.mark.parametrize("old, new", [(2, 3), (3, 2), (2, 1)])
def test_bucketed_ranks_resume_with_another_number_of_ranks_only_at_a_whole_group(old, new):
    def saved(steps):
        seen: Counter = Counter()
        states = []
        for rank in range(old):
            kw = dict(seed=7, bucket="T", bucket_batches=2, shard=(rank, old), workers=0)
            loader = fl.Loader(sequences(), 8, **kw)
            it = iter(loader)
            seen += pairs_of([next(it) for _ in range(steps)])
            states.append(loader.state_dict())
        return seen, states[0]

    seen, state = saved(4)  # two whole groups of 2 batches each rank
    for rank in range(new):
        kw = dict(seed=7, bucket="T", bucket_batches=2, shard=(rank, new), workers=0)
        loader = fl.Loader(sequences(), 8, **kw)
        loader.load_state_dict(state)
        seen += pairs_of(list(loader))
    assert seen == Counter({(0, r): 1 for r in range(len(RNG_LENGTHS))})  # each once
    _, state = saved(3)  # inside a group: its consumed positions are not the first ones
    loader = fl.Loader(sequences(), 8, seed=7, bucket="T", bucket_batches=2, shard=(0, new))
    with pytest.raises(fl.StateError, match=r"bucket_batches=2 batches.*saved at batch 3"):
        loader.load_state_dict(state)


def test_bucketing_gives_maps_the_same_draws_per_example():
    class Noisy(fl.Record, dims={"T": None}):
        tokens = fl.field("T", "int32")
        noise = fl.field((), "float64")

    def noisy(example, rng):
        return {"tokens": example["tokens"], "noise": rng.random()}

    mapped = sequences().map(noisy, seed=11, record=Noisy)

    def draws(**options):
        got = {}
        for b in fl.Loader(mapped, 16, seed=2, workers=0, **options):
            got.update(zip(b.meta.record_indices.tolist(), b.noise.tolist()))
        return got

    assert draws() == draws(bucket="T")


def test_bucketing_needs_a_varying_dim_and_names_the_option():
    with pytest.raises(ValueError, match=r"bucket='S': .* Seq1's are \['T'\]"):
        fl.Loader(sequences(), 4, bucket="S")
    with pytest.raises(TypeError, match="bucket is the name"):
        fl.Loader(sequences(), 4, bucket=3)
    with pytest.raises(ValueError, match="bucket_batches"):
        fl.Loader(sequences(), 4, bucket="T", bucket_batches=0)


def test_bucketing_reads_lengths_from_any_source_once():
    items = [{"tokens": np.full(RNG_LENGTHS[i], i, np.int32)} for i in range(200)]
    ds = fl.Dataset(Seq1, items)
    assert ds.lengths("T").tolist() == RNG_LENGTHS[:200].tolist()
    assert pairs_of(list(fl.Loader(ds, 16, seed=1, bucket="T"))) == Counter(
        {(0, r): 1 for r in range(200)}
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_nested_gives_torch_jagged_tensors_of_the_examples(workers):
    torch = pytest.importorskip("torch")
    loader = fl.Loader(docs(203), 5, seed=3, output="torch", nested=True, pad=True, workers=workers)
    batches = list(loader)  # kept while the workers' slots are reused: each keeps its rows
    for batch in batches:
        assert batch.tokens.is_nested and batch.tokens.size(0) == 5
        rows = batch.tokens.unbind()
        lengths = batch.meta.lengths["T"].tolist()
        for r, rec in enumerate(batch.meta.record_indices.tolist()):
            if rec < 0:  # a padding row: no tokens
                assert rows[r].numel() == 0 and lengths[r] == 0
                continue
            want = item(rec)
            assert rows[r].tolist() == want["tokens"].tolist() and lengths[r] == len(rows[r])
        assert isinstance(batch.tokens, torch.Tensor)


def _rows_of_nested(batch):
    """A batch transform run in the workers: what it was given, as lists."""
    return ([t.tolist() for t in batch.tokens.unbind()], batch.tokens.is_nested)


def test_a_batch_transform_in_the_workers_is_given_nested_tensors():
    pytest.importorskip("torch")
    kw = dict(output="torch", nested=True, batch_transform=_rows_of_nested)
    here = list(fl.Loader(docs(60), 5, seed=2, workers=0, **kw))
    there = list(fl.Loader(docs(60), 5, seed=2, workers=2, **kw))
    assert all(nested for _, nested in here) and there == here


def test_nested_is_refused_where_it_cannot_hold():
    with pytest.raises(ValueError, match="output must be 'torch'"):
        fl.Loader(docs(), 4, nested=True, output="numpy")
    with pytest.raises(ValueError, match="does not pad"):
        fl.Loader(docs(), 4, nested=True, output="torch", pad_to_multiple=8)

    class Grid(fl.Record, dims={"H": None, "W": None}):
        img = fl.field(("H", "W"), "uint8")

    grids = fl.Dataset(Grid, [{"img": np.zeros((2, 3), np.uint8)}])
    with pytest.raises(ValueError, match=r"one varying axis, the first; field `img` is \[H W\]"):
        fl.Loader(grids, 1, nested=True, output="torch")


def test_next_into_refuses_a_record_with_varying_fields_before_claiming():
    loader = fl.Loader(docs(), 4, workers=0)
    out = {"tokens": np.zeros((4, 8), np.int32), "tags": np.zeros((4, 8), np.int8)}
    with pytest.raises(ValueError, match="field `tokens` is \\[T\\] int32, whose batches vary"):
        loader.next_into(out)
    assert len(list(loader)) == 3  # nothing was claimed: the pass is whole


def _decode_slowly(example, rng):
    # zlib releases the GIL: a stand-in for an image decoder
    import zlib

    data = zlib.decompress(zlib.compress(example["data"] * 200))
    return {
        "pixels": np.frombuffer(data[: len(example["data"])], np.uint8),
        "noise": rng.random(),
        "label": example["label"],
    }


def test_maps_in_threads_give_the_same_stream_for_any_number_of_threads():
    runs = []
    for threads in (1, 2, 3, 8):
        mapped = blobs(50).map(_decode_slowly, seed=4, record=Decoded, threads=threads)
        got = [
            (b.label.tolist(), b.noise.tolist(), b.pixels.tolist(), b.meta.lengths["N"].tolist())
            for b in fl.Loader(mapped, 7, seed=3, workers=0)
        ]
        runs.append(got)
    assert runs[0] == runs[1] == runs[2] == runs[3]
    assert sorted(label for labels, *_ in runs[0] for label in labels) == list(range(50))


@pytest.mark.parametrize("threads", [0, 257, 1.5, True])
def test_a_bad_thread_count_is_refused(threads):
    with pytest.raises((ValueError, TypeError), match="threads"):
        blobs(3).map(decode, threads=threads)


def test_bucketed_batches_from_worker_processes_are_the_in_process_ones():
    mapped = sequences(300).map(_copy_tokens, seed=1)
    here = list(fl.Loader(mapped, 16, seed=5, bucket="T", workers=0))
    there_loader = fl.Loader(mapped, 16, seed=5, bucket="T", workers=2)
    there = list(there_loader)
    assert there_loader._workers_pool() is not None
    there_loader.close()
    assert len(here) == len(there)
    for a, b in zip(here, there):
        assert np.array_equal(a.tokens, b.tokens)
        assert a.meta.positions.tolist() == b.meta.positions.tolist()
        assert a.meta.lengths["T"].tolist() == b.meta.lengths["T"].tolist()
    assert pairs_of(there) == Counter({(0, r): 1 for r in range(300)})


def _copy_tokens(example):
    return {"tokens": example["tokens"].copy()}


def _positions_of(batch):
    return np.asarray(batch.meta.positions).tolist()


def test_a_transform_in_workers_sees_the_bucketed_rows_own_positions():
    mapped = sequences(200).map(_copy_tokens, seed=1)
    here = list(fl.Loader(mapped, 16, seed=5, bucket="T", batch_transform=_positions_of, workers=0))
    assert any(b != sorted(b) or b[-1] - b[0] != len(b) - 1 for b in here)  # bucketed rows
    there_loader = fl.Loader(
        mapped, 16, seed=5, bucket="T", batch_transform=_positions_of, workers=2
    )
    there = list(there_loader)
    there_loader.close()
    assert here == there and sorted(p for b in here for p in b) == list(range(200))

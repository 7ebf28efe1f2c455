"""``feedline demo``: a training run from data on disk to a trained model, preempted.

1. Data: scikit-learn's 8x8 handwritten digits written to a typed ``.flr``; the
   Python documentation that ships with the interpreter (``pydoc_data``) tokenized
   into a ``.nndataset``.
2. The order: the clean digits and an augmented copy (shifted, noisy: a per-example
   generator seeded by the order position) mixed with a schedule that brings the
   augmented ones in (a curriculum), shuffled, three epochs, dealt to two simulated
   ranks.
3. Training: a softmax classifier (numpy) trained data-parallel on the two ranks'
   batches (their gradients averaged, as an all-reduce would), each rank's loader
   with two worker processes.
4. Preemption: the same run stopped mid-epoch, its loader states and weights saved,
   restarted in new loaders: the resumed stream and the final weights equal the
   uninterrupted run's, bit for bit.
5. Language-model windows from the ``.nndataset``: every target once per pass.
6. The ordering engine at a billion positions.

Figures (throughput, time to the first batch) are measured in this run; the plots and
files go to one folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

import numpy as np

from .. import recfile, text
from .._base import rowcopy
from ..loader import Loader
from ..order import Order, Schedule, Seq
from ..records import Index, Range, Record, field
from ..sources import Dataset
from ._demo_bench import gather_bench
from ._demo_images import images_pass
from ._demo_lm import EOT, chat_pass, packing_pass, tables_pass, windows_pass
from ._demo_orders import orders_at_scale
from ._demo_varlen import varlen_pass

BATCH, RANKS, EPOCHS, WORKERS = 64, 2, 3, 2
STOP_AT = 40  # the step at which the demo's run is preempted (in epoch 2 of 3)


class Digit(Record, dims={"D": 64, "C": 10}):
    """An 8x8 handwritten digit, grey levels 0 to 16, and its label."""

    img = field("D", "float32", domain=Range(0, 16))
    label = field((), "int64", domain=Index("C"))


def augment(example: dict, rng: np.random.Generator) -> dict:
    """Shift the image by up to a pixel each way and add noise (reproducible: ``rng`` is
    seeded by the example's position in the order)."""
    img = example["img"].reshape(8, 8)
    img = np.roll(img, tuple(rng.integers(-1, 2, 2)), axis=(0, 1))
    img = np.clip(img + rng.normal(0, 1.0, img.shape), 0, 16).astype(np.float32)
    return {"img": img.reshape(64), "label": example["label"]}


def load_digits() -> tuple[np.ndarray, np.ndarray, str]:
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError:
        rng = np.random.default_rng(0)  # a stand-in, said so in the output
        labels = rng.integers(0, 10, 1797)
        centers = rng.uniform(0, 16, (10, 64))
        imgs = np.clip(centers[labels] + rng.normal(0, 3, (1797, 64)), 0, 16)
        return (
            imgs.astype(np.float32),
            labels,
            ("synthetic digits (install scikit-learn, the 'demo' extra, for the real ones)"),
        )
    d = sk_digits()
    return (
        d.data.astype(np.float32),
        d.target.astype(np.int64),
        "scikit-learn's 8x8 handwritten digits (UCI)",
    )


def write_corpus(path: str) -> int:
    """The Python documentation's topics, one paragraph a line; returns the bytes."""
    import pydoc_data.topics

    lines = []
    for topic in sorted(pydoc_data.topics.topics):
        for para in pydoc_data.topics.topics[topic].split("\n\n"):
            para = " ".join(para.split())
            if para:
                lines.append(para)
    data = ("\n".join(lines) + "\n").encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def make_order(flr_path: str) -> tuple[Seq, Dataset]:
    f = recfile.open(flr_path)
    clean = Dataset(f.record, f, name="digits")
    f.close()  # the dataset holds its own share of the file
    augmented = Dataset(f.record, clean.source, name="digits-augmented").map(augment, seed=7)
    one_epoch = Seq.mix(
        [
            (clean.shuffle(1), Schedule.uniform()),
            # the curriculum: augmented digits come in after a fifth of each epoch, ramping up
            (augmented.shuffle(2), Schedule.ramp(0.2, 0.6)),
        ]
    )
    return one_epoch.repeat(EPOCHS), clean


def loaders(seq: Seq) -> list[Loader]:
    return [Loader(seq, BATCH, shard=(r, RANKS), even=True, workers=WORKERS) for r in range(RANKS)]


class Model:
    """Softmax regression trained by SGD; its steps are deterministic."""

    def __init__(self) -> None:
        self.w = np.zeros((64, 10), dtype=np.float64)
        self.b = np.zeros(10, dtype=np.float64)

    def grads(self, img: np.ndarray, label: np.ndarray, mask: np.ndarray):
        x = img.astype(np.float64) / 16.0
        z = x @ self.w + self.b
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(label)), label] -= 1.0
        p *= mask[:, None] / max(1, int(mask.sum()))
        return x.T @ p, p.sum(axis=0)

    def step(self, grads: list, lr: float = 0.5) -> None:
        gw = sum(g[0] for g in grads) / len(grads)  # the ranks' all-reduce
        gb = sum(g[1] for g in grads) / len(grads)
        self.w -= lr * gw
        self.b -= lr * gb

    def accuracy(self, img: np.ndarray, label: np.ndarray) -> float:
        return float(((img / 16.0) @ self.w + self.b).argmax(axis=1).__eq__(label).mean())


def train(
    seq: Seq,
    test: tuple[np.ndarray, np.ndarray],
    stop_at: int | None = None,
    resume: dict | None = None,
    report: bool = False,
) -> dict[str, Any]:
    """Steps over the ranks' loaders until the last epoch ends (or ``stop_at``)."""
    model = Model()
    ranks = loaders(seq)
    step, digests = 0, []
    if resume is not None:
        model.w, model.b = resume["w"].copy(), resume["b"].copy()
        for loader, state in zip(ranks, resume["states"]):
            loader.load_state_dict(state)
        step, digests = resume["step"], list(resume["digests"])
    t0 = time.perf_counter()
    first = None
    rows = 0
    per_epoch = -(-len(ranks[0]) // EPOCHS)
    try:
        its = [iter(r) for r in ranks]  # one pass of the order: its three epochs
        while True:
            batches: list[Any] = [next(it, None) for it in its]
            if batches[0] is None:  # even=True: the ranks end on the same step
                stats = ranks[0].stats()
                break
            first = first or time.perf_counter() - t0
            model.step([model.grads(b.img, b.label, b.meta.mask) for b in batches])
            h = hashlib.sha256()
            for b in batches:
                h.update(b.img.tobytes())
                h.update(b.label.tobytes())
            digests.append(h.hexdigest()[:16])
            rows += sum(b.meta.size for b in batches)
            step += 1
            if step == stop_at:
                return {
                    "w": model.w,
                    "b": model.b,
                    "step": step,
                    "digests": digests,
                    "states": [r.state_dict() for r in ranks],
                }
            if report and step % per_epoch == 0:
                print(
                    f"   epoch {step // per_epoch}: step {step}, test accuracy "
                    f"{model.accuracy(*test):.1%}"
                )
    finally:
        for r in ranks:
            r.close()
    seconds = time.perf_counter() - t0
    return {
        "w": model.w,
        "b": model.b,
        "step": step,
        "digests": digests,
        "rows_per_s": rows / seconds,
        "first_batch_s": first,
        "seconds": seconds,
        "accuracy": model.accuracy(*test),
        "waited": stats.wait_fraction,
        "worker_utilisation": stats.worker_utilisation,
    }


def interrupted_pass(clean: Dataset) -> dict[str, int]:
    """One shuffled pass in which two batches are interrupted while they are made (as a
    Ctrl-C, or a SIGTERM handler raising to checkpoint, would): every record still comes
    exactly once, counted record by record."""
    armed = {"left": 2}

    def flaky(example: dict, rng: np.random.Generator) -> dict:
        if armed["left"] and rng.random() < 0.01:
            armed["left"] -= 1
            raise KeyboardInterrupt
        return example

    loader = Loader(clean.map(flaky, seed=3), BATCH, seed=5, workers=0)
    seen: dict[int, int] = {}
    interrupts = 0
    while True:
        try:
            batch = next(loader)
        except KeyboardInterrupt:
            interrupts += 1
            continue
        except StopIteration:
            break
        for r in batch.meta.record_indices[: batch.meta.size].tolist():
            seen[r] = seen.get(r, 0) + 1
    loader.close()
    once = sum(1 for r in range(len(clean)) if seen.get(r) == 1)
    return {"interrupts": interrupts, "once": once, "records": len(clean)}


def run_demo(out_dir: str = "feedline-demo") -> int:
    t_start = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    print("feedline demo: from files on disk to a trained model, preempted and resumed\n")

    print("1. Data")
    imgs, labels, what = load_digits()
    flr_path = os.path.join(out_dir, "digits.flr")
    train_n = 1500
    recfile.write(
        flr_path, Digit, {"img": imgs[:train_n], "label": labels[:train_n]}, check_values=True
    )
    print(
        f"   {what}: {train_n} for training written to {flr_path} "
        f"({os.path.getsize(flr_path):,} bytes, schema and checksums inside); "
        f"{len(imgs) - train_n} held out"
    )
    corpus = os.path.join(out_dir, "python-docs.txt")
    size = write_corpus(corpus)
    nnd_path = os.path.join(out_dir, "python-docs.nndataset")
    summary = text.build(
        corpus, nnd_path, text.ByteTokenizer(), test_docs=50, workers=2, progress=None, created=0
    )
    print(f"   the Python documentation ({size:,} bytes, from pydoc_data), byte tokenizer:")
    print("\n".join(f"     {line.strip()}" for line in str(summary).splitlines()))

    print("\n2. The order")
    seq, clean = make_order(flr_path)
    order = Order(seq)
    config = os.path.join(out_dir, "order.json")
    with open(config, "w", encoding="utf-8") as f:
        f.write(seq.to_json(indent=2))
    ords, _ = order.lookup(np.arange(len(order)))
    third = len(order) // EPOCHS
    early, late = ords[: third // 5].mean(), ords[third - third // 5 : third].mean()
    print(
        f"   clean and augmented digits, mixed (augmented: {early:.0%} of the first fifth "
        f"of an epoch, {late:.0%} of the last), shuffled, {EPOCHS} epochs: "
        f"{len(order):,} positions, dealt to {RANKS} ranks; saved to {config}"
    )

    print(f"\n3. Training on {RANKS} ranks, {WORKERS} worker processes each")
    test = (imgs[train_n:], labels[train_n:])
    full = train(seq, test, report=True)
    print(
        f"   {full['step']} steps, test accuracy {full['accuracy']:.1%}; "
        f"{full['rows_per_s']:,.0f} examples/s, first batch after "
        f"{full['first_batch_s'] * 1e3:.0f} ms (workers starting); rank 0's "
        f"loader.stats(): the steps waited {full['waited']:.0%} of the time for batches, "
        f"its workers busy {full['worker_utilisation']:.0%}"
    )

    print(f"\n4. Preempted at step {STOP_AT}, restarted from the saved state")
    stopped = train(seq, test, stop_at=STOP_AT)
    for r, state in enumerate(stopped["states"]):
        with open(os.path.join(out_dir, f"state-rank{r}.json"), "w", encoding="utf-8") as f:
            json.dump(state, f)
    np.savez(os.path.join(out_dir, "weights-at-preemption.npz"), w=stopped["w"], b=stopped["b"])
    states = []
    for r in range(RANKS):
        with open(os.path.join(out_dir, f"state-rank{r}.json"), encoding="utf-8") as f:
            states.append(json.load(f))
    resumed = train(seq, test, resume={**stopped, "states": states})
    same_stream = resumed["digests"] == full["digests"]
    same_weights = bool((resumed["w"] == full["w"]).all() and (resumed["b"] == full["b"]).all())
    print(
        f"   the resumed stream equals the uninterrupted one: {same_stream} "
        f"({len(full['digests'])} steps of {RANKS} batches); final weights identical: "
        f"{same_weights}"
    )

    hits = interrupted_pass(clean)
    print(
        f"   a Ctrl-C while a batch was being made ({hits['interrupts']} of them, in one "
        f"pass): the batch is made again at the next call; {hits['once']:,} of "
        f"{hits['records']:,} records delivered exactly once"
    )

    print("\n5. Language-model windows from the .nndataset")
    win = windows_pass(nnd_path)
    print(
        f"   {win['windows']:,} windows of 256 tokens, shuffled: {win['trained']:,} targets "
        f"trained of {win['expected']:,}; every window read once: {win['each_once']}; "
        f"{win['tokens_per_s'] / 1e6:.1f} M "
        f"tokens/s, first batch after {win['first_batch_s'] * 1e3:.1f} ms"
    )

    print("\n6. Documents of any length: the same paragraphs, padded per batch")
    var = varlen_pass(out_dir)
    plain, bucketed, shards = var["plain"], var["bucketed"], var["shards"]
    print(
        f"   {var['documents']:,} paragraphs of {var['min']} to {var['max']} byte tokens "
        f"(median {var['median']}; longer ones cut to 2,048) and their topics (str); "
        f"batches of 64 padded to the longest, to a multiple of 8:\n"
        f"   padding {plain['padding']:.0%} of the tokens; bucketed by length "
        f"(bucket='T'): {bucketed['padding']:.0%}, "
        f"{bucketed['tokens_per_s'] / 1e6:.1f} M tokens/s; every paragraph once in "
        f"each pass: {plain['once'] and bucketed['once']}\n"
        f"   as {shards['files']} .flr shards shuffled as one (their columns read together: "
        f"{shards['together']}): {shards['tokens_per_s'] / 1e6:.1f} M tokens/s; every "
        f"paragraph once: {shards['once']}"
    )

    print("\n7. Photos: an image folder to augmented batches")
    pics = images_pass(out_dir)
    print(
        f"   {pics['summary']}\n"
        f"   decoded (simplejpeg where installed) and cut by random-resized crops of 224 and "
        f"flips drawn from each image's seed: batches {tuple(pics['shape'])} uint8, "
        f"{pics['images_per_s']:,.0f} images/s in 2 threads (the same by hand with "
        f"Pillow, one at a time: {pics['pil_images_per_s']:,.0f}/s); first batch after "
        f"{pics['first_batch_s'] * 1e3:.0f} ms; the stream with 1 and 2 threads is "
        f"identical: {pics['same_stream']}; every image once: {pics['once']}"
    )

    print("\n8. Language-model data as practitioners build it: JSONL, end-of-text, packing")
    lm, chat = packing_pass(out_dir), chat_pass(out_dir)
    print(
        f"   {lm['documents']} topics as JSONL documents with {EOT} after each: "
        f"{lm['tokens']:,} byte tokens in a .flr of uint16; packed by best fit into "
        f"{lm['rows']} rows of 1,024 (planned in {lm['plan_s'] * 1e3:.0f} ms): padding "
        f"{lm['padding']:.1%} (one document a row: {lm['padding_per_doc']:.1%}); "
        f"{lm['trained']:,} targets trained of {lm['expected']:,}, "
        f"{lm['tokens_per_s'] / 1e6:.1f} M tokens/s\n"
        f"   the same topics as {chat['chats']} chats (a question, its answer): the loss "
        f"on {chat['trained']:,} of {chat['tokens']:,} tokens, exactly the answers "
        f"({chat['answers']:,}): {chat['trained'] == chat['answers']}"
    )
    tab = tables_pass(out_dir, imgs, labels)
    print(
        f"   the digits as a Parquet table ({tab['rows']:,} rows in {tab['row_groups']} row "
        f"groups, read as {tab['record']}): shuffled batches straight from it, the same as "
        f"from its .flr: {tab['same_batches']}; to .flr and back to Parquet, equal: "
        f"{tab['round_trip']}"
    )

    bench = gather_bench(out_dir)
    base = bench["numpy gather"]
    print(
        "\n   Shuffled batches of 512 from a 1,000,000-row .flr, examples/s: "
        + "; ".join(f"{k} {v / 1e6:.1f} M ({v / base:.2f}x)" for k, v in bench.items())
        + (
            "\n   (feedline's two threads: chunks of batches copied by C threads without the"
            " GIL, feedline._base._rowcopy)"
            if rowcopy.available()
            else "\n   (feedline's two threads: numpy's takes; the compiled row copies are not"
            " built here)"
        )
    )

    scale = orders_at_scale(out_dir)
    plots = make_plots(seq, out_dir, bench)
    ok = (
        same_stream
        and same_weights
        and win["trained"] == win["expected"]
        and win["each_once"]
        and scale["resumed_identical"]
        and plain["once"]
        and bucketed["once"]
        and pics["once"]
        and pics["same_stream"]
        and lm["trained"] == lm["expected"]
        and chat["trained"] == chat["answers"]
        and tab["same_batches"]
        and tab["round_trip"]
    )
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "resumed_identical": same_stream and same_weights,
                "accuracy": full["accuracy"],
                "examples_per_s": full["rows_per_s"],
                "first_batch_s": full["first_batch_s"],
                "windows": win,
                "variable_length": var,
                "images": pics,
                "packing": lm,
                "chats": chat,
                "tables": tab,
                "bench": bench,
                "orders": scale,
                "plots": plots,
            },
            f,
            indent=2,
        )
    print(
        f"\nDone in {time.perf_counter() - t_start:.1f} s: test accuracy "
        f"{full['accuracy']:.1%}; outputs and plots in {os.path.abspath(out_dir)}"
        + "".join(f"\n   {p}" for p in plots)
    )
    return 0 if ok else 1


def make_plots(seq: Seq, out_dir: str, bench: dict[str, float]) -> list[str]:
    """The order's shares over training and the gather benchmark (needs matplotlib)."""
    try:
        from . import plots

        mix = os.path.join(out_dir, "mix.png")
        plots.plot_order(
            seq, mix, names=["clean digits", "augmented digits"], shards=RANKS, window=64
        )
        chart = os.path.join(out_dir, "bench.png")
        rows = [
            plots.BenchRow(
                "numpy gather (memory map, precomputed permutation)", 0, bench["numpy gather"]
            ),
            plots.BenchRow("feedline Loader", 0, bench["feedline, 0 workers"]),
            plots.BenchRow("feedline Loader", 2, bench["feedline, 2 workers"]),
        ]
        plots.plot_bench_compare(
            "",
            [
                (
                    "shuffled batches of 512 from a 1,000,000-row .flr "
                    "(64 float32 + an int64 label)",
                    rows,
                )
            ],
            chart,
        )
    except ImportError as e:
        print(f"   (no plots: {e})")
        return []
    return [mix, chart]

"""The steps every corpus build shares, whatever it writes: checked arguments, the
test documents' choice, the tokenizer's call, chunks tokenized in order on threads, a
progress bar and the summary. ``_build`` writes a ``.nndataset`` with them,
``_build_flr`` a compact ``.flr``.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from .._base import kernels
from ..errors import DomainError, MissingFileError
from ..formats import nndataset
from ..order import Order, Seq
from ._docs import mark_assistant_span
from ._inputs import decode_docs
from ._tokenizers import Tokenizer

_T = TypeVar("_T")

# Threads tokenizing when ``workers`` is None. Measured (benchmarks/text_build.py, 2
# CPUs, four runs): with the byte tokenizer 1 and 2 threads are level (90-100 MB/s);
# with a BPE, whose batch encoder already uses every core, 1 thread reached 0.80-0.99x
# the encoder alone and 2 threads 0.76-0.85x, ahead in one run of four.
_DEFAULT_WORKERS = 1


@dataclasses.dataclass(frozen=True)
class BuildSummary:
    """What :func:`build` wrote: documents, tokens, the share trained, sizes and time."""

    path: str
    documents: int  # the corpus's documents (non-empty lines)
    train_docs: int
    test_docs: int
    tokens: int  # over both subsets
    loss_tokens: int  # tokens whose loss counts (all of them for loss_scope "all")
    empty_docs: int  # documents that tokenized to nothing (kept, with their doc_id)
    loss_scope: str
    source_bytes: int
    bytes: int  # the .nndataset's size
    seconds: float

    @property
    def loss_share(self) -> float:
        """The share of tokens whose loss counts (1.0 for loss_scope "all")."""
        return self.loss_tokens / self.tokens if self.tokens else 1.0

    def __str__(self) -> str:
        mb = self.source_bytes / 1e6
        rate = mb / self.seconds if self.seconds > 0 else float("inf")
        return "\n".join(
            [
                f"wrote {self.path}: {self.bytes:,} bytes",
                f"  documents {self.documents:,} (train {self.train_docs:,}, test "
                f"{self.test_docs:,}; {self.empty_docs:,} without tokens)",
                f"  tokens {self.tokens:,}; loss on {self.loss_share:.1%} "
                f"(loss_scope {self.loss_scope})",
                f"  {mb:,.1f} MB of text in {self.seconds:.2f} s ({rate:,.1f} MB/s)",
            ]
        )


def _encode(tokenizer: Tokenizer, docs: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(tokenizer, "encode_flow"):
        flow, counts = tokenizer.encode_flow(docs)
    else:  # any object with encode_batch
        arrays = [np.asarray(a) for a in tokenizer.encode_batch(docs)]
        counts = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        # an empty list or array (a document without tokens) is float64 to numpy: it
        # holds no ids, so it must not decide the dtype of the others
        flow = np.concatenate([a for a in arrays if len(a)] or [np.zeros(0, np.uint64)])
    counts = np.asarray(counts, dtype=np.int64)
    flow = np.asarray(flow)
    if len(counts) != len(docs) or int(counts.sum()) != len(flow) or flow.ndim != 1:
        raise ValueError(
            f"{type(tokenizer).__name__} returned {len(counts)} documents and "
            f"{len(flow)} tokens for {len(docs)} documents"
        )
    if len(flow) and (flow.dtype.kind not in "iu" or int(flow.min()) < 0):
        raise ValueError(
            f"{type(tokenizer).__name__} returned ids of dtype {flow.dtype} "
            "(expected non-negative integers)"
        )
    return flow.astype(np.uint64, copy=False), counts


def _in_order(
    fn: Callable[..., _T], tasks: Iterator[tuple], workers: int
) -> Generator[_T, None, None]:
    """``fn(*task)`` for each task, in order, on ``workers`` threads (2 tasks queued per
    thread), or in the calling thread when ``workers`` is 0."""
    if workers == 0:
        for task in tasks:
            yield fn(*task)
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix="feedline-text")
    pending: collections.deque = collections.deque()
    try:
        for task in tasks:
            pending.append(pool.submit(fn, *task))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _test_choice(n: int, k: int, split: str, seed: int) -> np.ndarray:
    """Sorted indices of the ``k`` test documents among ``n``: the first ``k`` positions
    of feedline's seeded shuffle (stable across platforms and versions), or the last k."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if split == "last":
        return np.arange(n - k, n, dtype=np.int64)
    with kernels.deferred():  # numpy's path (the same picks) rather than wait for numba
        _, picked = Order(Seq.source(n).shuffle(seed)).lookup(np.arange(k, dtype=np.int64))
    return np.sort(picked.astype(np.int64))


def _progress(enabled: bool | None, total: int, desc: str) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        leave=False,
        dynamic_ncols=True,
    )


def _check_args(
    corpus: Any,
    out_path: Any,
    tokenizer: Any,
    test_docs: Any,
    test_split: Any,
    loss_scope: Any,
    workers: Any,
    seed: Any,
) -> None:
    for name in ("encode_batch", "vocab_record", "special_id"):
        if not callable(getattr(tokenizer, name, None)):
            raise TypeError(
                f"tokenizer must have {name}() (a ByteTokenizer, a BPETokenizer "
                f"or a fl.text.Tokenizer), got {type(tokenizer).__name__}"
            )
    if not isinstance(getattr(tokenizer, "vocab_size", None), (int, np.integer)):
        raise TypeError(
            f"tokenizer.vocab_size must be an int, got {getattr(tokenizer, 'vocab_size', None)!r}"
        )
    for name, v, low in (("test_docs", test_docs, 0), ("seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 0
    ):
        raise ValueError(f"workers must be None or an int >= 0, got {workers!r}")
    if test_split not in ("random", "last"):
        raise ValueError(f"test_split must be 'random' or 'last', got {test_split!r}")
    if loss_scope not in nndataset.LOSS_SCOPES:
        raise ValueError(f"loss_scope must be 'all' or 'assistant', got {loss_scope!r}")
    for inp in corpus:  # the Inputs
        if not os.path.isfile(inp.path):
            expected = {
                "text": "a text file with one document a line",
                "jsonl": "a JSONL file, one JSON object a line",
                "parquet": "a Parquet file",
            }[inp.kind]
            raise MissingFileError(
                f"{os.fspath(inp.path)}: no such corpus file (expected {expected})"
            )
    check_out_path(out_path, "out_path")
    for inp in corpus:
        if os.path.exists(out_path) and os.path.samefile(inp.path, out_path):
            raise ValueError(f"out_path {os.fspath(out_path)!r} is the corpus itself")


def check_out_path(path: str | os.PathLike[str], what: str) -> None:
    """Refuse, before any work, a file to write that is a directory or whose directory
    does not exist (the error names ``path``, not the temporary written beside it)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"{what} {path!r} is a directory (expected the name of a file to write)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise MissingFileError(f"{what} {path!r}: no such directory {parent!r} to write into")


def end_token(tokenizer: Tokenizer, option: str, value: Any) -> int | None:
    """The id ``eos``/``bos`` (``option``) names: None, an id below ``vocab_size``, or
    the name of one of the tokenizer's specials; anything else a ``DomainError`` naming
    the option."""
    if value is None:
        return None
    size = int(tokenizer.vocab_size)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, str)):
        raise TypeError(
            f"{option} must be None, a token id or a special token's name, got {value!r}"
        )
    if isinstance(value, str):
        try:
            return int(tokenizer.special_id(value))
        except ValueError as e:
            raise DomainError(f"{option}={value!r}: {e}") from None
    if not 0 <= int(value) < size:
        raise DomainError(
            f"{option}={int(value)} is outside the tokenizer's vocabulary (ids 0 to {size - 1})"
        )
    return int(value)


def with_ends(
    flow: np.ndarray,
    counts: np.ndarray,
    mask: np.ndarray | None,
    bos: int | None,
    eos: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``bos`` put before and ``eos`` after every document of the flow (vectorised: a
    boolean select, 3 against 10 ms a million tokens for an int64 scatter); their mask
    is False (the loss is the masked tokens')."""
    k = (bos is not None) + (eos is not None)
    if not k or not len(counts):
        return flow, counts, mask
    new_counts = counts + k
    ends = np.cumsum(new_counts)
    starts = ends - new_counts
    keep = np.ones(int(ends[-1]), dtype=bool)  # the documents' own tokens
    if bos is not None:
        keep[starts] = False
    if eos is not None:
        keep[ends - 1] = False
    out = np.empty(len(keep), dtype=flow.dtype)
    out[keep] = flow
    if bos is not None:
        out[starts] = bos
    if eos is not None:
        out[ends - 1] = eos
    new_mask = None
    if mask is not None:
        new_mask = np.zeros(len(out), dtype=bool)
        new_mask[keep] = mask
    return out, new_counts, new_mask


def _encode_pieces(
    tokenizer: Tokenizer, specials: dict[str, int], texts: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_encode` of ``texts``, a piece that is exactly a special (a chat
    template's marker) taking its id without the tokenizer's call, as encoding its text
    would give (the markers are half the pieces; finding them in the text costs a
    Python step each in the byte tokenizer)."""
    ids = np.fromiter((specials.get(t, -1) for t in texts), dtype=np.int64, count=len(texts))
    is_special = ids >= 0
    if not is_special.any():
        return _encode(tokenizer, texts)
    flow_plain, counts_plain = _encode(tokenizer, [t for t, i in zip(texts, ids.tolist()) if i < 0])
    counts = np.ones(len(texts), dtype=np.int64)
    counts[~is_special] = counts_plain
    from_plain = np.repeat(~is_special, counts)
    flow = np.empty(len(from_plain), dtype=np.uint64)
    flow[from_plain] = flow_plain
    flow[~from_plain] = ids[is_special].astype(np.uint64)
    return flow, counts


@dataclasses.dataclass(frozen=True)
class DocEncoding:
    """How a chunk of documents becomes tokens: the tokenizer, the assistant markers
    of text documents (loss_scope "assistant"; None: no mask), the chat template and
    its roles (None: any), and the ``bos``/``eos`` ids put around every document."""

    tokenizer: Tokenizer
    masked: bool
    markers: tuple[int, int] | None
    template: Any
    roles: tuple[str, ...] | None
    bos: int | None
    eos: int | None
    specials: dict[str, int] = dataclasses.field(default_factory=dict)  # text -> id

    def encode(
        self, inp: Any, docs: list[Any], first: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The chunk ``docs`` of the input ``inp`` (``first`` numbers its first
        document there) as the flow of ids, the count per document and the mask."""
        docs = decode_docs(inp, docs, first, self.template, self.roles)
        mask: np.ndarray | None = None
        if getattr(inp, "chat", False):
            texts = [t for pieces in docs for t, _ in pieces]
            trained = np.fromiter(
                (f for pieces in docs for _, f in pieces), dtype=bool, count=len(texts)
            )
            per_doc = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
            flow, piece_counts = _encode_pieces(self.tokenizer, self.specials, texts)
            doc_of = np.repeat(np.arange(len(docs)), per_doc)
            counts = np.bincount(doc_of, weights=piece_counts, minlength=len(docs))
            counts = counts.astype(np.int64)
            if self.masked:
                mask = np.repeat(trained, piece_counts)
        else:
            flow, counts = _encode(self.tokenizer, docs)
            if self.markers is not None:
                mask = mark_assistant_span(flow, *self.markers, counts=counts)
        return with_ends(flow, counts, mask, self.bos, self.eos)

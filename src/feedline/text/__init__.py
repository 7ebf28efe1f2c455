"""Text corpora: raw text to tokens to ``.nndataset`` to language-model windows.

``read_text_docs`` and ``mark_assistant_span`` are neuralnet.cpp's helpers; the
tokenizers are a byte-level one that needs nothing and HuggingFace ``tokenizers``
BPE (the ``text`` extra); ``build`` writes a corpus to a ``.nndataset``; ``Windows``
reads language-model training windows from one; ``Packed`` packs its documents
into rows (first fit / best fit / concatenate-and-split) with segment ids.
"""

from ._build import BuildSummary, build
from ._chat import CHAT_SPECIALS, ChatTemplate
from ._docs import iter_doc_chunks, mark_assistant_span, read_text_docs
from ._inputs import Input
from ._packed import Packed
from ._tokenizers import (
    BPETokenizer,
    ByteTokenizer,
    Tokenizer,
    load_tokenizer,
    tokenizer_from_vocab,
    write_vocab,
)
from ._windows import Windows, window_record

__all__ = [
    "CHAT_SPECIALS",
    "BPETokenizer",
    "BuildSummary",
    "ByteTokenizer",
    "ChatTemplate",
    "Input",
    "Packed",
    "Tokenizer",
    "Windows",
    "build",
    "iter_doc_chunks",
    "load_tokenizer",
    "mark_assistant_span",
    "read_text_docs",
    "tokenizer_from_vocab",
    "window_record",
    "write_vocab",
]

"""Text corpora: raw text to tokens to ``.nndataset`` to language-model windows.

``read_text_docs`` and ``mark_assistant_span`` are neuralnet.cpp's helpers; the
tokenizers are a byte-level one that needs nothing and HuggingFace ``tokenizers``
BPE (the ``hf`` extra); ``build`` writes a corpus to a ``.nndataset``; ``Windows``
reads language-model training windows from one.
"""

from ._windows import Windows, window_record

__all__ = ["Windows", "window_record"]

"""The bottom of the house: what several layers use, importing nothing above ``errors``.

- ``hashing``: the dataorder crate's 64-bit mixing arithmetic (orders, sources' map
  seeds, the loader's fingerprints);
- ``kernels``: the compiled kernels (numba, the ``fast`` extra), loaded on first use or
  in the background, with the numpy path as the reference;
- ``files``: atomic writes and regular-file checks (every format, the text builder, the
  tokenizers).

Private: nothing here is feedline's public surface.
"""

"""The compiled part of feedline: five optional C extensions in ``feedline._base``:
``_rowcopy`` (the plain path's row copies without the GIL), ``_spans`` (a ragged batch's
spans gathered and padded), ``_windows`` (language-model windows assembled),
``_packing`` (packed rows placed and filled) and ``_ordering`` (the order's shuffles,
mixes and concats of shards).
Everything else is in pyproject.toml.

The extensions are optional: where no C compiler is found the install goes on without
them and feedline copies with numpy (and numba's kernels where installed):
``available()`` of ``rowcopy``, ``spans``, ``windowfill``, ``packing`` and ``ordering`` in
``feedline._base`` says.
"""

from setuptools import Extension, setup


def _extension(name: str, threads: bool = False) -> Extension:
    """``feedline._base.<name>`` from ``src/feedline/_base/<name>.c``, optional (skipped,
    with a warning, where it does not compile); ``threads``: linked with pthreads."""
    pthread = ["-pthread"] if threads else []
    return Extension(
        f"feedline._base.{name}",
        sources=[f"src/feedline/_base/{name}.c"],
        # no fused multiply-add: the float keys are numpy's, bit for bit (_ordering.c)
        extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off", *pthread],
        extra_link_args=pthread,
        optional=True,
    )


setup(
    ext_modules=[
        _extension("_rowcopy", threads=True),  # its helper threads are pthreads
        _extension("_spans"),
        _extension("_windows"),
        _extension("_packing"),
        _extension("_ordering"),
    ]
)

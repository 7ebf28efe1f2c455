"""The compiled part of feedline: four optional C extensions in ``feedline._base``:
``_rowcopy`` (the plain path's row copies without the GIL), ``_spans`` (a ragged batch's
spans gathered and padded), ``_windows`` (language-model windows assembled) and
``_packing`` (packed rows placed and filled).
Everything else is in pyproject.toml.

The extensions are optional: where no C compiler is found the install goes on without
them and feedline copies with numpy (and numba's kernels where installed):
``available()`` of ``rowcopy``, ``spans``, ``windowfill`` and ``packing`` in
``feedline._base`` says.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "feedline._base._rowcopy",
            sources=["src/feedline/_base/_rowcopy.c"],
            extra_compile_args=["-O3", "-std=gnu11", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        ),
        Extension(
            "feedline._base._spans",
            sources=["src/feedline/_base/_spans.c"],
            extra_compile_args=["-O3", "-std=gnu11"],
            optional=True,
        ),
        Extension(
            "feedline._base._windows",
            sources=["src/feedline/_base/_windows.c"],
            extra_compile_args=["-O3", "-std=gnu11"],
            optional=True,
        ),
        Extension(
            "feedline._base._packing",
            sources=["src/feedline/_base/_packing.c"],
            extra_compile_args=["-O3", "-std=gnu11"],
            optional=True,
        ),
    ]
)

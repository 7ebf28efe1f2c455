"""The compiled part of feedline: two optional C extensions, ``feedline._base._rowcopy``
(the plain path's row copies without the GIL) and ``feedline._base._spans`` (a ragged
batch's spans gathered and padded). Everything else is in pyproject.toml.

The extensions are optional: where no C compiler is found the install goes on without
them and feedline copies with numpy (``rowcopy.available()`` and ``spans.available()``
in ``feedline._base`` say which).
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
    ]
)

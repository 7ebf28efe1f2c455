"""The compiled part of feedline: one optional C extension (``feedline._base._rowcopy``,
the plain path's row copies without the GIL). Everything else is in pyproject.toml.

The extension is optional: where no C compiler is found the install goes on without it
and feedline gathers rows with numpy (``feedline._base.rowcopy.available()`` says which).
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
        )
    ]
)

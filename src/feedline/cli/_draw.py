"""What the pictures share: matplotlib on the Agg canvas, imported when drawing."""

from __future__ import annotations

from typing import Any


class PlotInputError(ValueError):
    """An input to a picture that cannot be drawn (a bad table, a bad --names)."""


def _matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("pictures need matplotlib: pip install 'feedline[plot]'") from e
    return Figure, FigureCanvasAgg


def _save(fig: Any, canvas_cls: Any, path: str) -> None:
    canvas_cls(fig)
    fig.savefig(path, dpi=110)


def _human(x: float, _pos: object = None) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"

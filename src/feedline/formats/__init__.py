"""Files: data.nu's ``.ndf``, feedline's ``.flr`` and neuralnet.cpp's ``.nndataset``."""

from . import ndf, recfile

__all__ = ["ndf", "recfile"]

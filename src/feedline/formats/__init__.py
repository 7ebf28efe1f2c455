"""Files: data.nu's ``.ndf``, feedline's ``.flr`` and neuralnet.cpp's ``.nndataset``."""

from . import ndf, nndataset, recfile

__all__ = ["ndf", "nndataset", "recfile"]

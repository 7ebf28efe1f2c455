"""Images: encoded storage, decoding in threads, seeded augmentation (issue 17).

``fl.images.decoded(ds, 224)`` turns a dataset of encoded images (a ``bytes`` field, with
``width`` and ``height`` beside it) into ``3 x 224 x 224`` uint8 examples: a random
resized crop and a flip drawn from each example's generator, decoded at a reduced DCT
scale where the crop allows, in threads of the process. Needs Pillow, and simplejpeg
for fast JPEG: ``pip install 'feedline[vision]'``.
"""

from ._augment import center_box, random_resized_box, resize
from ._decode import decode, kind_of, size_of
from ._folder import FolderSummary, class_names, folder_record, from_folder
from ._pipeline import (
    DEFAULT_THREADS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Augment,
    Normalize,
    decoded,
)
from ._webdataset import from_webdataset

__all__ = [
    "DEFAULT_THREADS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Augment",
    "FolderSummary",
    "Normalize",
    "center_box",
    "class_names",
    "decode",
    "decoded",
    "folder_record",
    "from_folder",
    "from_webdataset",
    "kind_of",
    "random_resized_box",
    "resize",
    "size_of",
]

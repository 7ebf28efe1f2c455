"""Files at URLs: ``fl.remote.open(url, storage_options=..., cache_dir=...)``.

Every reader also takes a URL directly (``fl.recfile.open("s3://bucket/train.flr")``,
default options); ``fl.remote.open`` gives the options: fsspec's ``storage_options``
(credentials, endpoint), the block cache (``block_size``, ``cache_dir`` shared by
processes, ``cache_bytes``) and the retries. Needs ``fsspec`` and the protocol's
package (``s3fs`` for ``s3://``): ``pip install 'feedline[remote]'``.

A handle reads the version of the object it opened: an object replaced under it is a
``FormatError`` naming the URL at the next fetch, never a batch mixing two versions.
A ``cache_dir`` must belong to the user; its files are private (0600) and never
followed through a symlink.
"""

from .formats._remote import RemoteArray, RemoteFile, RemoteOptions, is_url, open

__all__ = ["RemoteArray", "RemoteFile", "RemoteOptions", "is_url", "open"]

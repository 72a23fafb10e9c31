"""The offline runtime (docs/offline-runtime.md).  Its processes share botocore's loaders (local/shared_loaders.py),
installed here, before moto's backends or any client of theirs is built."""

from local import shared_loaders

shared_loaders.install()

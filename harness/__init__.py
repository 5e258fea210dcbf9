"""DAPFAM experiment harness: cross-domain patent prior-art retrieval with BM25, dense and RRF.

The data path, one function per arrow, every box after ``dataset`` an artifact on disk::

    dataset -> views -> units -> index -> unit run -> family run -> fused run -> scores -> report

Importing the package starts nothing: modules that need Java import :mod:`harness.jvm` first.
"""

__version__ = "0.1.0"

"""Launchers: they start a controller, the coordinators and brokers and wire them together, so
they sit above the three servers (a broker never imports its launcher).

`embedded.EmbeddedCluster` runs them in this process (tests, `serve --master none`); the Spark
launcher, which runs brokers as Spark tasks, is `sparklog.spark.cluster`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from .embedded import EmbeddedCluster

__getattr__ = lazy_getattr(__name__, {"EmbeddedCluster": f"{__name__}.embedded"})

__all__ = ["EmbeddedCluster"]

"""Importing sparklog stays cheap: no pyspark until a Spark feature is used."""

from __future__ import annotations

import subprocess
import sys


def test_importing_sparklog_does_not_import_pyspark():
    code = (
        "import sys, sparklog, sparklog.spark, sparklog.spark.options, sparklog.spark.offsets; "
        "assert callable(sparklog.register) and callable(sparklog.start); "
        "print(sorted(m for m in sys.modules if m.startswith('pyspark')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

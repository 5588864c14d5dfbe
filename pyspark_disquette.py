"""The ``disquette`` PySpark data source, found by Spark without registration.

PySpark 4 looks, once per Spark application, for top-level modules named
``pyspark_*`` that define ``DefaultSource`` (a ``DataSource`` subclass) and
registers each under its ``name()``; this module is that entry point for
:class:`disquette.spark.source.DisquetteDataSource`.
"""

from disquette.spark.source import DisquetteDataSource as DefaultSource

__all__ = ["DefaultSource"]

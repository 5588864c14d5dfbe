"""The ``disquette-aof`` PySpark data source (the job history in AOF files),
found by Spark without registration: see pyspark_disquette.py, and
:class:`disquette.spark.aof_source.AOFDataSource`.
"""

from disquette.spark.aof_source import AOFDataSource as DefaultSource

__all__ = ["DefaultSource"]

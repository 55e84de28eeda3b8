"""pyrmq on Spark: the ``pyrmq`` PySpark data source (batch + streaming read, sink) and ``pyrmq export``.

Install the extra first: ``pip install 'pyrmq[spark]'`` (pyspark 4.3 + pyarrow; Java 17+ on the machine).

    from pyrmq.spark_plugin import register, spark_session
    spark = spark_session("local[2]")            # or: register(existing_spark_session)
    df = spark.read.format("pyrmq").option("namesrv", "127.0.0.1:9876").option("topic", "T").load()

Importing this package does not import pyspark (the base install works without it); see docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from .session import INSTALL_HINT, SparkSetupError, check_java, configure_python_workers, require_pyspark, spark_session

__all__ = ["register", "spark_session", "SparkSetupError", "INSTALL_HINT", "check_java", "configure_python_workers"]


def register(spark: Any) -> None:
    """Register the ``pyrmq`` data source with ``spark`` (``spark.dataSource.register``)."""
    require_pyspark()
    configure_python_workers()
    from .source import PyrmqDataSource

    spark.dataSource.register(PyrmqDataSource)

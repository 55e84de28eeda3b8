"""What PySpark needs before it starts: the extra installed, Java 17+, and Python workers on this interpreter.

PySpark launches its Python workers with ``PYSPARK_PYTHON`` (default ``python3`` on the PATH), which in a venv is
often another interpreter without pyrmq or pyarrow: we point it (and the driver's) at ``sys.executable`` unless the
user chose one. The JVM is found through ``JAVA_HOME`` or the PATH, as ``spark-submit`` does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any

INSTALL_HINT = "pip install 'pyrmq[spark]'"
JAVA_HINT = "install Java 17 or newer (e.g. apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME"


class SparkSetupError(RuntimeError):
    """PySpark cannot run here; the message says what is missing and how to get it."""


def require_pyspark() -> None:
    missing = []
    for module in ("pyspark", "pyarrow"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise SparkSetupError(
            f"the Spark plugin needs {' and '.join(missing)}, which {'are' if len(missing) > 1 else 'is'} not installed: "
            f"{INSTALL_HINT}"
        )


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def java_major_version(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def check_java(minimum: int = 17) -> int:
    """The Java major version, or :class:`SparkSetupError` saying what to install."""
    java = java_executable()
    if java is None:
        raise SparkSetupError(f"Java {minimum}+ is missing: PySpark runs on a JVM and no 'java' was found; {JAVA_HINT}")
    major = java_major_version(java)
    if major is None:
        raise SparkSetupError(f"could not tell the version of {java} ('java -version' failed); {JAVA_HINT}")
    if major < minimum:
        raise SparkSetupError(f"PySpark 4 needs Java {minimum}+, but {java} is Java {major}; {JAVA_HINT}")
    return major


def configure_python_workers() -> None:
    """Python workers and driver = this interpreter (the venv's), unless the user chose one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_session(master: str = "local[2]", app_name: str = "pyrmq", conf: dict[str, str] | None = None) -> Any:
    """A SparkSession with the ``pyrmq`` data source registered (created, or the active one)."""
    require_pyspark()
    check_java()
    configure_python_workers()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.pyspark.driver.python", os.environ["PYSPARK_DRIVER_PYTHON"])
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from . import register

    register(spark)
    return spark

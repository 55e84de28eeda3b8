"""Apache RocketMQ's own Java artifacts, fetched from Maven Central by name and run beside pyrmq.

Two classpaths, each resolved once with ``mvn dependency:build-classpath`` into ``$PYRMQ_CACHE_DIR`` (default
``~/.cache/pyrmq``) and reused while its pom is unchanged:

- ``client``: rocketmq-client + rocketmq-tools 4.9.8 (tests/e2e/java/client/pom.xml), the conformance peer and the
  load generator of bench/peers.py;
- ``server``: rocketmq-namesrv + rocketmq-broker 4.9.7 (tests/e2e/java/server/pom.xml), the store-format oracle and
  the performance reference;
- ``client5`` / ``server5``: the same of 5.5.0 (tests/e2e/java/client5, server5): the POP conformance peer and
  reference (tests/e2e/test_java_pop.py, bench/pop_peers.py). 5.5.1 is incomplete on Maven Central.

Java sources of ours are compiled with ``javac`` once per content hash. Used by the test fixtures
(tests/e2e/conftest.py) and by bench/peers.py (which puts this folder on ``sys.path``); it imports nothing of pyrmq.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent

# What JDK 17 needs opened for RocketMQ 4.x (netty and the store's mmap cleaner reach into java.nio / sun.nio.ch).
JAVA_OPENS = [
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
]


class JavaPeerError(RuntimeError):
    """A Java tool is missing or a fetch/compile step failed; the message says which and what to install."""


def cache_dir() -> Path:
    return Path(os.environ.get("PYRMQ_CACHE_DIR", Path.home() / ".cache" / "pyrmq"))


def check_tools() -> None:
    """Raise JavaPeerError naming the Debian package of whichever of java, javac, mvn is missing."""
    missing = [f"{tool} (apt-get install {pkg})" for tool, pkg in
               (("java", "openjdk-17-jdk-headless"), ("javac", "openjdk-17-jdk-headless"), ("mvn", "maven"))
               if shutil.which(tool) is None]
    if missing:
        raise JavaPeerError("the Java peers need " + ", ".join(missing))


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def classpath(kind: str, *, timeout: float = 900) -> str:
    """The resolved classpath of ``kind`` ("client", "server", "client5", "server5"), fetching the jars on first use."""
    check_tools()
    pom = HERE / kind / "pom.xml"
    if not pom.exists():
        raise JavaPeerError(f"{pom}: no such pom (kind must be 'client', 'server', 'client5' or 'server5')")
    out = cache_dir() / "java" / f"{kind}-{_digest(pom)}.classpath"
    if out.exists() and all(Path(j).exists() for j in out.read_text().split(os.pathsep) if j):
        return out.read_text().strip()
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"fetching the RocketMQ Java {kind} jars with mvn into {cache_dir() / 'm2'} (first time only)", flush=True)
    tmp = out.with_suffix(".tmp")
    proc = subprocess.run(
        ["mvn", "-q", "-B", f"-Dmaven.repo.local={cache_dir() / 'm2'}", "-f", str(pom),
         "dependency:build-classpath", f"-Dmdep.outputFile={tmp}"],
        capture_output=True, text=True, timeout=timeout,
    )
    if proc.returncode != 0 or not tmp.exists():
        raise JavaPeerError(f"mvn could not resolve {pom}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    tmp.replace(out)
    return out.read_text().strip()


def compile_sources(src_dir: Path, kind: str = "client", *, timeout: float = 300) -> Path:
    """Compile every ``*.java`` under ``src_dir`` against ``kind``'s classpath; returns the classes directory."""
    sources = sorted(src_dir.rglob("*.java"))
    if not sources:
        raise JavaPeerError(f"{src_dir}: no .java sources")
    cp = classpath(kind)
    classes = cache_dir() / "java" / f"classes-{src_dir.name}-{_digest(*sources)}"
    if (classes / ".done").exists():
        return classes
    classes.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(classes), "-cp", cp, *map(str, sources)],
        capture_output=True, text=True, timeout=timeout,
    )
    if proc.returncode != 0:
        raise JavaPeerError(f"javac failed on {src_dir}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (classes / ".done").write_text("ok")
    return classes


def java_command(kind: str, main_class: str, *args: str, extra_classpath: list[Path] = (), heap: str = "512m",
                 props: dict[str, str] | None = None) -> list[str]:
    """argv running ``main_class`` on ``kind``'s classpath (plus ``extra_classpath``) with JDK 17's opens."""
    cp = os.pathsep.join([*map(str, extra_classpath), classpath(kind)])
    sysprops = [f"-D{k}={v}" for k, v in (props or {}).items()]
    return ["java", f"-Xms{heap}", f"-Xmx{heap}", *JAVA_OPENS, *sysprops, "-cp", cp, main_class, *args]

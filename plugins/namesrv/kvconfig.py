"""The name server's KV config (namespace -> key -> value), persisted like RocketMQ's kvConfig.json (spec 7.1)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger("pyrmq.namesrv.kv")


class KVConfig:
    """``{"configTable": {namespace: {key: value}}}`` on disk, written atomically (tmp + fsync + rename)."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(os.path.expanduser(str(path))) if path else None
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError) as exc:
            log.error("%s: cannot read the KV config (%s); starting with an empty one", self.path, exc)
            return
        table = data.get("configTable", {}) if isinstance(data, dict) else {}
        self.table = {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items() if isinstance(kv, dict)}

    def _persist(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"configTable": self.table}, f, indent="\t", sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        kv = self.table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            if not kv:
                del self.table[namespace]
            self._persist()

    def namespace(self, namespace: str) -> dict[str, str]:
        return dict(self.table.get(namespace, {}))

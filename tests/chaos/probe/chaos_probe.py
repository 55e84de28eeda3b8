"""A broker plugin for the soak scenario (loaded from a bundle the test writes, with this folder on PYTHONPATH):
request code 9101 answers with the sizes of the broker's in-memory tables as JSON.

It walks the broker context two attribute levels deep and reports ``len()`` of every dict, list, set and deque it
finds, keyed by attribute path, so it keeps working whatever the tables are called; plus the number of objects the
garbage collector tracks."""

import collections
import gc
import json

from pyrmq.kernel.hookspecs import hookimpl

PROBE = 9101
_SIZED = (dict, list, set, frozenset, collections.deque)


def table_sizes(root, depth=2):
    out = {}
    seen = set()

    def walk(obj, path, level):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        attrs = getattr(obj, "__dict__", None)
        if attrs is None and hasattr(obj, "__slots__"):
            attrs = {n: getattr(obj, n) for n in obj.__slots__ if hasattr(obj, n)}
        for name, value in (attrs or {}).items():
            p = f"{path}.{name}"
            if isinstance(value, _SIZED):
                out[p] = len(value)
            elif level < depth and hasattr(value, "__dict__") and type(value).__module__.startswith("pyrmq"):
                walk(value, p, level + 1)

    walk(root, "broker", 0)
    return out


@hookimpl
def pyrmq_register_processors(kernel, role):
    from pyrmq.plugins.broker.core import BROKER

    async def probe(connection, request):
        ctx = kernel.state.find(BROKER)
        sizes = table_sizes(ctx) if ctx is not None else {}
        sizes["gc.objects"] = len(gc.get_objects())
        return request.make_response(0, body=json.dumps(sizes).encode())

    return {PROBE: probe}

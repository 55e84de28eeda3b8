"""``rocketmq_rpc_latency`` (RocketMQ 5.x's name, buckets and labels): one row of bucket counts per role, request code
and response code, added to by the remoting connection after each processor and read as a histogram when scraped."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import HistogramMetricFamily, Metric

from pyrmq.remoting.codes import RPC_ONEWAY

#: RocketMQ 5.x's rocketmq_rpc_latency buckets (milliseconds)
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
_RPC_BOUNDS_NS = tuple(ms * 1_000_000 for ms in RPC_LATENCY_BUCKETS_MS)


def _code_name(enum_type: Any, code: int) -> str:
    """5.x's label value for a request or response code: the constant's name in lower case, else the number."""
    try:
        return enum_type(code).name.lower()
    except ValueError:
        return str(code)


class RpcLatency:
    """``rocketmq_rpc_latency`` of one endpoint: per (role labels, request code, response code) a row of bucket counts
    (5.x's bounds, then +Inf) and the sum in nanoseconds, added to by :meth:`recorder`'s function and read as a
    histogram in milliseconds when scraped.

    Plain integer rows instead of prometheus_client's Histogram (which takes a lock per observation). A role's rows
    for its processors' successful answers are made at start, so timing a request allocates nothing."""

    def __init__(self) -> None:
        self.cells: dict[tuple[tuple[str, str, str], str, str], list[int]] = {}

    def cell(self, common: tuple[str, str, str], request_code: int, response_code: int | None) -> list[int]:
        from pyrmq.remoting.codes import RequestCode, ResponseCode

        answer = "oneway" if response_code is None else _code_name(ResponseCode, response_code)
        key = (common, _code_name(RequestCode, request_code), answer)
        found = self.cells.get(key)
        if found is None:
            found = self.cells[key] = [0] * (len(RPC_LATENCY_BUCKETS_MS) + 2)
        return found

    def recorder(self, common: tuple[str, str, str], codes: Any = ()) -> Any:
        """The remoting server's ``request_timer`` for a role labelled ``common`` whose processors answer ``codes``:
        ``record(request, response, elapsed_ns)``, called by the connection after each processor.

        A successful answer (nearly all) costs one dict lookup of a row made here, a comparison (under 1 ms: the
        first bucket, else a bisect) and two integer additions. Oneway requests count under ``oneway``; a request
        whose processor answers later (a long-polling pull) is not timed here: its time is the wait."""
        success = {int(code): self.cell(common, code, 0) for code in codes}
        cell = self.cell
        first = _RPC_BOUNDS_NS[0]

        def other(request: Any, response: Any) -> list[int] | None:
            if response is not None:
                if response.code == 0:  # a code without a processor made at start (a plugin's, added later)
                    row = success[request.code] = cell(common, request.code, 0)
                    return row
                return cell(common, request.code, response.code)
            return cell(common, request.code, None) if request.flag & RPC_ONEWAY else None  # else: answered later

        def record(request: Any, response: Any, elapsed: int) -> None:
            try:
                if response.code:
                    raise KeyError
                row = success[request.code]
            except (AttributeError, KeyError):  # no response (oneway, later) or not a success: a row by code
                row = other(request, response)
                if row is None:
                    return
            row[0 if elapsed <= first else bisect_left(_RPC_BOUNDS_NS, elapsed)] += 1
            row[-1] += elapsed

        return record

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency", "Time to process a request (milliseconds).",
            labels=["cluster", "node_type", "node_id", "protocol_type", "request_code", "response_code"],
        )
        bounds = [str(float(b)) for b in RPC_LATENCY_BUCKETS_MS] + ["+Inf"]
        for (common, request, response), cell in list(self.cells.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(bounds, cell):
                cumulative += n
                buckets.append((bound, cumulative))
            if cumulative:  # rows made at start for codes never requested are left out
                family.add_metric([*common, "remoting", request, response], buckets, cell[-1] / 1e6)
        yield family

"""The transaction plugin's broker.conf keys (RocketMQ 4.9.8's names and defaults)."""

from __future__ import annotations

import attrs

from pyrmq.kernel.settings import at_least, setting


@attrs.frozen
class TransactionSettings:
    """The transaction plugin's broker.conf keys (RocketMQ 4.9.8's names and defaults)."""

    rejectTransactionMessage: bool = setting(False, runtime=True, help="refuse half messages (NO_PERMISSION)")
    transactionCheckInterval: int = setting(60_000, check=at_least(1), help="ms between check passes")
    transactionTimeOut: int = setting(6000, check=at_least(0), help="ms before a half is checked first")
    transactionCheckMax: int = setting(15, check=at_least(1), help="checks before a half is given up")

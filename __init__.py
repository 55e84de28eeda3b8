"""pyrmq: Apache RocketMQ 4.x rebuilt in Python as a plugin-oriented microkernel broker.

The repository root is this package: ``kernel/`` is ``pyrmq.kernel``, ``store/`` is ``pyrmq.store`` and so on.
"""

__version__ = "0.1.0"

"""``python -m pyrmq`` is the ``pyrmq`` command."""

import sys

from pyrmq.kernel.cli import main

sys.exit(main())

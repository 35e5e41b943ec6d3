"""``python -m effir`` is the ``effir`` command."""

import sys

from .cli import main

sys.exit(main())

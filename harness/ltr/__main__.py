"""``python -m harness.ltr identity SCORES_KEY`` (harness.ltr.cli)."""

import sys

from .cli import main

sys.exit(main())

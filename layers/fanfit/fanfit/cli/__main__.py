"""``python -m fanfit.cli``: the ``fanfit`` command."""

import sys

from fanfit.cli import main

sys.exit(main())

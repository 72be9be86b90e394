"""``python -m datasets_hub.cli``: the same as the ``datasets-hub`` console script."""

import sys

from datasets_hub.cli.main import main

sys.exit(main())

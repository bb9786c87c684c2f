"""``python -m memstrata``: the ``memstrata`` command, for an environment whose scripts
folder is not on ``PATH``."""

from memstrata.cli import main

raise SystemExit(main())

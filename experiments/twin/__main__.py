"""``python -m experiments.twin``: see experiments/twin/cli.py."""

from experiments.twin.cli import main

raise SystemExit(main())

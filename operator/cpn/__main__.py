"""``python -m cpn`` is the ``cpn`` command."""

from cpn.cli.main import main

raise SystemExit(main())

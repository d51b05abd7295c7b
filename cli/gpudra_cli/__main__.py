from __future__ import annotations

import sys

from gpudra_cli.main import main

sys.exit(main())

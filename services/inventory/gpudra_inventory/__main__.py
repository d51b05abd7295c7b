"""Run the inventory service: `python -m gpudra_inventory --help`."""

from __future__ import annotations

import asyncio
import sys

from gpudra_inventory.main import main

if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

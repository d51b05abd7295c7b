"""Run the allocator: `python -m gpudra_allocator --help`."""

from __future__ import annotations

import asyncio
import sys

from gpudra_allocator.main import main

if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

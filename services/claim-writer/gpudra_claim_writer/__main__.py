"""Run the claim-writer: `python -m gpudra_claim_writer --help`."""

from __future__ import annotations

import asyncio
import sys

from gpudra_claim_writer.main import main

if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

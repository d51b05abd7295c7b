"""Print `N passed, N failed, N skipped` from the JUnit XML files Pants wrote.

Exits 1 when no test ran at all (a CI run that tests nothing must not look green) or a test failed.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def count(report_dir: Path) -> tuple[int, int, int]:
    passed = failed = skipped = 0
    for xml in sorted(report_dir.rglob("*.xml")):
        root = ET.parse(xml).getroot()
        suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
        for suite in suites:
            for case in suite.iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                elif case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
    return passed, failed, skipped


def main(argv: list[str]) -> int:
    report_dir = Path(argv[1] if len(argv) > 1 else "dist/test/reports")
    passed, failed, skipped = count(report_dir) if report_dir.exists() else (0, 0, 0)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

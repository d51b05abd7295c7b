"""Print `N passed, N failed, N skipped` from the JUnit XML files Pants wrote.

Each failed test is listed first with the last lines of its failure (Pants prints only the first
failing file's output in full, so a second failure would otherwise show no reason). Exits 1 when no test ran at all (a CI run that tests nothing must not look green) or a test failed.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


TAIL_LINES = 25


def count(report_dir: Path, out: list[str] | None = None) -> tuple[int, int, int]:
    """Passed, failed and skipped cases; each failure's name and last lines appended to `out`."""
    passed = failed = skipped = 0
    for xml in sorted(report_dir.rglob("*.xml")):
        root = ET.parse(xml).getroot()
        suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
        for suite in suites:
            for case in suite.iter("testcase"):
                problem = case.find("failure")
                if problem is None:
                    problem = case.find("error")
                if problem is not None:
                    failed += 1
                    if out is not None:
                        name = f"{case.get('classname', '')}::{case.get('name', '')}"
                        text = (problem.text or problem.get("message") or "").rstrip()
                        tail = "\n".join(f"    {line}" for line in text.splitlines()[-TAIL_LINES:])
                        out.append(f"FAILED {name}\n{tail}")
                elif case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
    return passed, failed, skipped


def main(argv: list[str]) -> int:
    report_dir = Path(argv[1] if len(argv) > 1 else "dist/test/reports")
    failures: list[str] = []
    passed, failed, skipped = count(report_dir, failures) if report_dir.exists() else (0, 0, 0)
    for failure in failures:
        print(failure)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

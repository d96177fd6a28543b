"""The README's screenshot of the demo's report (docs/report.png), taken from the code as it is:
runs `bisect demo` in a temporary directory and photographs the top of its report in Debian's
headless Chromium (the one the browser tests use), 1600 px wide.

    python docs/screenshot.py [-o docs/report.png]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1600, 2075  # the verdict, the culprits, the variants and the first charts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path,
                        default=Path(__file__).resolve().parent / "report.png")
    output = parser.parse_args().output.resolve()
    bisect = str(Path(sys.executable).parent / "bisect")
    with tempfile.TemporaryDirectory(prefix="bisect-shot-") as directory:
        done = subprocess.run([bisect, "demo", "--json", "--dir", directory], check=True,
                              capture_output=True, text=True, env={**os.environ})
        report = Path(json.loads(done.stdout)["report"])
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                 args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.goto(report.as_uri(), wait_until="load")
            page.screenshot(path=str(output), clip={"x": 0, "y": 0, "width": WIDTH,
                                                    "height": HEIGHT}, full_page=True)
            browser.close()
    print(f"screenshot: {output}")


if __name__ == "__main__":
    main()

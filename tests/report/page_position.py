"""Where an element of a report lands on the first screen, measured in headless Chromium.

The report has no script and its Content-Security-Policy forbids one, so the test makes a copy of
the page without that policy and with one script of its own appended: on `load` (the figures, data
URIs, decoded and laid out) it writes the top of the first `<pre>` whose text holds a needle, and
the page's height, into the DOM as `data-` attributes of <body>; `--dump-dom` brings them back. The
product never carries the script: only this copy, in the test's tmp directory, does.

Typical use:
    top_px, height_px = element_top(report_html, "reward (train_grpo.py:33)", tmp_path, width=1280)
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from browser import _run

CSP = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>')
PROBE = """<script>
window.addEventListener("load", () => {
  const needle = %s;
  const hit = [...document.querySelectorAll("pre")].find(p => p.textContent.includes(needle));
  document.body.dataset.top = hit ? String(Math.round(hit.getBoundingClientRect().top + window.scrollY)) : "-1";
  document.body.dataset.height = String(document.documentElement.scrollHeight);
});
</script>"""


def element_top(html: Path, needle: str, tmp: Path, width: int = 1280, height: int = 900) -> tuple[int, int]:
    """(top of the first <pre> holding `needle`, the page's height) in CSS pixels at `width`; top -1: none."""
    page = CSP.sub("", html.read_text(encoding="utf-8"), count=1)
    probe = tmp / "probed.html"
    probe.write_text(page.replace("</body>", PROBE % json.dumps(needle) + "\n</body>"), encoding="utf-8")
    dom = _run([f"--window-size={width},{height}", "--virtual-time-budget=5000", "--dump-dom",
                probe.resolve().as_uri()], 60.0).stdout
    top = re.search(r'data-top="(-?\d+)"', dom)
    full = re.search(r'data-height="(\d+)"', dom)
    assert top and full, "the probe script did not run: " + dom[:300]
    return int(top.group(1)), int(full.group(1))

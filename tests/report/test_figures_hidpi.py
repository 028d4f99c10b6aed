"""The page's figures are drawn at twice the size they are shown at (crisp on a 2x screen), as
palette PNGs, so that the page is no bigger than it was with 1x full-colour figures; names from the
run drawn on them stay pixels."""
import base64
import io
import re

from hostile import SCRIPT, write_hostile_run
from PIL import Image

from grpo_doctor.analysis.findings import FindingsFile
from grpo_doctor.analysis.load import load_evidence
from grpo_doctor.report.render import render_html

FIGURE = re.compile(r'<img alt="[^"]*" srcset="data:image/png;base64,([A-Za-z0-9+/=]+) 2x">')


def test_figures_are_2x_palette_pngs_declared_2x_to_the_browser(tmp_path):
    run, log = write_hostile_run(tmp_path)  # phase and metric names carry a <script> payload
    html = render_html(load_evidence([run, log]), FindingsFile(run=[str(run)], findings=[], warnings=[]))
    figures = [Image.open(io.BytesIO(base64.b64decode(data))) for data in FIGURE.findall(html)]
    assert len(figures) == html.count("<img ") >= 3  # every figure is declared 2x (timeline, memory, metrics)
    assert all(image.format == "PNG" and image.mode == "P" for image in figures)  # a 256-colour palette: small
    # The timeline, 11 inches drawn at 80 dpi and saved at 160: shown about 880 CSS px wide.
    assert 1400 < figures[0].width < 2400
    assert "<svg" not in html and not re.search(r"<img[^>]* src=", html)  # no markup drawn, no 1x copy beside
    assert SCRIPT not in html  # the names on the figures are pixels; everywhere else, escaped text

"""A matplotlib figure as a PNG data URI that stays crisp on HiDPI (2x) screens and stays small.

The figure is rendered at `PIXEL_DENSITY` times its drawing DPI and the page shows it at its
drawing size (`<img srcset="URI 2x">`: the browser divides the pixels by the density), so a 2x
screen gets one image pixel per screen pixel. The pixels are then quantised to a 256-colour
palette: a plot has few colours, and the palette PNG at twice the resolution is smaller than the
full-colour PNG at the old one (measured on the recorded runs in tests/data/inject: 216 KB of
figures at 1x became 201 KB at 2x; a plain 2x PNG was 499 KB, an SVG 496 KB and growing with every
data point drawn, which is why the figures are not SVG).

A PNG holds no text, so names from the run drawn on a figure (phases, metrics, hosts) cannot
reach the page's markup whatever they contain.

Typical use:
    uri = figure_uri(fig)     # "data:image/png;base64,...", the figure closed
    # template: <img alt="..." srcset="{{ uri }} 2x">
"""
from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")  # no display: reports are built on head nodes and in CI
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

PIXEL_DENSITY = 2  # image pixels per CSS pixel; the templates' srcset says the same ("2x")
PALETTE_COLOURS = 256


def figure_uri(fig) -> str:
    """The figure as a palette PNG data URI at PIXEL_DENSITY times its DPI; closes the figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=fig.dpi * PIXEL_DENSITY)
    plt.close(fig)
    buf.seek(0)
    with Image.open(buf) as image:
        # Fast octree, not median cut: a tenth of the time (0.07 s against 0.48 s for the four figures of
        # tests/data/inject/oom) and smaller files (172 KB against 221 KB); a plot's few flat colours lose nothing.
        palette = image.convert("RGB").quantize(colors=PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE)
    out = io.BytesIO()
    palette.save(out, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def close_figures() -> None:
    """Closes every figure still open: one whose drawing failed half-way is never handed to figure_uri."""
    plt.close("all")

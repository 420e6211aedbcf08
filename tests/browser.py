"""A page opened in Debian's headless Chromium, driven by Chromium's own command line (no
driver downloaded from outside the package registries): what a reader's browser made of it.

`measure` opens a copy of the page with a small script added at its end. On the window's load
event (every image decoded or failed) the script writes what the browser laid out into the
document's title, and `--dump-dom` prints the document after that: the title is read back. The
title is not laid out, so writing it moves nothing on the page. `screenshot` keeps the first
screen as a PNG. Both run at one viewport, VIEWPORT.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

VIEWPORT = (1280, 800)  # a laptop's browser window, in CSS pixels
BROWSERS = ("chromium", "chromium-browser")  # Debian's name, and Ubuntu's
TIMEOUT_S = 60
MARK = "TATU-LAYOUT:"

# Every image (loaded: complete with a natural width), the document's width, the viewport, and
# the boxes of the elements `selector` picks (the verdict sentences).
SCRIPT = """<script>
window.addEventListener("load", () => {
  const box = (e) => { const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, text: e.textContent}; };
  const layout = {
    images: [...document.images].map((i) => ({src: i.src.slice(0, 40), complete: i.complete,
                                             naturalWidth: i.naturalWidth, right: i.getBoundingClientRect().right})),
    scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth, innerHeight: window.innerHeight,
    lead: [...document.querySelectorAll(%s)].map(box),
  };
  document.title = "%s" + JSON.stringify(layout);
});
</script>"""


@dataclass
class Layout:
    """What the browser laid out (CSS pixels; tops and bottoms from the top of the first screen)."""

    images: list[dict]
    scroll_width: int
    inner_width: int
    inner_height: int
    lead: list[dict]  # the boxes of the elements asked for, in document order


def browser() -> str | None:
    """The Chromium executable, or None when none is installed."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def _run(page: Path, profile: Path, *flags: str) -> str:
    argv = [browser(), "--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={profile}", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}", *flags, page.as_uri()]
    if os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")  # Chromium refuses to start its sandbox as root
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def measure(page: Path, work: Path, selector: str) -> Layout:
    """Open a copy of `page` (in `work`) and return its layout; the page itself is not changed."""
    work.mkdir(parents=True, exist_ok=True)
    probe = work / f"{page.stem}.probe.html"
    text = page.read_text(encoding="utf-8")
    script = SCRIPT % (json.dumps(selector), MARK)
    head, end, tail = text.rpartition("</body>")
    probe.write_text(head + script + end + tail if end else text + script, encoding="utf-8")
    dom = _run(probe, work / "profile", "--dump-dom", "--virtual-time-budget=10000")
    found = re.search(rf"<title>{re.escape(MARK)}(.*?)</title>", dom, re.S)
    if found is None:
        raise RuntimeError(f"no layout in the dumped page (the load event never came?): {dom[:300]!r}")
    data = json.loads(html.unescape(found.group(1)))
    return Layout(images=data["images"], scroll_width=data["scrollWidth"], inner_width=data["innerWidth"],
                  inner_height=data["innerHeight"], lead=data["lead"])


def screenshot(page: Path, out: Path, work: Path) -> Path:
    """The first screen of `page` at VIEWPORT, written to `out`."""
    _run(page, work / "profile", f"--screenshot={out}")
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"no screenshot written to {out}")
    return out


# Each figure's legend as the browser decoded it: the image drawn into a canvas (a data: URI, so its
# pixels can be read back), and for each legend entry (img data-legend, where matplotlib drew it,
# tatu/pages/figures.py) the count of non-white pixels inside its marker's box and whether its
# text's box lies inside the image (a label cut at the image's edge reaches beyond it), and the hue
# its marker was drawn in; and the colours of the image's CI bands (img data-bands, read from the
# drawn artists).
FIGURE_SCRIPT = """<script>
window.addEventListener("load", () => {
  const figures = [...document.querySelectorAll("img[data-legend]")].map((img) => {
    const canvas = document.createElement("canvas");
    canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
    const g = canvas.getContext("2d"); g.drawImage(img, 0, 0);
    const inside = (b) => b[0] >= 0 && b[1] >= 0 && b[2] <= canvas.width && b[3] <= canvas.height;
    // the marker's colour as a hue (degrees): the mean direction over its coloured pixels, each
    // weighted by its chroma (black edges, white ground and grey have none); null when all are grey
    const hue = (g, b) => {
      if (!inside(b)) return null;
      const d = g.getImageData(Math.floor(b[0]), Math.floor(b[1]), Math.max(1, Math.round(b[2] - b[0])),
                               Math.max(1, Math.round(b[3] - b[1]))).data;
      let x = 0, y = 0;
      for (let i = 0; i < d.length; i += 4) {
        const r = d[i], gr = d[i + 1], bl = d[i + 2], hi = Math.max(r, gr, bl), c = hi - Math.min(r, gr, bl);
        if (c < 20) continue;
        const h = hi === r ? ((gr - bl) / c + 6) %% 6 : hi === gr ? (bl - r) / c + 2 : (r - gr) / c + 4;
        x += c * Math.cos(h * Math.PI / 3); y += c * Math.sin(h * Math.PI / 3);
      }
      return x === 0 && y === 0 ? null : (Math.atan2(y, x) * 180 / Math.PI + 360) %% 360;
    };
    const entries = JSON.parse(img.dataset.legend).map((e) => {
      const b = e.marker, w = Math.max(1, Math.round(b[2] - b[0])), h = Math.max(1, Math.round(b[3] - b[1]));
      let ink = 0;
      if (inside(b)) {
        const d = g.getImageData(Math.floor(b[0]), Math.floor(b[1]), w, h).data;
        for (let i = 0; i < d.length; i += 4) if (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235) ink++;
      }
      return {label: e.label, markerInk: ink, markerInside: inside(b), textFits: inside(e.text), hue: hue(g, b)};
    });
    return {name: img.dataset.name, entries: entries, bands: JSON.parse(img.dataset.bands)};
  });
  document.title = "%s" + JSON.stringify(figures);
});
</script>"""


@dataclass
class FigurePixels:
    name: str
    entries: list[dict]  # {label, markerInk, markerInside, textFits, hue (degrees; None: no colour)}
    bands: list[str]


def figure_pixels(page: Path, work: Path) -> list[FigurePixels]:
    """What the browser decoded of every figure's legend and bands (FIGURE_SCRIPT)."""
    work.mkdir(parents=True, exist_ok=True)
    probe = work / f"{page.stem}.figures.html"
    text = page.read_text(encoding="utf-8")
    head, end, tail = text.rpartition("</body>")
    probe.write_text(head + FIGURE_SCRIPT % MARK + end + tail, encoding="utf-8")
    dom = _run(probe, work / "profile", "--dump-dom", "--virtual-time-budget=10000")
    found = re.search(rf"<title>{re.escape(MARK)}(.*?)</title>", dom, re.S)
    if found is None:
        raise RuntimeError(f"no figures in the dumped page (the load event never came?): {dom[:300]!r}")
    return [FigurePixels(f["name"], f["entries"], f["bands"]) for f in json.loads(html.unescape(found.group(1)))]


def full_screenshot(page: Path, out: Path, work: Path, height: int = 6000) -> Path:
    """The page down to `height` CSS pixels (the figures below the first screen too), written to `out`."""
    _run(page, work / "profile", f"--screenshot={out}", f"--window-size={VIEWPORT[0]},{height}")
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"no screenshot written to {out}")
    return out


# The whole page as a reader gets it: its height in CSS pixels at VIEWPORT's width, as laid out
# (folded parts closed), and its text with every <details> opened (folded words are still the
# page's words) and the model's quoted outputs (class "generated") left out.
READING_SCRIPT = """<script>
window.addEventListener("load", () => {
  const height = document.documentElement.scrollHeight;
  document.querySelectorAll("details").forEach((d) => { d.open = true; });
  document.querySelectorAll(".generated").forEach((e) => e.remove());
  document.title = "%s" + JSON.stringify({height: height, text: document.body.innerText});
});
</script>"""


@dataclass
class Reading:
    height: int  # the page's scrollHeight, folded parts closed
    text: str  # document.body.innerText with every <details> open


def reading(page: Path, work: Path) -> Reading:
    """The page's height and text (READING_SCRIPT); the page itself is not changed."""
    work.mkdir(parents=True, exist_ok=True)
    probe = page.parent / f"{page.stem}.reading.html"  # beside the page: its links resolve the same
    text = page.read_text(encoding="utf-8")
    head, end, tail = text.rpartition("</body>")
    probe.write_text(head + READING_SCRIPT % MARK + end + tail, encoding="utf-8")
    try:
        dom = _run(probe, work / "profile", "--dump-dom", "--virtual-time-budget=10000")
    finally:
        probe.unlink()
    found = re.search(rf"<title>{re.escape(MARK)}(.*?)</title>", dom, re.S)
    if found is None:
        raise RuntimeError(f"no reading in the dumped page (the load event never came?): {dom[:300]!r}")
    data = json.loads(html.unescape(found.group(1)))
    return Reading(height=data["height"], text=data["text"])

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

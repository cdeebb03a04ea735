"""What the README tells a new user holds: its colour table is the page's palette (every kind
of render/assets/format.js with the legend swatch the page draws for it, under a colour name
that fits its hue), and its quick start writes into a folder git ignores."""

from __future__ import annotations

import colorsys
import re
from pathlib import Path

from aiflame.model import FrameKind

ROOT = Path(__file__).resolve().parents[2]
FORMAT_JS = ROOT / "src" / "aiflame" / "render" / "assets" / "format.js"
README = ROOT / "README.md"

# Hue bands (degrees) of the colour names the README may use.
HUES = {
    "red": [(345, 360), (0, 15)],
    "orange": [(15, 45)],
    "yellow": [(45, 70)],
    "green": [(70, 160)],
    "aqua": [(160, 200)],
    "blue": [(200, 250)],
    "purple": [(250, 285)],
    "magenta": [(285, 345)],
}


def palette() -> dict[str, tuple[int, int, int]]:
    """Kind slug -> the legend swatch colour, computed as format.js's kindColor(kind, "")."""
    source = FORMAT_JS.read_text()
    # kindColor: base + v * range, v = FNV-1a hash of the name; of "" that is the offset basis.
    v = 0x811C9DC5 / 2**32
    entry = re.compile(
        r'"?([\w-]+)"?: \{ label: "[^"]*", base: \[(\d+), (\d+), (\d+)\], '
        r"range: \[(\d+), (\d+), (\d+)\] \}"
    )
    out = {}
    for m in entry.finditer(source):
        base, spread = [int(x) for x in m.groups()[1:4]], [int(x) for x in m.groups()[4:]]
        out[m.group(1)] = tuple(round(b + v * r) for b, r in zip(base, spread, strict=True))
    assert "kindColor" in source and "0x811c9dc5" in source  # the formula copied above
    return out


def readme_rows() -> dict[str, tuple[str, str]]:
    """Swatch hex -> (kind, colour name) from the README's table."""
    text = README.read_text()
    table = text[text.index("| kind | colour | legend swatch |") :]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        kind, colour, swatch = (c.strip() for c in line.strip("|").split("|"))
        rows[swatch.strip("`")] = (kind, colour)
    return rows


def hue_name(rgb: tuple[int, int, int]) -> str | None:
    h, _, s = colorsys.rgb_to_hls(*(c / 255 for c in rgb))
    if s < 0.1:
        return "grey"
    if s < 0.5:
        return None  # a muted colour: its name is free (grey-blue, beige)
    deg = h * 360
    return next(n for n, bands in HUES.items() if any(a <= deg < b for a, b in bands))


def test_every_kind_of_the_page_is_in_the_readme_with_its_colour():
    colours = palette()
    assert set(colours) == {k.slug for k in FrameKind}  # a colour for every frame kind
    rows = readme_rows()
    swatches = {"#{:02x}{:02x}{:02x}".format(*rgb): slug for slug, rgb in colours.items()}
    assert set(rows) == set(swatches), "README swatches differ from format.js's palette"
    for hex_code, (kind, colour) in rows.items():
        expected = hue_name(colours[swatches[hex_code]])
        if expected is not None:
            assert expected in colour.split(), f"{kind}: {hex_code} is {expected}, not {colour}"


def test_the_hue_names_tell_colours_apart():
    assert hue_name((235, 105, 90)) == "red"
    assert hue_name((145, 228, 150)) == "green"
    assert hue_name((95, 223, 223)) == "aqua"
    assert hue_name((165, 165, 165)) == "grey"


def test_the_quick_start_writes_into_a_folder_git_ignores():
    text = README.read_text()
    start = text.index("```sh", text.index("## Quick start"))
    block = text[start : text.index("```", start + 5)]
    out = re.search(r"-o (\S+)", block).group(1)
    folder = out.split("/")[0]
    assert out.endswith(".html") and "/" in out, out
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert f"/{folder}/" in ignored
    assert f"mkdir -p {folder} " in block  # the folder exists before the page is written

"""The README's speed figures come from one sitting, whose figures live in one file (docs/figures/latest.json):
every ratio the README states is one of that file's, every date it gives is that file's date, its results
table is that file's figures cell for cell, and docs/benchmarks.md's section for that sitting agrees."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
FIGURES = json.loads((ROOT / "docs" / "figures" / "latest.json").read_text())
MODES = ("exact", "24-bit", "8-bit")
MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
RATIO = re.compile(r"(?<![\w.])(\d+\.\d+)(?:-(\d+\.\d+))?x\b")  # 1.51x, or a range 0.89-1.02x


def figure_ratios() -> set[str]:
    found = set()
    for row in FIGURES["files"]:
        for kind in ("decode", "prefill 512"):
            found |= {f"{row[kind][m][1]:.2f}" for m in MODES}
    found |= {f"{v[1]:.2f}" for v in FIGURES["concurrent 32"]["output tok/s"].values()}
    return found


def stated_ratios(text: str) -> list[str]:
    return [r for pair in RATIO.findall(text) for r in pair if r]


def table_rows(text: str, header_start: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with header_start, bold marks removed."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def cell(pair: list[float]) -> str:
    return f"{pair[0]:.1f} ({pair[1]:.2f}x)"


def expected_cells(row: dict) -> list[str]:
    out = []
    for kind in ("decode", "prefill 512"):
        out += [cell(row[kind][m]) for m in MODES] + [f"{row[kind]['llama.cpp']:.1f}"]
    return out


def by_file() -> dict[str, dict]:
    return {row["file"]: row for row in FIGURES["files"]}


def test_every_ratio_in_the_readme_is_one_of_the_sittings():
    stated = stated_ratios(README.read_text())
    assert len(stated) >= 10
    unknown = sorted(set(stated) - figure_ratios())
    assert not unknown, f"the README states ratios that docs/figures/latest.json does not hold: {unknown}"


def test_every_date_in_the_readme_is_the_sittings():
    dates = re.findall(rf"\b\d{{1,2}} (?:{MONTHS}) \d{{4}}\b", README.read_text())
    assert dates
    assert set(dates) == {FIGURES["date"]}, f"the README gives dates other than the sitting's: {sorted(set(dates))}"


def test_the_readme_results_table_is_the_sittings_figures():
    text = README.read_text()
    rows = table_rows(text, "| file | decode: exact |")
    assert len(rows) >= 4
    files = by_file()
    for cells in rows:
        row = files[cells[0]]
        assert [c.replace("**", "") for c in cells[1:]] == expected_cells(row), cells[0]
        bold = [MODES[i % 4] for i, c in enumerate(cells[1:]) if c.startswith("**")]
        assert bold == [row["default_mode"]] * 2, f"{cells[0]}: the bold cells are not its default mode"
    results = text.split("## Results", 1)[1]
    assert FIGURES["date"] in results and "synthetic" in results
    assert all(f"{v[0]:.1f}" in results for v in FIGURES["concurrent 32"]["output tok/s"].values())


def test_benchmarks_section_of_the_sitting_agrees():
    text = BENCHMARKS.read_text()
    heading = f"## {FIGURES['section']}"
    assert FIGURES["date"] in heading and "latest" in heading
    section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    rows = table_rows(section, "| file | decode: exact |")
    assert len(rows) == len(FIGURES["files"])
    for cells, row in zip(rows, FIGURES["files"]):
        assert cells[0].startswith(row["file"])
        plain = [re.sub(r"\*\*", "", c) for c in cells[1:]]
        llamacpp_decode = plain.pop(3).split(" (")[0]  # its share of the floor follows in brackets
        expected = expected_cells(row)
        assert llamacpp_decode == expected.pop(3)
        assert plain == expected, row["file"]
    # Every other section is older: "latest" is said once.
    assert text.count(", latest)") == 1


@pytest.mark.parametrize(
    "text, ratios",
    [("decodes at 1.51x llama.cpp", ["1.51"]), ("0.89-1.02x, on x86_64", ["0.89", "1.02"]), ("10-30%", [])],
)
def test_ratio_pattern(text, ratios):
    assert stated_ratios(text) == ratios

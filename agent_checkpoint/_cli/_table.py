"""Plain-text tables fitted to the terminal: the first column (the key an operator copies) is
never cut or dropped; when the row is too wide, long text columns are shortened first (the
widest first, so that none is cut far shorter than another), then the least useful columns
are left out, and a note on stderr says which. A key too long to leave room for the next
columns (longer than half the width, or one of the few keys much longer than the rest) is
printed whole on a line of its own, its row below it.

Cells are printed as they are, never read as markup, and the work is proportional to the
rows shown (one pass to measure, one to print).
"""

from __future__ import annotations

import os
import shutil
import sys
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size

__all__ = ["Column", "print_table", "terminal_width"]

GAP = "  "


@dataclass(frozen=True)
class Column:
    title: str
    right: bool = False
    """Right-aligned (numbers)."""
    shrink_to: int | None = None
    """Text that may be cut with "…" down to this many cells, once every column with a higher
    ``drop`` than its own is left out."""
    drop: int = 0
    """Order in which columns are left out when the row is still too wide: highest first;
    0 never (the key)."""


def terminal_width() -> int | None:
    """Columns of the terminal stdout is, ``$COLUMNS`` if set; ``None`` when piped (no limit)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def _width(text: str) -> int:
    """Terminal cells ``text`` takes (wide characters take two); the common ASCII case fast."""
    return len(text) if text.isascii() else cell_len(text)


def _cut(text: str, width: int) -> str:
    if _width(text) <= width:
        return text
    room = max(width - 1, 0)
    return (text[:room] if text.isascii() else set_cell_size(text, room)) + "…"


def layout(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None
) -> tuple[list[int], list[int]]:
    """The indexes of the columns shown and their widths. A key longer than half the width
    gets a line of its own (beside it, the other columns would have no room: with LangGraph's
    keys of ~100 characters every row would lose them all). The key column is as wide as the
    widest of the other keys that leaves room for the most other columns (with the fewest keys
    on lines of their own, then the fewest cells cut), as long as at most a
    quarter of the rows (or one), those over half the width included, have a longer key, which
    also gets a line of its own; when more than that are over half the width, any key may. The
    other columns are fitted by ``_fit``."""
    natural = [
        max([_width(c.title), *(_width(row[i]) for row in rows)]) for i, c in enumerate(columns)
    ]
    if width is None:
        return list(range(len(columns))), natural
    title = _width(columns[0].title)
    cap = max(title, width // 2)
    keys = sorted(k for row in rows if (k := _width(row[0])) <= cap)
    quarter, over = max(1, len(rows) // 4), len(rows) - len(keys)
    # most keys on lines of their own already: any may be; else a quarter, those over included
    may_wrap = len(keys) if over > quarter else quarter - over
    best: tuple[tuple[int, int, int, int], list[int], list[int]] | None = None
    for key_width in sorted({title, *keys}):
        wrapped = len(keys) - bisect_right(keys, key_width)
        if wrapped > may_wrap:
            continue
        shown, widths = _fit(columns, [key_width, *natural[1:]], width)
        cut = sum(natural[i] - widths[i] for i in shown[1:])
        score = (len(shown), -wrapped, -cut, key_width)  # a line is worth more than a cut
        if best is None or score > best[0]:
            best = (score, shown, widths)
    assert best is not None  # the widest key under the cap wraps no other
    return best[1], best[2]


def _fit(columns: Sequence[Column], widths: list[int], width: int) -> tuple[list[int], list[int]]:
    """Leave out and shorten columns until the row fits: columns that matter less than any
    shortenable one go first, then text is shortened, then the rest go, least useful first."""
    shown = list(range(len(columns)))

    def total() -> int:
        return sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1)

    order = sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: -columns[i].drop)
    shrinkable = [i for i, c in enumerate(columns) if c.shrink_to is not None]
    last_before_shrink = max((columns[i].drop for i in shrinkable), default=0)
    for i in order:
        if total() <= width:
            break
        if columns[i].drop <= last_before_shrink:
            _shrink([j for j in shrinkable if j in shown], columns, widths, total() - width)
            last_before_shrink = 0
            if total() <= width:
                break
        shown.remove(i)
    return shown, widths


def _shrink(shrinkable: list[int], columns: Sequence[Column], widths: list[int], over: int) -> None:
    """Take up to ``over`` cells from the ``shrinkable`` columns, a cell at a time from the
    widest, none below its ``shrink_to`` (or its title)."""
    floors = {j: max(columns[j].shrink_to or 0, _width(columns[j].title)) for j in shrinkable}
    while over > 0:
        room = [j for j in shrinkable if widths[j] > floors[j]]
        if not room:
            return
        widest = max(room, key=lambda j: widths[j])
        widths[widest] -= 1
        over -= 1


def print_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None = None
) -> None:
    """Print ``rows`` under ``columns`` on stdout within ``width`` cells (``None``: the
    terminal's, unlimited when piped)."""
    width = terminal_width() if width is None else width
    shown, widths = layout(columns, rows, width)
    last = shown[-1]

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i in shown:
            text = cells[i] if i == 0 else _cut(cells[i], widths[i])
            pad = " " * (widths[i] - _width(text))
            if columns[i].right:
                parts.append(pad + text)
            else:
                parts.append(text if i == last else text + pad)
        return GAP.join(parts)

    out = [line([c.title for c in columns])]
    for row in rows:
        if _width(row[0]) > widths[0]:  # whole, on its own line
            out += [row[0], line(["", *row[1:]])]
        else:
            out.append(line(row))
    sys.stdout.write("\n".join(out) + "\n")
    hidden = [columns[i].title for i in range(len(columns)) if i not in shown]
    if hidden and sys.stderr.isatty():
        print(f"({', '.join(hidden)} left out to fit {width} columns; --json has every field)",
              file=sys.stderr)  # fmt: skip

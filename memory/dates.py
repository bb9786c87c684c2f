"""How a day or a month is written into text a model (or a person) reads: one module.

Every date the library writes into a prompt or a stored line goes through here: packed
memory lines and their resolved relative times (``packers.lines``, ``query.annotate_times``),
the normaliser's restatements (``timeparse``), the extractor's date lines and the facts it
grounds (``facts``), and the dates ``QA`` writes into answers. A *date style* names how:

* ``"iso"`` (the default): ``2023-05-08`` for a day, ``2023-05`` for a month. It reads the
  same in any language and is what the tools return.
* ``"long"``: ``8 May 2023`` and ``May 2023`` (``"%-d %B %Y"``), the style of LoCoMo's answer
  key; its benchmark selects it so its prompts keep the key's wording.

Years ("2022") and seasons ("the summer of 2022") read the same in every style.
:func:`parse_day` reads a day back in any style.

Example:
    >>> render_day(date(2023, 5, 8))
    '2023-05-08'
    >>> render_day(date(2023, 5, 8), "long")
    '8 May 2023'
    >>> render_month(2022, 12, "long")
    'December 2022'
"""

from __future__ import annotations

import calendar
from datetime import date, datetime
from typing import Literal, get_args

DateStyle = Literal["iso", "long"]
DATE_STYLES: tuple[DateStyle, ...] = get_args(DateStyle)
DEFAULT_DATE_STYLE: DateStyle = "iso"
_PARSE_FORMATS = ("%Y-%m-%d", "%d %B %Y")  # iso, long


def check_style(style: str) -> DateStyle:
    """``style`` if it names a date style.

    Raises:
        ValueError: it does not (names the styles there are).
    """
    if style not in DATE_STYLES:
        raise ValueError(f"unknown date style {style!r}; choose from {', '.join(DATE_STYLES)}")
    return style


def render_day(when: date, style: DateStyle = DEFAULT_DATE_STYLE) -> str:
    """A day in ``style``: ``2023-05-08`` (iso) or ``8 May 2023`` (long)."""
    if check_style(style) == "long":
        return f"{when.day} {calendar.month_name[when.month]} {when.year}"
    return f"{when.year:04d}-{when.month:02d}-{when.day:02d}"


def render_month(year: int, month: int, style: DateStyle = DEFAULT_DATE_STYLE) -> str:
    """A month in ``style``: ``2023-05`` (iso) or ``May 2023`` (long)."""
    if check_style(style) == "long":
        return f"{calendar.month_name[month]} {year}"
    return f"{year:04d}-{month:02d}"


def parse_day(text: str) -> datetime | None:
    """The day ``text`` writes in any style (a naive midnight), or None if it is no day."""
    for fmt in _PARSE_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None

"""LaMP profile dates: the accepted formats and their parser (docs/methods.md §1).

Accepted: a year, year-month, ISO 8601 (with or without time and zone), epoch seconds, ``YYYYMMDD``, the slash, dot
and month-name forms in ``_FORMATS``, Twitter's ``Mon Apr 06 22:19:45 PDT 2009`` and RFC 2822. Anything else is
unparseable (``data.undated`` decides what the loader does with it).
"""

from __future__ import annotations

import email.utils
import re
from datetime import UTC, datetime
from functools import lru_cache

_YEAR = re.compile(r"^(\d{4})$")
_YEAR_MONTH = re.compile(r"^(\d{4})[-/](\d{1,2})$")
_TZ_WORD = re.compile(r"\s[A-Z]{3,4}(?=\s\d{4}$)")
_FORMATS = (
    "%Y/%m/%d",
    "%Y/%m/%d %H:%M:%S",
    "%m/%d/%Y",
    "%m/%d/%Y %H:%M:%S",
    "%d.%m.%Y",
    "%m %d, %Y",  # Amazon review times ("06 3, 2011")
    "%B %d, %Y",
    "%b %d, %Y",
    "%d %B %Y",
    "%d %b %Y",
    "%a %b %d %H:%M:%S %z %Y",
    "%a %b %d %H:%M:%S %Y",
    "%Y%m%d",
)


def _naive_utc(value: datetime) -> datetime:
    """Drop the time zone after converting to UTC (naive datetimes are kept as they are)."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


@lru_cache(maxsize=1 << 16)  # a user's profile is listed again in each of their samples
def parse_date(value: str | int | float | None) -> datetime | None:
    """Parse a LaMP date ("YYYY", "YYYY-MM", ISO, Twitter/RFC-2822 style, epoch seconds); None if unparseable."""
    if value is None or isinstance(value, bool):
        return None
    text = str(int(value)) if isinstance(value, int | float) else str(value).strip()
    if not text:
        return None
    if m := _YEAR.match(text):
        return datetime(int(m.group(1)), 1, 1)
    if m := _YEAR_MONTH.match(text):
        month = int(m.group(2))
        return datetime(int(m.group(1)), month, 1) if 1 <= month <= 12 else None
    if text.isdigit() and len(text) >= 9:
        try:
            return datetime.fromtimestamp(int(text), UTC).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):
            return None
    try:
        return _naive_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    candidate = _TZ_WORD.sub("", text)  # "Mon Apr 06 22:19:45 PDT 2009" -> without the zone word
    for fmt in _FORMATS:
        try:
            return _naive_utc(datetime.strptime(candidate, fmt))
        except ValueError:
            continue
    try:
        return _naive_utc(email.utils.parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError):
        return None

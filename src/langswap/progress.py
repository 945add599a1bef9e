"""Progress bars: one tqdm bar per long loop, shown only when the caller asks for progress."""

from __future__ import annotations


def bar(progress: bool, total: int, desc: str, unit: str = "seq"):
    """A tqdm bar of `total` `unit`s, or None when `progress` is off (callers update it only when it is there)."""
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit)

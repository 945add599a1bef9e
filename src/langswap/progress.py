"""Progress bars: one tqdm bar per long loop, shown only when the caller asks for progress."""

from __future__ import annotations


def bar(progress: bool, total: int | None, desc: str, unit: str = "seq", scale: bool = False):
    """A tqdm bar of `total` `unit`s, or None when `progress` is off (callers update it only when it is there).
    `scale`: counts shown with k/M/G prefixes (for bytes)."""
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=scale)

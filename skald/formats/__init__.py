"""One date format everywhere (issue 35): 24-hour, UTC, with seconds (``2026-12-07 11:46:39 UTC``).

Django localises dates by the active language's format module; ``FORMAT_MODULE_PATH`` points it here,
so every admin list, detail page and ``|date`` without an explicit format reads the same way.
"""

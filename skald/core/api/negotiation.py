"""Content negotiation that ignores a ``format`` query parameter it cannot honour.

DRF answers ``?format=<anything no renderer has>`` with 404: a documented JSON route then "does not
exist" because of an unrelated query parameter. Skald's API renders JSON only, so an unknown format
is ignored and the usual negotiation (the Accept header) decides; a format a renderer has (the
schema view's ``?format=json``) still selects it.
"""

from __future__ import annotations

from collections.abc import Iterable

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer


class IgnoreUnknownFormat(DefaultContentNegotiation):
    def filter_renderers(self, renderers: Iterable[BaseRenderer], format: str) -> list[BaseRenderer]:
        """The renderers of ``format``; none has it: all of them (DRF raises Http404 here)."""
        offered = list(renderers)
        known = [renderer for renderer in offered if renderer.format == format]
        return known or offered

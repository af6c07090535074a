"""``/api/proposals/``: the review queue and disposal."""

from __future__ import annotations

from django.urls import path

from proposals import api

urlpatterns = [
    path("", api.ProposalList.as_view(), name="proposals"),
    path("<int:proposal_id>/", api.ProposalDetail.as_view(), name="proposal"),
    path("<int:proposal_id>/accept", api.ProposalAccept.as_view(), name="proposal-accept"),
    path("<int:proposal_id>/reject", api.ProposalReject.as_view(), name="proposal-reject"),
]

"""``/api/policy/tripwires/patterns/`` and ``/api/policy/tripwires/allow/``: the organisation's
credential patterns and the allow-list over REST (issue 32), admins only, with ETag / If-Match.
Views parse and delegate to :mod:`approvals.tripwires.conditional` (the admin's services inside).
"""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.models import TripwireAllowEntry, TripwirePattern
from approvals.policy_api_schema import ETAG_HEADER, IF_MATCH, admin_errors
from approvals.tripwires import conditional
from audit.actors import Actor
from loop.tripwires import MAX_PATTERN_LENGTH
from skald.core.api.conditional import if_match_require
from skald.core.api.permissions import AdminRequired, caller
from skald.core.api.strict_input import NON_BLANK_TEXT, StrictInput

REGEX_HELP = ("A Python regular expression (ASCII classes). One the detector would refuse (invalid, unbounded "
              "backtracking, matching the empty text) is 400 with `fields.regex` saying why.")


def _regex() -> serializers.CharField:
    return serializers.CharField(max_length=MAX_PATTERN_LENGTH, trim_whitespace=False, help_text=REGEX_HELP,
                                 validators=[RegexValidator(NON_BLANK_TEXT, message="A pattern is required.")])


class PatternInput(StrictInput):
    name = serializers.SlugField(max_length=60, help_text="Refusals name the kind org:<name>.")
    regex = _regex()
    keywords = serializers.RegexField(r"^[a-z0-9,._:/@+= -]*$", max_length=200, required=False, default="",
                                      help_text="Comma-separated lowercase words the text must contain for the "
                                                "pattern to run; empty: every text.")
    enabled = serializers.BooleanField(required=False, default=True)
    note = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")


class AllowInput(StrictInput):
    regex = _regex()
    reason = serializers.CharField(max_length=300, help_text="Why this is not a credential (kept in the audit log).")
    enabled = serializers.BooleanField(required=False, default=True)


class PolicyTripwirePattern(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    regex = serializers.CharField()
    keywords = serializers.CharField(allow_blank=True)
    enabled = serializers.BooleanField()
    note = serializers.CharField(allow_blank=True)


class PolicyTripwireAllow(serializers.Serializer):
    id = serializers.IntegerField()
    regex = serializers.CharField()
    reason = serializers.CharField()
    enabled = serializers.BooleanField()


class TaggedPattern(PolicyTripwirePattern):
    etag = serializers.CharField(help_text="The ETag header's value.")


class TaggedAllow(PolicyTripwireAllow):
    etag = serializers.CharField(help_text="The ETag header's value.")


class DeletedPattern(PolicyTripwirePattern):
    deleted = serializers.BooleanField()


class DeletedAllow(PolicyTripwireAllow):
    deleted = serializers.BooleanField()


def _body(row: TripwirePattern | TripwireAllowEntry) -> dict[str, Any]:
    return {**conditional.tripwire_view(row), "etag": conditional.tripwire_etag(row)}


def _tagged(row: TripwirePattern | TripwireAllowEntry, status_code: int = status.HTTP_200_OK) -> Response:
    body = _body(row)
    return Response(body, status=status_code, headers={"ETag": body["etag"]})


def _parsed(serializer: type[StrictInput], request: Request, *, partial: bool = False) -> dict[str, Any]:
    body = serializer(data=request.data, partial=partial)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


def _if_match(request: Request) -> tuple[str, ...]:
    return if_match_require(request.headers.get("If-Match"))


class PatternList(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_tripwire_pattern_list", summary="List the organisation's tripwire patterns",
                   responses={200: TaggedPattern(many=True), **admin_errors()})
    def get(self, request: Request) -> Response:
        return Response([_body(row) for row in TripwirePattern.objects.order_by("name")])

    @extend_schema(operation_id="policy_tripwire_pattern_create", summary="Create a tripwire pattern",
                   request=PatternInput, parameters=[ETAG_HEADER],
                   responses={201: TaggedPattern, **admin_errors(_400=("invalid", "tripwire_pattern_invalid"),
                                                                 _409="tripwire_pattern_name_taken")})
    def post(self, request: Request) -> Response:
        row = conditional.tripwire_pattern_create(actor=Actor.user(caller(request)),
                                                  fields=_parsed(PatternInput, request))
        return _tagged(row, status.HTTP_201_CREATED)


class PatternDetail(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_tripwire_pattern_get", summary="Read a tripwire pattern and its ETag",
                   parameters=[ETAG_HEADER],
                   responses={200: TaggedPattern, **admin_errors(_404="tripwire_pattern_not_found")})
    def get(self, request: Request, pattern_id: int) -> Response:
        return _tagged(conditional.tripwire_get(TripwirePattern, pattern_id))

    @extend_schema(operation_id="policy_tripwire_pattern_update", summary="Change a tripwire pattern (If-Match)",
                   request=PatternInput(partial=True), parameters=[IF_MATCH, ETAG_HEADER],
                   responses={200: TaggedPattern, **admin_errors(
                       _400=("invalid", "tripwire_pattern_invalid"), _404="tripwire_pattern_not_found",
                       _409="tripwire_pattern_name_taken", conditional=True)})
    def patch(self, request: Request, pattern_id: int) -> Response:
        fields = _parsed(PatternInput, request, partial=True)
        row = conditional.tripwire_update(actor=Actor.user(caller(request)), model=TripwirePattern, row_id=pattern_id,
                                          if_match=_if_match(request), fields=fields)
        return _tagged(row)

    @extend_schema(operation_id="policy_tripwire_pattern_delete", summary="Delete a tripwire pattern (If-Match)",
                   parameters=[IF_MATCH],
                   responses={200: DeletedPattern, **admin_errors(_404="tripwire_pattern_not_found",
                                                                  conditional=True)})
    def delete(self, request: Request, pattern_id: int) -> Response:
        was = conditional.tripwire_remove(actor=Actor.user(caller(request)), model=TripwirePattern,
                                          row_id=pattern_id, if_match=_if_match(request))
        return Response({**was, "deleted": True})


class AllowList(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_tripwire_allow_list", summary="List the tripwire allow-list",
                   responses={200: TaggedAllow(many=True), **admin_errors()})
    def get(self, request: Request) -> Response:
        return Response([_body(row) for row in TripwireAllowEntry.objects.order_by("id")])

    @extend_schema(operation_id="policy_tripwire_allow_create", summary="Add a tripwire allow-list entry",
                   request=AllowInput, parameters=[ETAG_HEADER],
                   responses={201: TaggedAllow, **admin_errors(_400=("invalid", "tripwire_allow_invalid"))})
    def post(self, request: Request) -> Response:
        row = conditional.tripwire_allow_create(actor=Actor.user(caller(request)), fields=_parsed(AllowInput, request))
        return _tagged(row, status.HTTP_201_CREATED)


class AllowDetail(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_tripwire_allow_get", summary="Read an allow-list entry and its ETag",
                   parameters=[ETAG_HEADER],
                   responses={200: TaggedAllow, **admin_errors(_404="tripwire_allow_not_found")})
    def get(self, request: Request, entry_id: int) -> Response:
        return _tagged(conditional.tripwire_get(TripwireAllowEntry, entry_id))

    @extend_schema(operation_id="policy_tripwire_allow_update", summary="Change an allow-list entry (If-Match)",
                   request=AllowInput(partial=True), parameters=[IF_MATCH, ETAG_HEADER],
                   responses={200: TaggedAllow, **admin_errors(
                       _400=("invalid", "tripwire_allow_invalid"), _404="tripwire_allow_not_found",
                       conditional=True)})
    def patch(self, request: Request, entry_id: int) -> Response:
        fields = _parsed(AllowInput, request, partial=True)
        row = conditional.tripwire_update(actor=Actor.user(caller(request)), model=TripwireAllowEntry,
                                          row_id=entry_id, if_match=_if_match(request), fields=fields)
        return _tagged(row)

    @extend_schema(operation_id="policy_tripwire_allow_delete", summary="Delete an allow-list entry (If-Match)",
                   parameters=[IF_MATCH],
                   responses={200: DeletedAllow, **admin_errors(_404="tripwire_allow_not_found", conditional=True)})
    def delete(self, request: Request, entry_id: int) -> Response:
        was = conditional.tripwire_remove(actor=Actor.user(caller(request)), model=TripwireAllowEntry,
                                          row_id=entry_id, if_match=_if_match(request))
        return Response({**was, "deleted": True})

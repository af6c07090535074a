"""REST for conversations: views parse and delegate to services and selectors."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from loop.models import Exchange, Session, SessionEvent
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import caller, roles
from skald.core.api.schema import MAX_ID
from skald.core.api.strict_input import NON_BLANK_TEXT_BOUNDED, StrictInput
from skald.core.errors import Forbidden, SkaldError
from skald.sessions import selectors, services
from skald.sessions.access import SESSION_ROLES, SessionAction, may_create_session, session_for, sessions_readable_by

ANY_ROLE = roles(*SESSION_ROLES)
READ, WRITE, STOP = SessionAction.READ, SessionAction.WRITE, SessionAction.STOP
MAX_EVENTS_PAGE = 500


class SessionSerializer(serializers.ModelSerializer):
    """A session as :func:`skald.sessions.selectors.sessions_with_facts` reads it."""

    awaiting_approval = serializers.BooleanField(read_only=True,
                                                 help_text="A call of it waits for an approver.")
    case = serializers.IntegerField(source="case_id", read_only=True, allow_null=True,
                                    help_text="The case its tools read (read_logs); null when it has none.")

    class Meta:
        model = Session
        fields = ["id", "agent", "source", "title", "owner", "last_seq", "exchange_count", "created_at",
                  "awaiting_approval", "case"]


class SessionCreateSerializer(StrictInput):
    agent = serializers.SlugField(required=False, max_length=64)
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    case = serializers.IntegerField(
        required=False, min_value=1, help_text="Attach the session to this case (operators): its tools read its logs.")


class ExchangeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Exchange
        fields = ["id", "session", "number", "request_key", "status", "outcome", "turns", "input_tokens",
                  "output_tokens", "error_code", "receipt", "created_at", "settled_at", "cancel_requested_at"]


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = SessionEvent
        fields = ["seq", "kind", "narrative", "exchange", "payload", "created_at"]


class EventPageQuery(serializers.Serializer):
    after = serializers.IntegerField(required=False, default=0, min_value=0, max_value=MAX_ID,
                                     help_text="Last sequence seen (0 = from the start).")
    limit = serializers.IntegerField(required=False, default=100, min_value=0, max_value=MAX_ID,
                                     help_text=f"Page size (default 100, at most {MAX_EVENTS_PAGE}).")


class EventPageSerializer(serializers.Serializer):
    results = EventSerializer(many=True)
    last_seq = serializers.IntegerField(help_text="Pass it as `after` for the next page.")
    more = serializers.BooleanField(help_text="More events follow `last_seq`.")


class NothingToStopSerializer(serializers.Serializer):
    stopped = serializers.IntegerField(allow_null=True, help_text="Always null: no exchange was running.")


@extend_schema_field({"type": "string", "maxLength": 65536, "pattern": NON_BLANK_TEXT_BOUNDED})
class MessageContentField(serializers.CharField):
    """The schema says what the service refuses (blank content): at least one non-space character.

    An empty string passes the field so the service refuses it as ``message_invalid`` (``allow_blank``
    would put a blank alternative in the schema, which the server refuses).
    """

    def run_validation(self, data: Any = serializers.empty) -> Any:
        return "" if data == "" else super().run_validation(data)


class MessageSerializer(StrictInput):
    # Blank content is the service's refusal (``message_invalid``), not a generic field error.
    content = MessageContentField(max_length=65536, trim_whitespace=False)


class SessionListCreate(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(operation_id="session_list", summary="List the sessions you may see (newest 200)",
                   responses={200: SessionSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        sessions = selectors.sessions_with_facts(sessions_readable_by(caller(request)))[:200]
        return Response(SessionSerializer(sessions, many=True).data)

    @extend_schema(operation_id="session_create", summary="Open a session with an agent",
                   request=SessionCreateSerializer,
                   responses={201: SessionSerializer, **error_responses(
                       _400="invalid", _404=("agent_unknown", "case_unknown"),
                       _403=("case_forbidden", "session_create_forbidden"))})
    def post(self, request: Request) -> Response:
        if not may_create_session(caller(request)):
            raise Forbidden("Auditors read sessions; they do not hold their own.", code="session_create_forbidden")
        body = SessionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        session = services.session_create(user=caller(request), agent=body.validated_data.get("agent"),
                                          title=body.validated_data.get("title", ""),
                                          case_id=body.validated_data.get("case"))
        return Response(SessionSerializer(selectors.session_with_facts(session)).data, status=status.HTTP_201_CREATED)


class SessionDetail(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(operation_id="session_get", summary="Get a session",
                   responses={200: SessionSerializer, **error_responses(_404="session_not_found")})
    def get(self, request: Request, session_id: int) -> Response:
        session = session_for(user=caller(request), session_id=session_id, action=READ)
        return Response(SessionSerializer(selectors.session_with_facts(session)).data)


class SessionMessages(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(
        operation_id="session_message_send",
        summary="Send a message: admits one exchange (202), driven on a worker",
        request=MessageSerializer,
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
                                     description="The exchange's request key: a retry returns the same exchange.")],
        responses={202: ExchangeSerializer, **error_responses(
            _400=("invalid", "message_invalid", "message_too_large", "credential_tripwire",
                  "idempotency_key_invalid"),
            _403="session_write_forbidden", _404="session_not_found",
            _409=("session_busy", "session_awaiting_human"))},
    )
    def post(self, request: Request, session_id: int) -> Response:
        session = session_for(user=caller(request), session_id=session_id, action=WRITE)
        body = MessageSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = request.headers.get("Idempotency-Key") or None
        if key is not None and not (1 <= len(key) <= 128):
            raise SkaldError("Idempotency-Key must be 1-128 characters", code="idempotency_key_invalid")
        exchange, _replayed = services.session_message_submit(
            user=caller(request), session=session, content=body.validated_data["content"], request_key=key
        )
        exchange.refresh_from_db()
        return Response(ExchangeSerializer(exchange).data, status=status.HTTP_202_ACCEPTED)


class ExchangeDetail(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(operation_id="session_exchange_get", summary="Get an exchange: its status, outcome and receipt",
                   responses={200: ExchangeSerializer,
                              **error_responses(_404=("session_not_found", "exchange_not_found"))})
    def get(self, request: Request, session_id: int, exchange_id: int) -> Response:
        session = session_for(user=caller(request), session_id=session_id, action=READ)
        return Response(ExchangeSerializer(selectors.exchange_get(session=session, exchange_id=exchange_id)).data)


class SessionEvents(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(
        operation_id="session_events_list",
        summary="Page through a session's stored events",
        parameters=[EventPageQuery],
        responses={200: EventPageSerializer, **error_responses(_400="invalid", _404="session_not_found")},
    )
    def get(self, request: Request, session_id: int) -> Response:
        session = session_for(user=caller(request), session_id=session_id, action=READ)
        return Response(events_page(request, session))


class SessionStop(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(operation_id="session_stop", summary="Stop the running exchange, if any",
                   request=None, responses={202: ExchangeSerializer, 200: NothingToStopSerializer,
                                            **error_responses(_403="session_stop_forbidden",
                                                              _404="session_not_found")})
    def post(self, request: Request, session_id: int) -> Response:
        session = session_for(user=caller(request), session_id=session_id, action=STOP)
        exchange = services.session_stop(user=caller(request), session=session)
        if exchange is None:
            return Response({"stopped": None}, status=status.HTTP_200_OK)
        return Response(ExchangeSerializer(exchange).data, status=status.HTTP_202_ACCEPTED)


def events_page(request: Request, session: Session) -> dict[str, Any]:
    """One page of a session's events after ``?after=``: what the session and run routes answer."""
    query = EventPageQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    after, limit = query.validated_data["after"], query.validated_data["limit"]
    events = selectors.events_after(session=session, after=after, limit=min(max(limit, 1), MAX_EVENTS_PAGE))
    return dict(EventPageSerializer({
        "results": events,
        "last_seq": events[-1].seq if events else after,
        "more": bool(events) and events[-1].seq < session.last_seq,
    }).data)

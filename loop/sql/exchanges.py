"""Sessions, exchanges and frames: admission, claims, stop requests, settlement, the scratchpad."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import F, Field, Q

from loop.models import (
    Exchange,
    ExchangeStatus,
    Frame,
    FrameStatus,
    Outcome,
    ScratchpadEntry,
    Session,
    ToolCall,
    ToolCallStatus,
)
from loop.sql import Cursor, for_update, json_param, load_json, when
from loop.sql import cursor as open_cursor
from loop.sql.batch import Write

ACTIVE_STATUSES = (ExchangeStatus.OPEN, ExchangeStatus.PARKED)


# --- sessions -------------------------------------------------------------------------------------


def create_session(*, owner_id: int, agent: str, source: str, title: str, now: datetime) -> Session:
    return Session.objects.create(owner_id=owner_id, agent=agent, source=source, title=title[:200], created_at=now)


def lock_session(session_id: int) -> Session:
    """The session row, locked: admissions to one session queue behind each other. Only ``agent``,
    ``last_seq`` and ``exchange_count`` are loaded (hand-written: the admission's hot path)."""
    with open_cursor() as cursor:
        cursor.execute(f"SELECT id, agent, last_seq, exchange_count FROM loop_session WHERE id = %s{for_update()}",
                       [session_id])
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    return Session.from_db(connection.alias, ["id", "agent", "last_seq", "exchange_count"], row)


def scratchpad_set(session_id: int, key: str, value: str, now: datetime) -> None:
    ScratchpadEntry.objects.update_or_create(session_id=session_id, key=key,
                                             defaults={"value": value, "updated_at": now})


def scratchpad_get(session_id: int, key: str) -> str | None:
    return ScratchpadEntry.objects.filter(session_id=session_id, key=key).values_list("value", flat=True).first()


# --- exchanges ------------------------------------------------------------------------------------


def exchange_by_id(exchange_id: int) -> Exchange:
    return Exchange.objects.get(pk=exchange_id)


def exchange_by_key(session_id: int, request_key: str) -> Exchange | None:
    return Exchange.objects.filter(session_id=session_id, request_key=request_key).first()


def admission_clash(session_id: int, request_key: str) -> Exchange | None:
    """The exchange with this request key, else the session's active one, else None (the newer
    of the two when both exist): why an admission's insert was refused."""
    return (Exchange.objects.filter(session_id=session_id)
            .filter(Q(request_key=request_key) | Q(status__in=ACTIVE_STATUSES))
            .order_by("-number").first())


@functools.cache
def _insert_columns(model: type[Exchange | Frame], skip: str, vendor: str) -> tuple[tuple[Field[Any, Any], ...], str]:
    fields = tuple(f for f in model._meta.concrete_fields if not f.primary_key and f.column != skip)
    return fields, ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)


def _insert_parts(obj: Exchange | Frame, *, skip: str = "") -> tuple[str, list[Any]]:
    """An unsaved row's column list and values as the ORM would insert them (defaults, JSON, times)."""
    fields, columns = _insert_columns(type(obj), skip, connection.vendor)
    return columns, [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]


def create_exchange(
    session: Session, *, request_key: str, content: str, config: Mapping[str, Any], claim_token: str, now: datetime,
    lease_until: datetime, traceparent: str = "",
) -> Exchange:
    """The session's next exchange with its root frame (``exchange.root``); the session is locked
    and the caller stores the new ``exchange_count``. One statement on PostgreSQL, two on SQLite."""
    number = session.exchange_count + 1
    exchange = Exchange(
        session_id=session.pk, number=number, request_key=request_key, input=content, status=ExchangeStatus.OPEN,
        config=dict(config), created_at=now, budget_tokens=config.get("budget_tokens"), claim_token=claim_token,
        claimed_at=now if claim_token else None, lease_until=lease_until if claim_token else None,
        traceparent=traceparent,
    )
    frame = Frame(session_id=session.pk, depth=0, agent=session.agent, created_at=now)
    columns, values = _insert_parts(exchange)
    frame_columns, frame_values = _insert_parts(frame, skip="exchange_id")
    marks, frame_marks = ", ".join(["%s"] * len(values)), ", ".join(["%s"] * len(frame_values))
    insert_exchange = f"INSERT INTO loop_exchange ({columns}) VALUES ({marks}) RETURNING id"
    with open_cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"WITH x AS ({insert_exchange}) INSERT INTO loop_frame ({frame_columns}, exchange_id) "
                f"SELECT {frame_marks}, x.id FROM x RETURNING exchange_id, id", [*values, *frame_values])
            exchange.pk, frame.pk = cursor.fetchone()
        else:
            cursor.execute(insert_exchange, values)
            exchange.pk = cursor.fetchone()[0]
            cursor.execute(f"INSERT INTO loop_frame ({frame_columns}, exchange_id) VALUES ({frame_marks}, "
                           "%s) RETURNING id", [*frame_values, exchange.pk])
            frame.pk = cursor.fetchone()[0]
    for saved in (exchange, frame):
        saved._state.adding, saved._state.db = False, connection.alias
    frame.exchange = exchange
    exchange.root = frame  # type: ignore[attr-defined]
    return exchange


def claim(exchange_id: int, token: str, now: datetime, lease_until: datetime, *, statuses: Iterable[str] = (
        ExchangeStatus.OPEN,), take_lapsed: bool = False, first: bool = False) -> bool:
    """Claim an exchange in ``statuses`` that nobody holds (or this token holds). With
    ``take_lapsed`` a claim whose lease ran out is taken over too (recovery); with ``first`` only
    an exchange nobody ever claimed (``claimed_at`` stays set after a release)."""
    free = Q(claim_token="") | Q(claim_token=token)
    if take_lapsed:
        free |= Q(lease_until__lt=now)
    if first:
        free = Q(claim_token="", claimed_at__isnull=True)
    return Exchange.objects.filter(pk=exchange_id, status__in=list(statuses)).filter(free).update(
        claim_token=token, claimed_at=now, lease_until=lease_until) == 1


def renew(exchange_id: int, token: str, lease_until: datetime) -> bool:
    """Extend a held lease; False when the claim is no longer this token's (the driver must stop)."""
    return Exchange.objects.filter(pk=exchange_id, claim_token=token, status__in=ACTIVE_STATUSES).update(
        lease_until=lease_until) == 1


def release(exchange_id: int, token: str) -> bool:
    return Exchange.objects.filter(pk=exchange_id, claim_token=token).update(claim_token="", lease_until=None) == 1


def _stranded(now: datetime, unclaimed_before: datetime) -> Q:
    """Active exchanges no live driver holds: a lapsed lease, a parked exchange whose calls are all
    answered, or an open one nobody claimed for a while (its task was lost)."""
    lapsed = Q(status__in=ACTIVE_STATUSES, lease_until__lt=now) & ~Q(claim_token="")
    unclaimed = Q(status=ExchangeStatus.OPEN, claim_token="", created_at__lt=unclaimed_before)
    answered = Q(status=ExchangeStatus.PARKED, claim_token="") & ~Q(
        pk__in=ToolCall.objects.filter(status=ToolCallStatus.AWAITING_HUMAN).values("exchange_id"))
    return lapsed | unclaimed | answered


def needing_recovery(now: datetime, *, unclaimed_before: datetime, limit: int) -> list[int]:
    return list(Exchange.objects.filter(_stranded(now, unclaimed_before)).order_by("id")
                .values_list("pk", flat=True)[:limit])


def is_stranded(exchange_id: int, now: datetime, *, unclaimed_before: datetime) -> bool:
    return Exchange.objects.filter(_stranded(now, unclaimed_before), pk=exchange_id).exists()


def active_exchange(session_id: int) -> Exchange | None:
    return Exchange.objects.filter(session_id=session_id, status__in=ACTIVE_STATUSES).order_by("-number").first()


def reopen(exchange_id: int, token: str) -> bool:
    """A parked exchange opens again, held by ``token`` (the resolver that answered it), or by
    nobody when ``token`` is empty."""
    return Exchange.objects.filter(pk=exchange_id, status=ExchangeStatus.PARKED).filter(
        Q(claim_token="") | Q(claim_token=token)
    ).update(status=ExchangeStatus.OPEN, outcome="", claim_token=token) == 1


def root_frame(exchange_id: int) -> Frame:
    return Frame.objects.get(exchange_id=exchange_id, depth=0)


def request_cancel(exchange_id: int, now: datetime) -> bool:
    return Exchange.objects.filter(
        pk=exchange_id, cancel_requested_at__isnull=True, status__in=ACTIVE_STATUSES
    ).update(cancel_requested_at=now) == 1


def cancel_requested(exchange_id: int) -> bool:
    return Exchange.objects.filter(pk=exchange_id, cancel_requested_at__isnull=False).exists()


def save_ledger(exchange_id: int, *, reserved_tokens: int, accounting_incomplete: bool) -> None:
    Exchange.objects.filter(pk=exchange_id).update(reserved_tokens=reserved_tokens,
                                                   accounting_incomplete=accounting_incomplete)


def add_returned(exchange_id: int, tokens: int) -> None:
    """Give back to an exchange's ledger what a task reserved from it and did not spend (additive:
    its driver, live or not, never writes this column)."""
    Exchange.objects.filter(pk=exchange_id).update(returned_tokens=F("returned_tokens") + tokens)


def returned(exchange_id: int) -> int:
    return int(Exchange.objects.filter(pk=exchange_id).values_list("returned_tokens", flat=True).first() or 0)


def mark_parked(exchange_id: int) -> None:
    Exchange.objects.filter(pk=exchange_id).update(status=ExchangeStatus.PARKED, outcome=Outcome.AWAITING_HUMAN,
                                                   claim_token="", lease_until=None)


def mark_broken(exchange_id: int, code: str) -> None:
    Exchange.objects.filter(pk=exchange_id).update(status=ExchangeStatus.BROKEN, error_code=code[:64])


def count_turn(exchange_id: int, *, input_tokens: int, output_tokens: int, spent: int, incomplete: bool) -> Write:
    return Write(("exchange", exchange_id),
                 "UPDATE loop_exchange SET turns = turns + 1, input_tokens = input_tokens + %s, "
                 "output_tokens = output_tokens + %s, reserved_tokens = %s, accounting_incomplete = %s WHERE id = %s",
                 [input_tokens, output_tokens, spent, incomplete, exchange_id])


def counters_and_events(cursor: Cursor, exchange_id: int) -> tuple[tuple[int, int, int],
                                                                          list[tuple[int, str, Any]]]:
    """``(turns, input_tokens, output_tokens)`` of the exchange, its row locked until the
    settlement commits, and every narrative row of the exchange in seq order: one statement."""
    lock = " FOR UPDATE OF x" if connection.vendor == "postgresql" else ""
    cursor.execute(
        "SELECT x.turns, x.input_tokens, x.output_tokens, e.seq, e.kind, e.payload FROM loop_exchange x "
        f"LEFT JOIN loop_sessionevent e ON e.exchange_id = x.id WHERE x.id = %s ORDER BY e.seq{lock}",
        [exchange_id],
    )
    fetched = cursor.fetchall()
    turns, input_tokens, output_tokens = fetched[0][:3]
    events = [(int(seq), kind, load_json(payload)) for *_c, seq, kind, payload in fetched if seq is not None]
    return (int(turns), int(input_tokens), int(output_tokens)), events


def mark_settled(exchange_id: int, *, outcome: str, receipt: str, now: datetime) -> list[Write]:
    """The exchange settles with its receipt; its open frames close with the same outcome."""
    return [
        Write(("exchange", exchange_id),
              f"UPDATE loop_exchange SET status = %s, outcome = %s, receipt = {json_param()}, claim_token = '', "
              "lease_until = NULL, settled_at = %s WHERE id = %s",
              [ExchangeStatus.SETTLED, outcome, receipt, when(now), exchange_id]),
        Write(("frames", exchange_id),
              "UPDATE loop_frame SET status = %s, outcome = %s, closed_at = %s WHERE exchange_id = %s AND status = %s",
              [FrameStatus.CLOSED, outcome, when(now), exchange_id, FrameStatus.OPEN]),
    ]




def session_exchanges(session_id: int) -> list[Exchange]:
    return list(Exchange.objects.filter(session_id=session_id).order_by("number"))


def add_usage(cursor: Cursor, exchange_id: int, *, input_tokens: int, output_tokens: int, spent: int,
              incomplete: bool) -> None:
    """Meter a provider call that is not a harness turn (a compaction summary)."""
    cursor.execute(
        "UPDATE loop_exchange SET input_tokens = input_tokens + %s, output_tokens = output_tokens + %s, "
        "reserved_tokens = %s, accounting_incomplete = %s WHERE id = %s",
        [input_tokens, output_tokens, spent, incomplete, exchange_id],
    )


def holds_claim(cursor: Cursor, exchange_id: int, token: str) -> bool:
    """Whether ``token`` still holds the exchange's claim (row-locked on PostgreSQL until commit, so
    a takeover cannot slip in between this check and the caller's writes)."""
    cursor.execute(f"SELECT claim_token FROM loop_exchange WHERE id = %s{for_update()}", [exchange_id])
    row = cursor.fetchone()
    return row is not None and row[0] == token

"""Probes: deterministic, lexical, integer per mille, drawn only from what the covered rows contain;
a summary that loses every probe is degraded, and only rows with nothing to probe are no signal."""

from __future__ import annotations

import pytest

from loop.compaction.probes import DRAW, PROBE_COUNT, candidates, draw_probes, score

ROWS = [
    "USER: the checkout service returns 503 since the deploy of release 4.18.2",
    "ASSISTANT: I will read the logs. read_logs {\"service\": \"checkout\"}",
    "TimeoutError in /srv/checkout/app/pool.py line 212: db_pool exhausted after 30000 ms",
    "ASSISTANT: The pool size in pool_settings looks too small.",
    "USER: what is max_pool_size right now?",
    "ASSISTANT: max_connections = 20 in /etc/checkout/db.conf",
    "ConnectionRefusedError: connect to 10.2.0.7:5432 failed (errno 111)",
    "ASSISTANT: I decided to raise POOL_MAX to 60 and restart checkout-api.",
    "exit code 0; restarted checkoutApi in 4.2 s, ticket OPS-4412 updated",
    "USER: please confirm the error rate is back under 0.1 percent, trace id 9f3c2a7b1d",
]


def test_the_same_rows_give_the_same_probes_and_the_same_score():
    first, second = draw_probes(ROWS), draw_probes(list(ROWS))
    assert first == second and len(first) == PROBE_COUNT
    summary = "Checkout 503 after 4.18.2: TimeoutError, db_pool exhausted; raised POOL_MAX."
    assert score(first, before="\n".join(ROWS), summary=summary) == score(second, before="\n".join(ROWS),
                                                                          summary=summary)


def test_probes_prefer_error_strings_then_paths_then_identifiers_then_numbers():
    probes = draw_probes(ROWS)
    by_slot = {p.slot: (p.category, p.text) for p in probes}
    assert by_slot[2] == ("error", "TimeoutError")
    assert by_slot[5] == ("path", "/etc/checkout/db.conf")
    assert by_slot[6] == ("error", "ConnectionRefusedError")
    assert all(p.text for p in probes)  # every slice offers a salient token


def test_a_summary_that_keeps_every_probe_loses_nothing():
    probes = draw_probes(ROWS)
    report = score(probes, before="\n".join(ROWS), summary=" ".join(p.text for p in probes))
    assert (report.pre_hits, report.post_hits, report.lost_permille, report.result) == (10, 10, 0, "ok")


def test_a_summary_that_drops_a_probed_identifier_scores_it_lost():
    probes = draw_probes(ROWS)
    dropped = next(p for p in probes if p.text == "TimeoutError")
    summary = " ".join(p.text for p in probes if p is not dropped)
    report = score(probes, before="\n".join(ROWS), summary=summary)
    lost = [entry for entry in report.as_payload()["probes"] if entry["pre"] and not entry["post"]]
    assert [entry["text"] for entry in lost] == ["TimeoutError"]
    assert report.lost_permille == 100 and report.result == "ok"


def test_a_token_inside_a_longer_word_does_not_count_as_kept():
    probes = draw_probes(ROWS)
    summary = " ".join(p.text + "X" for p in probes)
    assert score(probes, before="\n".join(ROWS), summary=summary).post_hits == 0


def test_losing_half_or_more_is_degraded():
    probes = draw_probes(ROWS)
    kept = " ".join(p.text for p in probes[:5])
    report = score(probes, before="\n".join(ROWS), summary=kept)
    assert (report.lost_permille, report.result, report.degraded) == (500, "degraded", True)
    assert report.as_payload()["latched"] is True
    almost = score(probes, before="\n".join(ROWS), summary=" ".join(p.text for p in probes[:6]))
    assert (almost.lost_permille, almost.result) == (400, "ok")


CHATTER = ["USER: hello there", "ASSISTANT: hi, how can I help", "USER: just saying thanks",
           "ASSISTANT: you are welcome", "USER: the build 7731 failed", "ASSISTANT: sorry to hear"] * 2


def test_every_probe_is_a_token_the_covered_rows_hold():
    for texts in (ROWS, ROWS[:3], ROWS[:1], CHATTER, [ROWS[2] + " " + ROWS[6]]):
        probes = draw_probes(texts)
        assert probes and all(p.text for p in probes), "never an empty probe"
        assert len({p.text.lower() for p in probes}) == len(probes)
        report = score(probes, before="\n".join(texts), summary="")
        assert report.pre_hits == len(probes), "every probe is answerable before compaction"


def test_a_short_covered_prefix_still_fills_ten_probes_from_what_it_holds():
    probes = draw_probes(ROWS[:5])  # five messages: five slices hold no message of their own
    assert len(probes) == PROBE_COUNT and all(p.text for p in probes)
    assert [p.slot for p in probes] == list(range(PROBE_COUNT))
    fewer = draw_probes(ROWS[:3])  # eight salient tokens in all: eight probes, every one of them
    assert {p.text for p in fewer} == {c[4] for c in candidates("\n".join(ROWS[:3]), whole=True)}
    assert len(fewer) == 8


@pytest.mark.parametrize("texts", [ROWS, ROWS[:3], ROWS[:1], CHATTER], ids=["ten", "three", "one", "chatter"])
@pytest.mark.parametrize("summary", ["", "The user said hello.", "Nothing of note happened; all is well."])
def test_a_summary_that_drops_everything_is_degraded_never_no_signal(texts, summary):
    report = score(draw_probes(texts), before="\n".join(texts), summary=summary)
    assert report.pre_hits >= 1 and report.post_hits == 0
    assert (report.lost_permille, report.result, report.degraded) == (1000, "degraded", True)
    assert report.as_payload()["latched"] is True


def test_rows_with_nothing_salient_have_no_probe_and_are_no_signal():
    plain = ["USER: hello there", "ASSISTANT: hi, how can I help", "USER: thanks, that is all"]
    assert draw_probes(plain) == ()
    report = score(draw_probes(plain), before="\n".join(plain), summary="The user said hello.")
    assert (report.pre_hits, report.lost_permille, report.result, report.degraded) == (0, 0, "no_signal", False)


def test_a_weak_baseline_is_no_signal_never_degraded():
    # Probes the covered text does not hold (as the first release's draw left empty ones).
    probes = draw_probes(CHATTER, draw=1)
    report = score(probes, before="\n".join(CHATTER), summary="The user said hello.", draw=1)
    assert report.pre_hits == 1 and report.pre_hits < PROBE_COUNT / 2
    assert report.lost_permille == 1000
    assert (report.result, report.degraded) == ("no_signal", False)
    assert report.as_payload()["draw"] == 1


def test_the_first_draw_is_kept_for_the_reports_it_made():
    old = draw_probes(ROWS[:7], draw=1)  # seven slices with a token, three empty
    assert len(old) == PROBE_COUNT and sum(1 for p in old if not p.text) == 3
    assert draw_probes(ROWS[:7], draw=1) == old  # replay-verify re-draws it the same
    new = draw_probes(ROWS[:7])
    assert len(new) == PROBE_COUNT and all(p.text for p in new)
    assert score(new, before="", summary="").as_payload()["draw"] == DRAW == 2


def test_per_mille_is_integer_arithmetic():
    rows = [f"USER: check pool_{name}" for name in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta")]
    probes = draw_probes(rows)  # seven salient tokens in all: seven probes, none empty
    report = score(probes, before="\n".join(rows), summary=probes[1].text)
    assert len(probes) == 7 and report.pre_hits == 7 and report.lost_permille == 6 * 1000 // 7 == 857

"""Probes: deterministic, lexical, integer per mille; a weak baseline is no signal."""

from __future__ import annotations

from loop.compaction.probes import PROBE_COUNT, draw_probes, score

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


def test_a_weak_baseline_is_no_signal_never_degraded():
    chatter = ["USER: hello there", "ASSISTANT: hi, how can I help", "USER: just saying thanks",
               "ASSISTANT: you are welcome", "USER: the build 7731 failed", "ASSISTANT: sorry to hear"] * 2
    probes = draw_probes(chatter)
    report = score(probes, before="\n".join(chatter), summary="The user said hello.")
    assert report.pre_hits < PROBE_COUNT / 2
    assert report.lost_permille == 1000
    assert (report.result, report.degraded) == ("no_signal", False)


def test_per_mille_is_integer_arithmetic():
    probes = draw_probes(ROWS[:7])  # seven slices with a token, three empty
    report = score(probes, before="\n".join(ROWS[:7]), summary=probes[1].text)
    assert report.pre_hits == 7 and report.lost_permille == 6 * 1000 // 7 == 857

"""Scheduled jobs (SPEC S4, S5): async tasks started by ``execute_task``/``execute_subtask`` with
``mode: "async"`` and cron jobs on django-q2 schedules; one classification of every ending and one
delivery site keyed by job kind."""

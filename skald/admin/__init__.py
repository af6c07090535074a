"""Skald's admin (SPEC O3): one module per room, each registering its own pages. Admin actions call
services; they never write governed rows directly.

- ``site`` and ``home``: the admin site and the home page's panels for each role held;
- ``catalogue``: agents, cases (with the launch of a GDL run) and runs;
- ``runs``, ``frames`` and ``timeline``: the run page, its frame tree and its timeline;
- ``jobs``: async tasks and cron jobs; ``identity``: lockouts and the provider group mapping;
- ``store``: the kernel store, read-only; ``live``: the websocket that keeps queues and homes live.

Importing this package registers nothing: the site's class lives here, and Django imports it from
inside the lazy default site's own setup, which would discard pages registered meanwhile.
``SkaldAdminConfig.ready`` (skald/apps.py) imports the registering modules once the site exists.
"""

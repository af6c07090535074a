"""Workflow routes (``/workflow/…``): the GDL launch and the human seams (SPEC W1-W5)."""

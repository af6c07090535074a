#!/usr/bin/env python
"""Django's command-line utility for Skald."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
    from skald.core.var import var_dir_path, var_dir_prepare

    var_dir_prepare(var_dir_path(Path(__file__).resolve().parent))
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)

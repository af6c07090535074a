from django.apps import AppConfig


class LoopConfig(AppConfig):
    name = "loop"
    verbose_name = "Loop kernel"

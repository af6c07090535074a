from django.apps import AppConfig


class SkaldConfig(AppConfig):
    name = "skald"
    verbose_name = "Skald"

    def ready(self) -> None:
        from skald import checks  # noqa: F401  (registers the system checks)

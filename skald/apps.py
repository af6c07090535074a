from django.apps import AppConfig


class SkaldConfig(AppConfig):
    name = "skald"
    verbose_name = "Skald"

    def ready(self) -> None:
        from skald import checks, wiring  # noqa: F401  (checks register themselves)

        wiring.install()

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from approvals import metrics
        from skald.metrics import register_collector

        register_collector(metrics.collect)

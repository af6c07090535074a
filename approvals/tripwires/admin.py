"""Credential tripwires in the admin (SPEC L16): the active rule set (read-only), organisation
patterns with a "test this text" page, and the allow-list with reasons.

Writes go through :mod:`approvals.tripwires.services` (validated, audited); the forms show the same
problems the services would raise.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from approvals.models import TripwireAllowEntry, TripwirePattern
from approvals.tripwires.selectors import active_rules, tripwire_rule_set
from approvals.tripwires.services import (
    tripwire_allow_delete,
    tripwire_allow_problems,
    tripwire_allow_save,
    tripwire_pattern_delete,
    tripwire_pattern_problems,
    tripwire_pattern_save,
)
from audit.actors import Actor
from loop.tripwires import GITLEAKS_VERSION, NOT_LOADED, OrgPattern, organisation_detector

MAX_TEST_TEXT = 64 * 1024


def _add_problems(form: forms.ModelForm, problems: dict[str, list[str]]) -> None:
    for field, errors in problems.items():
        if field not in form.errors:
            for error in errors:
                form.add_error(field, error)


class TripwirePatternForm(forms.ModelForm):
    class Meta:
        model = TripwirePattern
        fields = ["name", "regex", "keywords", "enabled", "note"]

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or self.cleaned_data
        _add_problems(self, tripwire_pattern_problems(name=cleaned.get("name", ""), regex=cleaned.get("regex", ""),
                                                      keywords=cleaned.get("keywords", "")))
        return cleaned


class TripwireAllowForm(forms.ModelForm):
    class Meta:
        model = TripwireAllowEntry
        fields = ["regex", "reason", "enabled"]

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or self.cleaned_data
        _add_problems(self, tripwire_allow_problems(regex=cleaned.get("regex", ""), reason=cleaned.get("reason", "")))
        return cleaned


class TestTextForm(forms.Form):
    regex = forms.CharField(max_length=500, required=False, label="Pattern",
                            help_text="A pattern to try before saving it; empty: the saved rule set only.")
    keywords = forms.CharField(max_length=200, required=False)
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 8, "cols": 90}), max_length=MAX_TEST_TEXT,
                           label="Test this text")


def _test(form: TestTextForm) -> dict[str, Any]:
    """What the deployment's detector (plus the candidate pattern) finds in the text: kinds and spans."""
    patterns, allow = tripwire_rule_set()
    regex = form.cleaned_data["regex"]
    candidate = []
    if regex:
        problems = tripwire_pattern_problems(name="candidate", regex=regex, keywords=form.cleaned_data["keywords"])
        if problems:
            return {"problems": [message for messages in problems.values() for message in messages]}
        keywords = tuple(w.strip() for w in form.cleaned_data["keywords"].split(",") if w.strip())
        candidate = [OrgPattern("candidate", regex, keywords)]
    detector = organisation_detector([*patterns, *candidate], allow)
    text = form.cleaned_data["text"]
    findings = detector.scan(text)
    return {"findings": [(f.kind, f.start, f.end, text[f.start:f.end]) for f in findings],
            "kinds": sorted({f.kind for f in findings})}


@admin.register(TripwirePattern)
class TripwirePatternAdmin(admin.ModelAdmin):
    form = TripwirePatternForm
    list_display = ["__str__", "regex", "keywords", "enabled", "note"]
    list_filter = ["enabled"]
    search_fields = ["name", "regex", "note"]
    change_list_template = "admin/approvals/tripwirepattern/change_list.html"

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The list is the organisation's own patterns; above it, how many rules run in all (issue 35:
        "0 tripwire patterns" read as if nothing guarded the providers while 223 rules did)."""
        patterns, allow = tripwire_rule_set()
        rules = active_rules(organisation_detector(patterns, allow))
        organisation = sum(1 for rule in rules if rule.id.startswith("org:"))
        summary = {"rules_active": len(rules), "rules_builtin": len(rules) - organisation,
                   "rules_organisation": organisation, "gitleaks_version": GITLEAKS_VERSION}
        return super().changelist_view(request, {**summary, **(extra_context or {})})

    def save_model(self, request: HttpRequest, obj: TripwirePattern, form: Any, change: bool) -> None:
        tripwire_pattern_save(actor=Actor.user(request.user), pattern=obj,
                              changed=form.changed_data if change else ["created"])

    def delete_model(self, request: HttpRequest, obj: TripwirePattern) -> None:
        tripwire_pattern_delete(actor=Actor.user(request.user), pattern=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[TripwirePattern]) -> None:
        for pattern in queryset:
            tripwire_pattern_delete(actor=Actor.user(request.user), pattern=pattern)

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [
            path("rules/", self.admin_site.admin_view(self.rules_view), name=f"{prefix}_rules"),
            path("test/", self.admin_site.admin_view(self.test_view), name=f"{prefix}_test"),
        ]
        return own + super().get_urls()

    def rules_view(self, request: HttpRequest) -> HttpResponse:
        """The active rule set, read-only: id, source, keywords, description."""
        patterns, allow = tripwire_rule_set()
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "title": "Active credential tripwires",
            "rules": active_rules(organisation_detector(patterns, allow)), "not_loaded": sorted(NOT_LOADED.items()),
            "allow": allow, "gitleaks_version": GITLEAKS_VERSION,
        }
        return TemplateResponse(request, "admin/approvals/tripwirepattern/rules.html", context)

    def test_view(self, request: HttpRequest) -> HttpResponse:
        """Run a text through the deployment's detector, optionally with a candidate pattern."""
        initial = {}
        if (pattern_id := request.GET.get("pattern", "")).isdigit():
            saved = TripwirePattern.objects.filter(pk=int(pattern_id)).first()
            if saved is not None:
                initial = {"regex": saved.regex, "keywords": saved.keywords}
        form = TestTextForm(request.POST if request.method == "POST" else None, initial=initial)
        result = _test(form) if form.is_valid() else None
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Test a text",
                   "form": form, "result": result}
        return TemplateResponse(request, "admin/approvals/tripwirepattern/test.html", context)


@admin.register(TripwireAllowEntry)
class TripwireAllowEntryAdmin(admin.ModelAdmin):
    form = TripwireAllowForm
    list_display = ["regex", "reason", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["regex", "reason"]

    def save_model(self, request: HttpRequest, obj: TripwireAllowEntry, form: Any, change: bool) -> None:
        tripwire_allow_save(actor=Actor.user(request.user), entry=obj,
                            changed=form.changed_data if change else ["created"])

    def delete_model(self, request: HttpRequest, obj: TripwireAllowEntry) -> None:
        tripwire_allow_delete(actor=Actor.user(request.user), entry=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[TripwireAllowEntry]) -> None:
        for entry in queryset:
            tripwire_allow_delete(actor=Actor.user(request.user), entry=entry)

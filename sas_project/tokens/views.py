"""The console's API tokens page (/accounts/tokens/): any signed-in user lists its tokens, makes
one (its key is shown on the answer to that POST, once, and never stored) and revokes one. Every
POST needs the CSRF token."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from sas_project.conf import sas_settings
from sas_project.errors import SasError
from sas_project.tokens.services import token_create, token_revoke, tokens_visible


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What it is for, e.g. the script or system using it.")
    lifetime_days = forms.IntegerField(min_value=1, required=False, label="Expires after (days)")


def _page(request: HttpRequest, form: TokenForm, *, key: str = "", status: int = 200) -> HttpResponse:
    context = {
        "tokens": tokens_visible(request.user)[:200],
        "form": form,
        "key": key,
        "longest": sas_settings.token_lifetime_days,
        "section": "tokens",
    }
    return render(request, "tokens/tokens.html", context, status=status)


@never_cache
@require_GET
@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    return _page(request, TokenForm())


@never_cache
@require_POST
@login_required
def token_make(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    days = form.cleaned_data.get("lifetime_days")
    try:
        _, key = token_create(
            user=request.user,
            name=form.cleaned_data["name"],
            lifetime_days=float(days) if days else None,
            actor=request.user,
        )
    except SasError as exc:
        form.add_error(None, exc.message)
        return _page(request, form, status=exc.http_status)
    # The key is in this answer only: not in a redirect, a message cookie or the session.
    return _page(request, TokenForm(), key=key, status=201)


@require_POST
@login_required
def token_revoke_view(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token_revoke(token_id=token_id, actor=request.user)
    except SasError as exc:
        return _page(request, TokenForm(), status=exc.http_status)
    return redirect("tokens:list")

"""The operator console (/ops/): thin views over supervisor.selectors (reads) and
supervisor.services (operator actions).

Each page view returns the whole page, or only its live fragment when htmx asks (the fragments
poll themselves every few seconds). Each action view parses its form, calls one operator service
with `actor=request.user`, and answers an htmx request with the updated fragment (a row of the
Needs-attention list, or a job's live panel) plus a message event, or a plain POST with a
redirect and a flash message. A refusal by the service (somebody else acted first, or the state
no longer allows it) is answered 409 with the same fragment, re-read, and the reason.

Approvals are the one action not reserved to operators: whoever the step's definition names (the
members of its group, or the operators when it names none: `may_decide`) decides, from the same
pages; the pages show Approve and Reject to them only, and the service refuses anyone else (403).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar
from urllib.parse import quote

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, QueryDict
from django.http import HttpRequest as DjangoHttpRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event
from django_htmx.middleware import HtmxDetails

from sas_project.conf import sas_settings
from sas_project.errors import SasError, StaleWrite
from sas_project.permissions import can_operate, can_view
from scheduler.models import StepStatus
from scheduler.schedule_backfill import schedule_backfill
from scheduler.schedules import schedule_set_paused
from scheduler.selectors import archived_job
from scheduler.services.capacity import busiest_call_keys
from scheduler.services.events import event_replay as replay
from scheduler.services.flow import busiest_keys
from scheduler.services.wakeups import NotPermitted, approval_decide, signal_send
from supervisor import selectors, services
from supervisor.dag import definition_dag, job_dag
from supervisor.forms import (
    ApprovalForm,
    AttentionFilterForm,
    BulkForm,
    EventReplayForm,
    JobActionForm,
    JobSearchForm,
    RerunForm,
    ResolveForm,
    RetryForm,
    ScheduleActionForm,
    ScheduleBackfillForm,
    SignalForm,
)
from supervisor.selectors.events import keyed_signals, latest_events
from supervisor.timeline import job_timeline

View = Callable[..., HttpResponse]
Done = TypeVar("Done")


class HttpRequest(DjangoHttpRequest):
    """A request as django-htmx's middleware leaves it."""

    htmx: HtmxDetails


JOBS_PER_PAGE = 50
#: What a refused action says before the service's reason: another writer first (a stale write),
#: or a state that does not allow it (said as it is: nobody else need have acted).
RACED = "Not done: somebody else acted first."
REFUSED = "Not done:"

JOB_SERVICES: dict[str, Callable[..., Any]] = {
    "pause": services.job_pause,
    "resume": services.job_resume,
    "compensate": services.job_compensate,
    "cancel": services.job_cancel,
}
#: What a job action did, said to the operator ({job}: the job's short id).
JOB_DONE = {
    "pause": "Paused job {job}: nothing new is dispatched until it is resumed; calls in flight finish.",
    "resume": "Resumed job {job}: its pending dispatches go out now.",
    "compensate": "Compensating job {job}: it stopped, and what its steps did is being undone.",
    "cancel": "Cancelling job {job}: it stopped, what ran is being undone, and it ends cancelled.",
}


def operator_required(view: View) -> View:
    """Signed-in operators only: anonymous users go to the login page (an htmx request is told
    to send the whole page there), users without `can_operate` get 403."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            if request.htmx:
                page = request.htmx.current_url_abs_path or request.get_full_path()
                return HttpResponseClientRedirect(f"{settings.LOGIN_URL}?next={quote(page)}")
            return redirect_to_login(request.get_full_path())
        if not can_operate(request.user):
            raise PermissionDenied("the operator console needs the operate permission")
        return view(request, *args, **kwargs)

    return wrapper


def viewer_required(view: View) -> View:
    """Signed-in viewers, operators and administrators: the pages read by everyone who may read
    every job. Action buttons render only for those who may act (`can_act`, from
    supervisor.context); the action views themselves stay operator_required."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return operator_required(view)(request, *args, **kwargs)
        if not can_view(request.user):
            raise PermissionDenied("the operator console needs the view permission")
        return view(request, *args, **kwargs)

    return wrapper


def console_page(view: View) -> View:
    """A console page: answers GET (and HEAD) only, to every signed-in viewer."""
    return require_GET(viewer_required(view))


def console_action(view: View) -> View:
    """A console action: answers POST only, to operators."""
    return require_POST(operator_required(view))


def _partial(request: HttpRequest) -> bool:
    return bool(request.htmx) and not request.htmx.history_restore_request


def _page(
    request: HttpRequest, page: str, fragment: str, context: dict[str, Any], signature: str | None = None
) -> HttpResponse:
    """The whole page, or only its fragment for htmx; the two differ by the HX-Request header.

    A live fragment polls with the signature of what it shows (`since`); when nothing changed
    the answer is 204, which htmx leaves unswapped, and nothing is rendered.
    """
    partial = _partial(request)
    if partial and signature is not None and request.GET.get("since") == signature:
        response = HttpResponse(status=204)
    else:
        response = render(request, fragment if partial else page, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _poll_url(path: str, query: QueryDict, signature: str) -> str:
    """The URL a live fragment polls: its own, with its filters and current signature."""
    params = query.copy()
    params["since"] = signature
    return f"{path}?{params.urlencode()}"


# --- pages -----------------------------------------------------------------------------------------


@console_page
def overview(request: HttpRequest) -> HttpResponse:
    data = selectors.overview()
    return _page(request, "ops/overview.html", "ops/_overview_live.html", {"section": "overview", "o": data})


@console_page
def attention(request: HttpRequest) -> HttpResponse:
    form = AttentionFilterForm(request.GET)
    data = selectors.needs_attention(form.filters())
    context = {
        "section": "attention",
        "a": data,
        "decidable": selectors.decidable_steps(request.user, (i.step for i in data.items)),
        "form": form,
        "back": reverse("ops:attention"),
        "poll_url": _poll_url(request.path, request.GET, data.signature),
    }
    return _page(request, "ops/attention.html", "ops/_attention_live.html", context, data.signature)


@console_page
def jobs(request: HttpRequest) -> HttpResponse:
    form = JobSearchForm(request.GET)
    page = Paginator(selectors.jobs_search(form.filters()), JOBS_PER_PAGE).get_page(request.GET.get("page"))
    progress = selectors.step_progress(j.pk for j in page.object_list)
    context = {
        "section": "jobs",
        "form": form,
        "page": page,
        "rows": [(j, progress.get(j.pk)) for j in page.object_list],
        "workflows": selectors.workflow_names(),
        "query": _query_without_page(request),
    }
    return _page(request, "ops/jobs.html", "ops/_jobs_results.html", context)


@console_page
def job(request: HttpRequest, job_id: Any) -> HttpResponse:
    try:
        context = _job_context(request, job_id)
    except Http404:
        # The console is read by viewers and operators, who see every job.
        archived = archived_job(user=None, job_id=job_id, every_job=True)
        if archived is None:
            raise
        # Gone, not missing: the job existed and its rows are in the named archive object.
        context = {"section": "jobs", "archived": archived, "history_days": sas_settings.history_days}
        return render(request, "ops/archived.html", context, status=410)
    return _page(request, "ops/job.html", "ops/_job_live.html", context, context["d"].signature)


@console_page
def job_items(request: HttpRequest, job_id: Any, step_name: str) -> HttpResponse:
    """A fan-out step's items, a page at a time (of one status, with ?status=)."""
    status = request.GET.get("status", "")
    if status not in StepStatus.values:
        status = ""
    data = selectors.job_items(job_id, step_name, status=status)
    if data is None:
        raise Http404("no such fan-out step")
    page = Paginator(data.items, selectors.ITEMS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "section": "jobs",
        "d": data,
        "page": page,
        "status": status,
        "statuses": [s for s in StepStatus.values if data.summary.get(s)],
    }
    return render(request, "ops/items.html", context)


@console_page
def calibration(request: HttpRequest) -> HttpResponse:
    data = selectors.calibration()
    return _page(
        request, "ops/calibration.html", "ops/_calibration_table.html", {"section": "calibration", "c": data}
    )


def _job_context(request: HttpRequest, job_id: Any) -> dict[str, Any]:
    detail = selectors.job_detail(job_id)
    if detail is None:
        raise Http404("no such job")
    return {
        "section": "jobs",
        "d": detail,
        "decidable": selectors.decidable_steps(request.user, (r.step for r in detail.actions)),
        "dag": job_dag(detail.actions, title=str(detail.job.workflow)),
        "timeline": job_timeline(detail.job, detail.actions, detail.compensations, now=timezone.now()),
        "poll_url": _poll_url(reverse("ops:job", args=[detail.job.pk]), QueryDict(), detail.signature),
    }


def _query_without_page(request: HttpRequest) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


# --- actions ---------------------------------------------------------------------------------------


def _safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return default


def _answer(
    request: HttpRequest,
    *,
    ok: bool,
    message: str,
    status: int,
    step_id: int | None = None,
    job_id: Any = None,
) -> HttpResponse:
    """Answer an action: for htmx, the re-read fragment the action came from (a Needs-attention
    row, or the job's live panel) and a message event; otherwise a redirect with a message."""
    fragment = request.POST.get("fragment", "row" if step_id is not None else "job")
    if job_id is None and step_id is not None:
        job_id = selectors.step_job_id(step_id)
    if not request.htmx:
        messages.add_message(request, messages.SUCCESS if ok else messages.ERROR, message)
        default = (
            reverse("ops:job", args=[job_id]) if fragment == "job" and job_id else reverse("ops:attention")
        )
        return redirect(_safe_next(request, default))
    if fragment == "job" and job_id is not None:
        context = {**_job_context(request, job_id), "message": message, "ok": ok}
        response = render(request, "ops/_job_live.html", context, status=status)
    elif step_id is not None:
        item = selectors.attention_item(step_id)
        context = {
            "item": item,
            "decidable": selectors.decidable_steps(request.user, [item.step] if item else []),
            "step_id": step_id,
            "message": message,
            "ok": ok,
            "back": reverse("ops:attention"),
        }
        response = render(request, "ops/_attention_item.html", context, status=status)
    else:
        response = HttpResponse(status=status)
    trigger_client_event(response, "ops:message", {"level": "success" if ok else "error", "text": message})
    trigger_client_event(response, "ops:changed", {})
    return response


def _refusal(exc: SasError) -> tuple[str, int]:
    if isinstance(exc, StaleWrite):
        return f"{RACED} {exc.message}", 409
    if exc.http_status == 409:
        return f"{REFUSED} {exc.message}", 409
    return exc.message, exc.http_status


def _form_errors(form: Any) -> str:
    return "; ".join(
        f"{name}: {' '.join(errors)}" if name != "__all__" else " ".join(errors)
        for name, errors in form.errors.items()
    )


def _performed(
    request: HttpRequest,
    form: Any,
    act: Callable[[dict[str, Any]], Done],
    *,
    step_id: int | None = None,
    job_id: Any = None,
) -> Done | HttpResponse:
    """What `act` returns given the form's cleaned data; or, when the form is invalid (400) or
    the service refuses, the answer saying so (`_answer`, for the given step and job)."""
    if not form.is_valid():
        return _answer(
            request, ok=False, message=_form_errors(form), status=400, step_id=step_id, job_id=job_id
        )
    try:
        return act(form.cleaned_data)
    except SasError as exc:
        message, status = _refusal(exc)
        return _answer(request, ok=False, message=message, status=status, step_id=step_id, job_id=job_id)


@console_action
def step_retry(request: HttpRequest, step_id: int) -> HttpResponse:
    form = RetryForm(request.POST)
    step = _performed(
        request,
        form,
        lambda data: services.step_retry(
            actor=request.user,
            step_id=step_id,
            pool=data["pool"] or None,
            reason=data["reason"],
            input=data["input"],
        ),
        step_id=step_id,
    )
    if isinstance(step, HttpResponse):
        return step
    pool = form.cleaned_data["pool"]
    where = f" on pool {pool}" if pool else ""
    edited = " with the edited input (new operation ID)" if form.cleaned_data["input"] is not None else ""
    message = f"Retried {step.name}{where}{edited}: attempt {step.attempt} dispatched."
    return _answer(request, ok=True, message=message, status=200, step_id=step_id, job_id=step.job_id)


@console_action
def step_resolve(request: HttpRequest, step_id: int) -> HttpResponse:
    step = _performed(
        request,
        ResolveForm(request.POST),
        # The form's fields are the service's arguments (as are RerunForm's).
        lambda data: services.step_resolve(actor=request.user, step_id=step_id, **data),
        step_id=step_id,
    )
    if isinstance(step, HttpResponse):
        return step
    message = f"Resolved {step.name} by hand: it counts as succeeded."
    return _answer(request, ok=True, message=message, status=200, step_id=step_id, job_id=step.job_id)


@require_POST
@viewer_required
def step_decide(request: HttpRequest, step_id: int) -> HttpResponse:
    """Approve or reject a step waiting for an approval. Whoever may not decide it gets 403 and
    nothing changes, however the request was made."""
    form = ApprovalForm(request.POST)
    if not form.is_valid():
        return _answer(request, ok=False, message=_form_errors(form), status=400, step_id=step_id)
    target = selectors.step_job_and_name(step_id)
    if target is None:
        raise Http404("no such step")
    job_id, name = target
    approve = form.cleaned_data["decision"] == "approve"
    try:
        step = approval_decide(
            job_id=job_id,
            step_name=name,
            actor=request.user,
            approve=approve,
            comment=form.cleaned_data["comment"],
        )
    except NotPermitted as exc:
        raise PermissionDenied(exc.message) from exc
    except SasError as exc:
        message, status = _refusal(exc)
        return _answer(request, ok=False, message=message, status=status, step_id=step_id, job_id=job_id)
    if approve:
        message = f"Approved {step.name}: the job moves on."
    else:
        message = f"Rejected {step.name}: the step failed and its policy decides the job."
    return _answer(request, ok=True, message=message, status=200, step_id=step_id, job_id=job_id)


@console_action
def job_action(request: HttpRequest, job_id: Any) -> HttpResponse:
    form = JobActionForm(request.POST)
    step_id = _int_or_none(request.POST.get("step"))
    done = _performed(
        request,
        form,
        lambda data: JOB_SERVICES[data["action"]](actor=request.user, job_id=job_id, reason=data["reason"]),
        step_id=step_id,
        job_id=job_id,
    )
    if isinstance(done, HttpResponse):
        return done
    message = JOB_DONE[form.cleaned_data["action"]].format(job=str(job_id)[:8])
    return _answer(request, ok=True, message=message, status=200, step_id=step_id, job_id=job_id)


@console_action
def job_signal(request: HttpRequest, job_id: Any) -> HttpResponse:
    """Send a signal to a job from its page, as `POST /api/v1/jobs/{id}/signals/` does (the same
    service, with the operator as sender)."""
    form = SignalForm(request.POST)
    receipt = _performed(
        request,
        form,
        lambda data: signal_send(
            job_id=job_id, name=data["name"], payload=data["payload"], sender=request.user
        ),
        job_id=job_id,
    )
    if isinstance(receipt, HttpResponse):
        return receipt
    name = receipt.signal.name
    taker = selectors.signal_taker(receipt.signal.pk)
    if taker:
        message = f"Sent signal {name} to job {str(job_id)[:8]}: step {taker} took it and the job moves on."
    else:
        message = f"Sent signal {name} to job {str(job_id)[:8]}: kept until a step waits for it."
    return _answer(request, ok=True, message=message, status=200, job_id=job_id)


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


@console_action
def attention_bulk(request: HttpRequest) -> HttpResponse:
    """A bulk Retry or Compensate: first a dry run (what would happen to each), then the run
    (what happened to each). The run takes exactly the steps the preview listed as allowed."""
    form = BulkForm(request.POST)
    context: dict[str, Any] = {"section": "attention", "form": form}
    if not form.is_valid():
        context["error"] = _form_errors(form)
        return _bulk_page(request, context, status=400)
    action, stage = form.cleaned_data["action"], form.cleaned_data["stage"]
    ids = form.cleaned_data["step"]
    if stage == "preview" and form.cleaned_data["scope"] == "matching":
        # The list's filters travel with the bulk form; `step` there is the ticked ids, so the
        # step-name filter is sent as `step_name`.
        filters = AttentionFilterForm(
            {
                "workflow": request.POST.get("workflow", ""),
                "step": request.POST.get("step_name", ""),
                "pool": request.POST.get("pool", ""),
                "older_than": request.POST.get("older_than", ""),
            }
        ).filters()
        ids = selectors.attention_step_ids(filters)
    context.update(action=action, stage=stage, reason=form.cleaned_data["reason"])
    if not ids:
        context["error"] = "Nothing selected: tick some steps, or choose every step matching the filters."
        return _bulk_page(request, context, status=400)
    try:
        if stage == "preview":
            items = services.bulk_preview(action=action, step_ids=ids)
        else:
            items = services.bulk_run(
                actor=request.user, action=action, step_ids=ids, reason=form.cleaned_data["reason"]
            )
    except SasError as exc:
        context["error"] = exc.message
        return _bulk_page(request, context, status=exc.http_status)
    allowed = [i for i in items if i.allowed]
    context.update(items=items, allowed=allowed, refused=len(items) - len(allowed))
    response = _bulk_page(request, context)
    if stage == "run" and request.htmx:
        text = f"Bulk {action}: {len(allowed)} done, {len(items) - len(allowed)} refused."
        trigger_client_event(
            response, "ops:message", {"level": "success" if allowed else "error", "text": text}
        )
        trigger_client_event(response, "ops:changed", {})
    return response


def _bulk_page(request: HttpRequest, context: dict[str, Any], status: int = 200) -> HttpResponse:
    template = "ops/_bulk.html" if request.htmx else "ops/bulk.html"
    return render(request, template, context, status=status)


@console_action
def job_rerun(request: HttpRequest, job_id: Any) -> HttpResponse:
    """Rerun a settled job from a step: the new job's page on success (htmx is told to go
    there), the job's page with the reason otherwise."""
    form = RerunForm(request.POST)
    rerun = _performed(
        request,
        form,
        lambda data: services.job_rerun(actor=request.user, job_id=job_id, **data),
        job_id=job_id,
    )
    if isinstance(rerun, HttpResponse):
        return rerun
    target = reverse("ops:job", args=[rerun.pk])
    messages.success(
        request, f"Rerun of job {str(job_id)[:8]} from {form.cleaned_data['from_step']} submitted."
    )
    return HttpResponseClientRedirect(target) if request.htmx else redirect(target)


@console_page
def events(request: HttpRequest) -> HttpResponse:
    """The inbound events received lately and the signals by key kept for a job (docs/events.md)."""
    context = {"section": "events", "events": latest_events(), "keyed": keyed_signals()}
    return render(request, "ops/events.html", context)


@console_action
def event_replay(request: HttpRequest, event_id: int) -> HttpResponse:
    """Replay a received event (as `POST /api/v1/events/{id}/replay/`), then back to the Events
    page saying what the replay did."""
    form = EventReplayForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return redirect("ops:events")
    try:
        receipt = replay(event_id, actor=request.user, reason=form.cleaned_data["reason"])
    except SasError as exc:
        messages.error(request, exc.message)
        return redirect("ops:events")
    done = receipt.answer
    messages.success(
        request,
        f"Replayed event {event_id} ({receipt.event.type} {receipt.event.source}/{receipt.event.event_id}): "
        f"started {len(done['started'])} job(s), reached {len(done['signalled'])} waiting job(s), "
        f"{len(done['refused'])} trigger(s) refused.",
    )
    return redirect("ops:events")


@console_page
def keys(request: HttpRequest) -> HttpResponse:
    """The concurrency keys held or waited for now (docs/flow-control.md)."""
    context = {"section": "keys", "rows": busiest_keys(), "calls": busiest_call_keys()}
    return render(request, "ops/keys.html", context)


@console_page
def at_risk(request: HttpRequest) -> HttpResponse:
    """The live jobs likely to miss their workflow's SLA, and how late or close each is (docs/sla.md)."""
    context = {"section": "at_risk", "rows": selectors.at_risk_jobs(timezone.now())}
    return render(request, "ops/at_risk.html", context)


@console_page
def schedules(request: HttpRequest) -> HttpResponse:
    return render(request, "ops/schedules.html", {"section": "schedules", "rows": selectors.schedule_rows()})


@console_action
def schedule_action(request: HttpRequest, name: str) -> HttpResponse:
    """Pause or resume a schedule, then back to the list with what happened."""
    form = ScheduleActionForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return redirect("ops:schedules")
    action = form.cleaned_data["action"]
    try:
        schedule_set_paused(name, actor=request.user, paused=action == "pause")
    except SasError as exc:
        messages.error(request, exc.message)
        return redirect("ops:schedules")
    messages.success(request, f"Schedule {name} {'paused' if action == 'pause' else 'resumed'}.")
    return redirect("ops:schedules")


@console_action
def schedule_backfill_view(request: HttpRequest, name: str) -> HttpResponse:
    """Start the fire times of a past range that made no job, then back to the list saying what
    started."""
    form = ScheduleBackfillForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return redirect("ops:schedules")
    try:
        done = schedule_backfill(
            name, actor=request.user, start=form.cleaned_data["start"], end=form.cleaned_data["end"]
        )
    except SasError as exc:
        messages.error(request, f"Backfill of {name}: {exc.message}")
        return redirect("ops:schedules")
    started = sum(1 for firing in done if firing.started)
    messages.success(
        request,
        f"Backfill of {name}: {len(done)} fire times, {started} jobs started, "
        f"{len(done) - started} had fired already.",
    )
    return redirect("ops:schedules")


# --- definitions (read-only: the admin edits them) -----------------------------------------------


@console_page
def workflows(request: HttpRequest) -> HttpResponse:
    return render(request, "ops/workflows.html", {"section": "workflows", "rows": selectors.workflow_list()})


@console_page
def workflow(request: HttpRequest, name: str) -> HttpResponse:
    detail = selectors.workflow_detail(name)
    if detail is None:
        raise Http404("no such workflow")
    context = {
        "section": "workflows",
        "w": detail,
        "dag": definition_dag(detail.steps, title=f"{name} v{detail.latest.version}"),
    }
    return render(request, "ops/workflow.html", context)


@console_page
def policies(request: HttpRequest) -> HttpResponse:
    return render(request, "ops/policies.html", {"section": "policies", "rows": selectors.policy_rows()})


@console_page
def policy(request: HttpRequest, name: str) -> HttpResponse:
    detail = selectors.policy_detail(name)
    if detail is None:
        raise Http404("no such policy")
    return render(request, "ops/policy.html", {"section": "policies", "p": detail})

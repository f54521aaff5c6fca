"""A workflow's DAG as inline SVG, drawn on the server (no JavaScript, no front-end build).

Layered layout: a step's column is its dependency depth (the longest path from a step with no
dependencies), and within a column steps are ordered by the mean row of their dependencies, which
keeps most edges short and uncrossed for the small graphs workflows are. Nodes are coloured by
the step's status; a wait step (signal, approval, timer) has a dashed border and names what it
waits for; a sub-workflow step has a double border and names its workflow; a fan-out step is a
stack of cards with its items' count (how many succeeded of how many); a step's compensation
is drawn as a badge on its node. Every piece of text is escaped: step names come from definitions
that operators type.

A node carries its status's light fill and dark ink (as the status pills do), which read in either
theme; what lies on the card itself (edges, arrows, the legend's words) takes its colour from the
stylesheet, or else the card's ink (`currentColor`), so it reads on a dark card too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from scheduler.models import StepDefinitionKind
from supervisor.selectors.waits import wait_kind_text, wait_of

if TYPE_CHECKING:
    from scheduler.models import StepDefinition
    from supervisor.selectors import StepRow

NODE_W = 168
NODE_H = 62
COL_GAP = 72
ROW_GAP = 24
PAD = 16
LEGEND_H = 28
NAME_CHARS = 22

#: status -> (fill, stroke, text)
COLOURS: dict[str, tuple[str, str, str]] = {
    "pending": ("#f3f4f6", "#9ca3af", "#374151"),
    "dispatched": ("#dbeafe", "#2563eb", "#1e3a8a"),
    "attempt_failed": ("#ffedd5", "#ea580c", "#7c2d12"),
    "unknown": ("#fef3c7", "#d97706", "#78350f"),
    "retry_wait": ("#e0e7ff", "#6366f1", "#312e81"),
    "waiting": ("#ecfeff", "#0891b2", "#164e63"),
    "held": ("#fee2e2", "#dc2626", "#7f1d1d"),
    "succeeded": ("#dcfce7", "#16a34a", "#14532d"),
    "failed": ("#fecaca", "#b91c1c", "#7f1d1d"),
    "skipped": ("#f3f4f6", "#d1d5db", "#6b7280"),
    "compensated": ("#ede9fe", "#7c3aed", "#4c1d95"),
}
FALLBACK = ("#ffffff", "#6b7280", "#111827")


@dataclass(frozen=True)
class DagNode:
    name: str
    status: str
    depends_on: Sequence[str] = ()
    #: The status of this step's compensation, if one was created.
    compensation_status: str | None = None
    #: Anchor the node links to (for example "#step-12"); empty for none.
    href: str = ""
    #: A short second line under the status (for example "attempt 2 · payments").
    detail: str = ""
    #: A wait step's kind ("signal", "approval", "timer"); empty for a call.
    wait: str = ""
    #: A sub-workflow step: it runs a whole workflow (drawn with a double border).
    workflow: bool = False
    #: A fan-out step: it runs once per item (drawn as a stack of cards).
    fan_out: bool = False
    #: The second line, instead of the status (a definition's kind: it has no status).
    caption: str = ""


def _depths(nodes: Sequence[DagNode]) -> dict[str, int]:
    """Longest path from a root. Unknown dependencies are ignored; a cycle (which definitions
    refuse) cannot loop here: a step met again while being measured counts as a root."""
    deps = {n.name: [d for d in n.depends_on if d != n.name] for n in nodes}
    depth: dict[str, int] = {}
    visiting: set[str] = set()

    def measure(name: str) -> int:
        if name in depth:
            return depth[name]
        if name in visiting or name not in deps:
            return -1
        visiting.add(name)
        value = 1 + max((measure(d) for d in deps[name]), default=-1)
        visiting.discard(name)
        depth[name] = value
        return value

    for node in nodes:
        measure(node.name)
    return depth


def _layers(nodes: Sequence[DagNode]) -> list[list[DagNode]]:
    depth = _depths(nodes)
    columns: list[list[DagNode]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in nodes:
        columns[depth[node.name]].append(node)
    row: dict[str, float] = {}
    for column in columns:
        order = {n.name: i for i, n in enumerate(column)}

        def key(node: DagNode, order: dict[str, int] = order) -> tuple[float, int]:
            placed = [row[d] for d in node.depends_on if d in row]
            return (sum(placed) / len(placed) if placed else float(order[node.name]), order[node.name])

        column.sort(key=key)
        for i, node in enumerate(column):
            row[node.name] = float(i)
    return columns


#: The characters of a node's detail it shows (its title holds the whole).
DETAIL_CHARS = 24


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _label(status: str) -> str:
    return status.replace("_", " ")


def render_dag(nodes: Sequence[DagNode], *, title: str = "Workflow", legend: bool = True) -> SafeString:
    """The graph as an <svg> element (safe to insert in a template as is)."""
    if not nodes:
        return mark_safe('<p class="muted">This workflow has no steps.</p>')
    columns = _layers(nodes)
    tallest = max(len(c) for c in columns)
    graph_h = tallest * NODE_H + (tallest - 1) * ROW_GAP
    height = PAD * 2 + graph_h + LEGEND_H
    statuses = sorted(
        {n.status for n in nodes} | {n.compensation_status for n in nodes if n.compensation_status}
    )
    key, legend_w = _legend(statuses, height - LEGEND_H + 8) if legend else ("", 0)
    width = max(PAD * 2 + len(columns) * NODE_W + (len(columns) - 1) * COL_GAP, PAD * 2 + legend_w)
    where: dict[str, tuple[int, int]] = {}
    for c, column in enumerate(columns):
        offset = (graph_h - (len(column) * NODE_H + (len(column) - 1) * ROW_GAP)) // 2
        for r, node in enumerate(column):
            where[node.name] = (PAD + c * (NODE_W + COL_GAP), PAD + offset + r * (NODE_H + ROW_GAP))
    by_name = {n.name: n for n in nodes}
    parts = [
        f'<svg class="dag" xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        '<defs><marker id="dag-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path class="dag-arrow" d="M0,0 L10,5 L0,10 z" '
        'fill="currentColor"/>'
        "</marker></defs>",
    ]
    for node in nodes:
        x2, y2 = where[node.name]
        for dep in node.depends_on:
            if dep not in where or dep == node.name:
                continue
            x1, y1 = where[dep]
            sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H // 2, x2, y2 + NODE_H // 2
            bend = max((ex - sx) // 2, 20)
            done = by_name[dep].status in ("succeeded", "compensated")
            dash = "" if done else ' stroke-dasharray="5 4"'
            parts.append(
                f'<path class="dag-edge{" done" if done else ""}" data-from="{escape(dep)}" '
                f'data-to="{escape(node.name)}" '
                f'd="M{sx},{sy} C{sx + bend},{sy} {ex - bend},{ey} {ex - 2},{ey}" fill="none" '
                f'stroke="currentColor" stroke-width="1.6"'
                f'{dash} marker-end="url(#dag-arrow)"/>'
            )
    for node in nodes:
        x, y = where[node.name]
        fill, stroke, ink = COLOURS.get(node.status, FALLBACK)
        second = node.caption or _label(node.status)
        label = f"{node.name}: {second}"
        if node.detail and (node.wait or len(node.detail) > DETAIL_CHARS):
            label += f" ({node.detail})"  # the whole of a detail the node shows cut
        if node.compensation_status:
            label += f" (compensation {_label(node.compensation_status)})"
        # A wait step's border is dashed: it waits for the world, not for a call.
        dashed = ' stroke-dasharray="7 3"' if node.wait else ""
        body = [
            f"<title>{escape(label)}</title>",
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="9" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="2"{dashed}/>',
            f'<text x="{x + 12}" y="{y + 21}" font-size="14" font-weight="600" fill="{ink}">'
            f"{escape(_short(node.name, NAME_CHARS))}</text>",
            f'<text x="{x + 12}" y="{y + 37}" font-size="12" fill="{ink}">{escape(second)}</text>',
        ]
        if node.detail:
            body.append(
                f'<text x="{x + 12}" y="{y + 53}" font-size="11" fill="#4b5563">'
                f"{escape(_short(node.detail, DETAIL_CHARS))}</text>"
            )
        if node.compensation_status:
            cfill, cstroke, cink = COLOURS.get(node.compensation_status, FALLBACK)
            badge = f"\u21ba {_label(node.compensation_status)}"
            bw = 14 + 6 * len(badge)
            bx, by = x + NODE_W - bw + 6, y - 10
            body.append(
                f'<g class="dag-compensation" data-status="{escape(node.compensation_status)}">'
                f'<rect x="{bx}" y="{by}" width="{bw}" height="18" rx="9" fill="{cfill}" stroke="{cstroke}"/>'
                f'<text x="{bx + 7}" y="{by + 13}" font-size="11" fill="{cink}">{escape(badge)}</text></g>'
            )
        if node.workflow:
            # A workflow inside the workflow: a second border inside the first.
            body.insert(
                2,
                f'<rect x="{x + 4}" y="{y + 4}" width="{NODE_W - 8}" height="{NODE_H - 8}" rx="6" '
                f'fill="none" stroke="{stroke}" stroke-width="1"/>',
            )
        if node.fan_out:
            # Many items behind one step: two cards peek out behind the node.
            for shift in (8, 4):
                body.insert(
                    0,
                    f'<rect x="{x + shift}" y="{y - shift}" width="{NODE_W}" height="{NODE_H}" rx="9" '
                    f'fill="{fill}" stroke="{stroke}" stroke-width="1" opacity="0.6"/>',
                )
        inner = "".join(body)
        if node.href:
            inner = f'<a href="{escape(node.href)}">{inner}</a>'
        wait = f' data-wait="{escape(node.wait)}"' if node.wait else ""
        if node.workflow:
            wait += ' data-kind="workflow"'
        if node.fan_out:
            wait += ' data-kind="fan-out"'
        parts.append(
            f'<g class="dag-node" data-step="{escape(node.name)}" data-status="{escape(node.status)}"{wait}>'
            f"{inner}</g>"
        )
    parts.append(key)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated text is escaped above


def _legend(statuses: list[str], y: int) -> tuple[str, int]:
    """A colour key for the statuses drawn, and its width."""
    x = PAD
    items = []
    for status in statuses:
        fill, stroke, _ = COLOURS.get(status, FALLBACK)
        text = _label(status)
        items.append(
            f'<rect x="{x}" y="{y}" width="12" height="12" rx="3" fill="{fill}" stroke="{stroke}"/>'
            f'<text class="chart-ink" x="{x + 17}" y="{y + 11}" font-size="11" fill="currentColor">'
            f"{escape(text)}</text>"
        )
        x += 30 + 7 * len(text)
    return f'<g class="dag-legend">{"".join(items)}</g>', x - PAD


def job_dag(actions: Sequence[StepRow], *, title: str = "Workflow") -> SafeString:
    """The DAG of a job's action steps, each node linking to the step's row on the job page. A
    wait step's detail is what it waits for ("approval: finance", "timer 14:05" while waiting);
    a call's, its attempt and any pool it was moved to."""
    nodes = []
    for row in actions:
        step = row.step
        wait_kind = step.definition.kind if step.definition.waits else ""
        if wait_kind:
            waiting = wait_of(step)
            detail = waiting.short if waiting is not None else wait_kind_text(step.definition)
        elif step.definition.kind == StepDefinitionKind.WORKFLOW:
            detail = f"workflow {step.definition.child_workflow}"
        elif step.definition.kind == StepDefinitionKind.REPEAT:
            summary = getattr(step, "item_summary", None) or {}
            most = (step.definition.repeat or {}).get("max_iterations")
            detail = f"iteration {summary.get('total', 0)} of at most {most}"
        elif summary := getattr(step, "item_summary", None):
            detail = f"{summary.get('succeeded', 0)}/{summary['total']} items succeeded"
        else:
            detail = f"attempt {step.attempt}" if step.attempt else ""
            if step.pool is not None and step.pool_id != step.definition.pool_id:
                detail = f"{detail} \u00b7 {step.pool.name}".strip(" \u00b7")
        nodes.append(
            DagNode(
                name=step.name,
                status=step.status,
                depends_on=tuple(step.definition.depends_on or ()),
                compensation_status=row.compensation.status if row.compensation else None,
                href=f"#step-{step.pk}",
                detail=detail,
                wait=str(wait_kind),
                workflow=step.definition.kind == StepDefinitionKind.WORKFLOW,
                fan_out=step.fans_out,
            )
        )
    return render_dag(nodes, title=title)


def definition_dag(definitions: Sequence[StepDefinition], *, title: str = "Workflow") -> SafeString:
    """The DAG of a workflow version's step definitions: no status, so each node names its kind
    and what it calls or waits for (its pool and policy, the signal, the approval's group, the
    child workflow)."""
    nodes = []
    for d in definitions:
        if d.waits:
            detail = wait_kind_text(d)
        elif d.kind == StepDefinitionKind.WORKFLOW:
            detail = f"workflow {d.child_workflow}"
        elif d.kind == StepDefinitionKind.REPEAT:
            loop = d.repeat or {}
            detail = f"until {loop.get('until')} \u00b7 every {float(loop.get('interval_seconds') or 0):g} s"
        else:
            detail = " \u00b7 ".join(
                x for x in (d.pool.name if d.pool else "", d.policy.name if d.policy else "") if x
            )
        nodes.append(
            DagNode(
                name=d.name,
                status="definition",
                depends_on=tuple(d.depends_on or ()),
                detail=detail,
                wait=str(d.kind) if d.waits else "",
                workflow=d.kind == StepDefinitionKind.WORKFLOW,
                fan_out=bool(d.for_each),
                caption=f"{d.kind} step"
                + (" \u00b7 for each item" if d.for_each else "")
                + (f" \u00b7 at most {(d.repeat or {}).get('max_iterations')}" if d.repeat else ""),
            )
        )
    return render_dag(nodes, title=title, legend=False)

"""The task DAG as an inline SVG picture (U-5): layered by topological depth, nodes coloured
by what each task is shown as (its status, or `queued`/`stopped`: objectives.core.board),
an edge per dependency, each node linked to its task's latest job."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from objectives.core import dag
from objectives.core.state import ObjectiveState

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 180, 48, 64, 20, 16
COLOURS = {
    "pending": "#9e9e9e",
    "ready": "#42a5f5",
    "queued": "#90a4ae",
    "running": "#ffa000",
    "reviewing": "#ab47bc",
    "approved": "#66bb6a",
    "integrated": "#2e7d32",
    "blocked": "#e53935",
    "superseded": "#bdbdbd",
    "stopped": "#757575",
}


def _clip(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(
    state: ObjectiveState, job_url: Callable[[str], str], shown: Mapping[str, str] | None = None
) -> SafeString:
    """`shown`: task id -> shown status (presenters.shown_statuses); else the fold's."""
    if not state.tasks:
        return mark_safe('<p class="rcpt-none">No plan yet.</p>')
    graph = {t.id: t.depends_on for t in state.tasks}
    depth = dag.depths(graph)
    rows: dict[int, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for task in state.tasks:
        d = depth[task.id]
        row = rows.get(d, 0)
        rows[d] = row + 1
        place[task.id] = (PAD + d * (NODE_W + GAP_X), PAD + row * (NODE_H + GAP_Y))
    width = PAD * 2 + (max(depth.values()) + 1) * (NODE_W + GAP_X) - GAP_X
    height = PAD * 2 + max(rows.values()) * (NODE_H + GAP_Y) - GAP_Y
    parts = [
        format_html(
            '<svg class="rcpt-dag" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" '
            'viewBox="0 0 {} {}" role="img" aria-label="task graph of {}">'
            '<defs><marker id="rcpt-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
            'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            '<path d="M0,0 L10,5 L0,10 z" class="rcpt-dag-arrow"/></marker></defs>',
            width,
            height,
            width,
            height,
            state.objective_id,
        )
    ]
    for task in state.tasks:
        x2, y2 = place[task.id]
        for dep in task.depends_on:
            x1, y1 = place[dep]
            sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H // 2, x2, y2 + NODE_H // 2
            mid = (sx + ex) // 2
            parts.append(
                format_html(
                    '<path class="rcpt-dag-edge" data-from="{}" data-to="{}" '
                    'd="M{},{} C{},{} {},{} {},{}" marker-end="url(#rcpt-arrow)"/>',
                    dep,
                    task.id,
                    sx,
                    sy,
                    mid,
                    sy,
                    mid,
                    ey,
                    ex,
                    ey,
                )
            )
    for task in state.tasks:
        x, y = place[task.id]
        status = (shown or {}).get(task.id, task.status)
        colour = COLOURS.get(status, "#757575")
        label = format_html(
            "<title>{}: {} ({}, {} pass{})</title>"
            '<rect x="{}" y="{}" width="{}" height="{}" rx="6" fill="{}"/>'
            '<text x="{}" y="{}" class="rcpt-dag-id">{}</text>'
            '<text x="{}" y="{}" class="rcpt-dag-status">{}</text>',
            task.id,
            task.title,
            status,
            len(task.runs),
            "" if len(task.runs) == 1 else "es",
            x,
            y,
            NODE_W,
            NODE_H,
            colour,
            x + 10,
            y + 19,
            _clip(f"{task.id} · {task.title}"),
            x + 10,
            y + 37,
            status,
        )
        jobs = [run.job_id for run in task.runs]
        if jobs:
            parts.append(
                format_html(
                    '<a class="rcpt-dag-node" data-task="{}" data-status="{}" href="{}">{}</a>',
                    task.id,
                    status,
                    job_url(jobs[-1]),
                    label,
                )
            )
        else:
            parts.append(
                format_html(
                    '<g class="rcpt-dag-node" data-task="{}" data-status="{}">{}</g>',
                    task.id,
                    status,
                    label,
                )
            )
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(str(p) for p in parts))


def legend() -> SafeString:
    return mark_safe(
        "".join(
            f'<span class="rcpt-dag-key"><i style="background:{escape(c)}"></i>{escape(s)}</span>'
            for s, c in COLOURS.items()
        )
    )

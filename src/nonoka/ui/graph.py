"""A plan as a picture: its dependency layers as rows from the top, each step a box
coloured by status, an arrow for every dependency (explicit or through a reference).

Top-down keeps long plans within the page's width: they grow downwards, where the page
scrolls anyway; only an unusually wide layer needs a horizontal scroll."""

from __future__ import annotations

import json
from dataclasses import dataclass

from nonoka.redact import redact_text
from nonoka.state.session_state import SessionState

NODE_W, NODE_H = 176, 56
GAP_X, GAP_Y, PAD = 20, 44, 16
LABEL = 22


@dataclass(frozen=True)
class Node:
    id: str
    x: int
    y: int
    status: str
    action: str
    attempts: int
    result: str
    error: str

    @property
    def title(self) -> str:
        return self.id if len(self.id) <= LABEL else self.id[: LABEL - 1] + "…"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str


@dataclass(frozen=True)
class PlanGraph:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int
    layers: int

    def count(self, status: str) -> int:
        return sum(1 for n in self.nodes if n.status == status)


def build(state: SessionState) -> PlanGraph | None:
    plan = state.current_plan
    if plan is None:
        return None
    widest = max((len(layer) for layer in plan.layers), default=0)
    width = PAD * 2 + widest * NODE_W + max(0, widest - 1) * GAP_X
    nodes: dict[str, Node] = {}
    for depth, layer in enumerate(plan.layers):
        used = len(layer) * NODE_W + max(0, len(layer) - 1) * GAP_X
        left = (width - used) // 2
        for index, step_id in enumerate(layer):
            step = plan.step(step_id)
            status = state.step_statuses.get(step_id)
            failure = state.failed_steps.get(step_id)
            result = state.completed_steps.get(step_id)
            nodes[step_id] = Node(
                id=step_id, x=left + index * (NODE_W + GAP_X),
                y=PAD + depth * (NODE_H + GAP_Y),
                status=str(status) if status is not None else "pending",
                action=f"tool · {step.tool}" if step.tool else "prompt",
                attempts=failure.attempts if failure else 0,
                result=_show(result.output) if result else "",
                error=redact_text(f"{failure.error_type}: {failure.message}") if failure
                else "")
    edges = []
    for step in plan.steps:
        for source in sorted(step.references()):
            if source in nodes and step.id in nodes:
                edges.append(Edge(source, step.id, _curve(nodes[source], nodes[step.id])))
    layers = len(plan.layers)
    height = PAD * 2 + layers * NODE_H + max(0, layers - 1) * GAP_Y
    return PlanGraph([nodes[s.id] for s in plan.steps if s.id in nodes], edges, width,
                     height, layers)


def _curve(source: Node, target: Node) -> str:
    x1, y1 = source.x + NODE_W // 2, source.y + NODE_H
    x2, y2 = target.x + NODE_W // 2, target.y - 6
    bend = (y2 - y1) // 2
    return f"M{x1},{y1} C{x1},{y1 + bend} {x2},{y2 - bend} {x2},{y2}"


def _show(value: object) -> str:
    """A step's result as the page shows it: redacted whole, then cut."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                          default=str)
    text = redact_text(text)
    return text if len(text) <= 2000 else text[:2000] + "…"

"""The drawing of a workflow's graph on its page: where each step's box and each dependency's
arrow go, computed here from the steps; the template (``_workflow_graph.html``) writes them
as inline SVG, so the page needs no script and no layout library, and every name it shows
is escaped like any other value.

Layered left to right by the longest path from the roots: a step stands one column right of
its deepest dependency. An arrow that spans several columns takes a waypoint in each column
it crosses (so it never runs hidden behind a box). Within a column, boxes and waypoints are
ordered by the mean height of what they hang from (one barycentre pass, which spares most
crossings), ties in the order the steps were added, and each column is centred on the
tallest. A dependency that is not among the steps (archived, gone) draws no arrow; the
steps' table still names it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

NODE_WIDTH = 168
NODE_HEIGHT = 44
COLUMN_GAP = 56
ROW_GAP = 16
# The room an arrow takes where it crosses a column on its way to a later one.
WAYPOINT_HEIGHT = 8
MARGIN = 8
# A name longer than this is cut (with an ellipsis) in its box; its tooltip has it whole.
NAME_CHARS = 22
# A workflow with more steps is not drawn (its page lists the steps): a drawing that large
# is unreadable, and the live part carries it on every refresh.
MAX_DRAWN = 300


class GraphStep(Protocol):
    """What the drawing reads of a step."""

    @property
    def name(self) -> str: ...

    @property
    def job_id(self) -> UUID: ...

    @property
    def status(self) -> str: ...

    @property
    def after(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class Node:
    """One step's box: its top-left corner, its name (``label``: cut to fit) and status."""

    name: str
    label: str
    status: str
    job_id: UUID
    column: int
    x: int
    y: int
    width: int = NODE_WIDTH
    height: int = NODE_HEIGHT


@dataclass(frozen=True)
class Edge:
    """One dependency's arrow from ``parent``'s right side to ``child``'s left: ``path`` is
    the SVG path (a cubic curve); ``status`` the parent's, which colours it."""

    parent: str
    child: str
    status: str
    path: str


@dataclass(frozen=True)
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int


def label(name: str, limit: int = NAME_CHARS) -> str:
    """``name`` cut to ``limit`` characters, the last an ellipsis when cut."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _parents(steps: Sequence[GraphStep]) -> dict[str, list[str]]:
    """Each step's dependencies among the steps (once each, in their order)."""
    known = {step.name for step in steps}
    return {
        step.name: [p for p in dict.fromkeys(step.after) if p in known and p != step.name]
        for step in steps
    }


def columns(steps: Sequence[GraphStep]) -> dict[str, int]:
    """Each step's column: 0 for a root, else one more than its deepest dependency's."""
    parents = _parents(steps)
    children: dict[str, list[str]] = {name: [] for name in parents}
    for child, ups in parents.items():
        for parent in ups:
            children[parent].append(child)
    remaining = {name: len(ups) for name, ups in parents.items()}
    ready = deque(name for name, count in remaining.items() if count == 0)
    column: dict[str, int] = {}
    while ready:
        name = ready.popleft()
        column[name] = max((column[p] + 1 for p in parents[name]), default=0)
        for child in children[name]:
            remaining[child] -= 1
            if remaining[child] == 0:
                ready.append(child)
    # A cycle (enqueue never makes one): its steps go right of what was placed.
    for name in parents:
        if name not in column:
            column[name] = max((column[p] + 1 for p in parents[name] if p in column), default=0)
    return column


@dataclass
class _Slot:
    """A place in a column: a step's box, or a waypoint of an arrow that crosses the
    column (``key``: ``("step", name)`` or ``("via", parent, child, column)``), hanging
    from the slots in ``before`` (those its incoming arrows leave from)."""

    key: tuple[str, ...]
    height: int
    before: list[tuple[str, ...]]
    order: int


def layout(steps: Sequence[GraphStep]) -> Graph:
    """Every step's box and every dependency's arrow, and the drawing's size. An arrow
    that spans several columns passes through a waypoint in each column between, which
    takes its own place there: it never runs behind a box."""
    if not steps:
        return Graph([], [], 0, 0)
    placed = columns(steps)
    parents = _parents(steps)
    slots: dict[int, list[_Slot]] = {}
    routes: list[tuple[str, str, list[tuple[str, ...]]]] = []
    for order, step in enumerate(steps):
        before: list[tuple[str, ...]] = []
        for parent in parents[step.name]:
            previous: tuple[str, ...] = ("step", parent)
            via: list[tuple[str, ...]] = []
            for column in range(placed[parent] + 1, placed[step.name]):
                key = ("via", parent, step.name, str(column))
                slots.setdefault(column, []).append(_Slot(key, WAYPOINT_HEIGHT, [previous], order))
                via.append(key)
                previous = key
            before.append(previous)
            routes.append((parent, step.name, via))
        slots.setdefault(placed[step.name], []).append(
            _Slot(("step", step.name), NODE_HEIGHT, before, order)
        )
    at = _place(slots)
    by_name = {step.name: step for step in steps}
    nodes = [
        Node(key[1], label(key[1]), by_name[key[1]].status, by_name[key[1]].job_id, column, x, y)
        for key, (column, x, y) in at.items()
        if key[0] == "step"
    ]
    nodes.sort(key=lambda node: (node.column, node.y))
    edges = [_edge(by_name[parent].status, parent, child, via, at) for parent, child, via in routes]
    width = MARGIN * 2 + len(slots) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    height = MARGIN * 2 + max((_height(column) for column in slots.values()), default=0)
    return Graph(nodes, edges, width, height)


def _height(column: list[_Slot]) -> int:
    return sum(slot.height for slot in column) + ROW_GAP * (len(column) - 1)


def _place(slots: dict[int, list[_Slot]]) -> dict[tuple[str, ...], tuple[int, int, int]]:
    """Each slot's (column, x, y): columns left to right, each ordered by the mean height
    of what its slots hang from (ties: the order the steps were added) and centred on the
    tallest."""
    tallest = max((_height(column) for column in slots.values()), default=0)
    centre: dict[tuple[str, ...], float] = {}
    at: dict[tuple[str, ...], tuple[int, int, int]] = {}
    for index in sorted(slots):
        column = slots[index]
        column.sort(key=lambda slot: (_mean(slot.before, centre), slot.order))
        y = MARGIN + (tallest - _height(column)) // 2
        x = MARGIN + index * (NODE_WIDTH + COLUMN_GAP)
        for slot in column:
            at[slot.key] = (index, x, y)
            centre[slot.key] = y + slot.height / 2
            y += slot.height + ROW_GAP
    return at


def _mean(keys: list[tuple[str, ...]], centre: dict[tuple[str, ...], float]) -> float:
    heights = [centre[key] for key in keys if key in centre]
    return sum(heights) / len(heights) if heights else 0.0


def _edge(
    status: str,
    parent: str,
    child: str,
    via: list[tuple[str, ...]],
    at: dict[tuple[str, ...], tuple[int, int, int]],
) -> Edge:
    """The arrow from ``parent``'s right side through its waypoints to ``child``'s left:
    a curve between columns, a straight line across each waypoint's column."""
    _, x, y = at[("step", parent)]
    points = [(x + NODE_WIDTH, y + NODE_HEIGHT // 2)]
    for key in via:
        _, x, y = at[key]
        points += [(x, y + WAYPOINT_HEIGHT // 2), (x + NODE_WIDTH, y + WAYPOINT_HEIGHT // 2)]
    _, x, y = at[("step", child)]
    # The arrowhead's tip (the path's end) touches the child's box.
    points.append((x - 1, y + NODE_HEIGHT // 2))
    (x1, y1), *rest = points
    parts = [f"M{x1},{y1}"]
    for index, (x2, y2) in enumerate(rest):
        if index % 2 == 0:  # between two columns
            bend = (x2 - x1) // 2
            parts.append(f"C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}")
        else:  # across a waypoint's column
            parts.append(f"L{x2},{y2}")
        x1, y1 = x2, y2
    return Edge(parent, child, status, " ".join(parts))

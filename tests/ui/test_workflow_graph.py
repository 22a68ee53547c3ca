"""The workflow graph's drawing: a column per depth (the longest path from the roots), an
arrow per dependency, an arrow that spans columns routed around the boxes it passes, long
names cut to fit, and dependencies that are not among the steps drawn as nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from uuid import UUID, uuid4

from taskq_cli.ui.workflow_graph import NAME_CHARS, Graph, Node, columns, layout


@dataclass(frozen=True)
class Step:
    name: str
    after: tuple[str, ...] = ()
    status: str = "waiting"
    job_id: UUID = field(default_factory=uuid4)


def _by_name(graph: Graph) -> dict[str, Node]:
    return {node.name: node for node in graph.nodes}


def _overlaps(a: Node, b: Node) -> bool:
    return (
        a.x < b.x + b.width
        and b.x < a.x + a.width
        and a.y < b.y + b.height
        and b.y < a.y + a.height
    )


def test_each_step_stands_one_column_right_of_its_deepest_dependency() -> None:
    steps = [
        Step("a"),
        Step("b", ("a",)),
        Step("c", ("a",)),
        Step("d", ("b", "c")),
        Step("e", ("a", "d")),  # its deepest dependency is d
        Step("lone"),
    ]
    assert columns(steps) == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3, "lone": 0}
    graph = layout(steps)
    nodes = _by_name(graph)
    assert {(e.parent, e.child) for e in graph.edges} == {
        ("a", "b"),
        ("a", "c"),
        ("b", "d"),
        ("c", "d"),
        ("a", "e"),
        ("d", "e"),
    }
    assert nodes["a"].x < nodes["b"].x == nodes["c"].x < nodes["d"].x < nodes["e"].x
    boxes = list(nodes.values())
    assert not any(_overlaps(p, q) for i, p in enumerate(boxes) for q in boxes[i + 1 :])
    for node in boxes:  # every box inside the drawing
        assert 0 <= node.x and node.x + node.width <= graph.width
        assert 0 <= node.y and node.y + node.height <= graph.height


def test_an_arrow_across_columns_never_runs_behind_a_box() -> None:
    steps = [Step("a"), Step("b", ("a",)), Step("c", ("b",)), Step("d", ("c", "a"))]
    graph = layout(steps)
    nodes = _by_name(graph)
    (long,) = [e for e in graph.edges if (e.parent, e.child) == ("a", "d")]
    # Across each column it crosses (b's, c's), the arrow is a straight line beside the box.
    lines = re.findall(r"(\d+),(\d+) L(\d+),(\d+)", long.path)
    assert len(lines) == 2, long.path
    for (x1, y1, x2, y2), box in zip(lines, (nodes["b"], nodes["c"]), strict=True):
        assert (int(x1), int(x2)) == (box.x, box.x + box.width) and y1 == y2
        assert not box.y <= int(y1) <= box.y + box.height
    # It ends at d's left side, where the arrowhead touches the box.
    end = long.path.rsplit(" ", 1)[1]
    assert end == f"{nodes['d'].x - 1},{nodes['d'].y + nodes['d'].height // 2}"


def test_long_names_are_cut_and_unknown_dependencies_draw_nothing() -> None:
    name = "transform_the_partition_of_the_day"
    graph = layout([Step("root", status="succeeded"), Step(name, ("root", "archived-step"))])
    nodes = _by_name(graph)
    assert nodes[name].label == name[: NAME_CHARS - 1] + "…"
    assert nodes["root"].label == "root" and nodes["root"].status == "succeeded"
    assert [(e.parent, e.child, e.status) for e in graph.edges] == [("root", name, "succeeded")]
    assert layout([]) == Graph([], [], 0, 0)

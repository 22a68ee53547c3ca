"""The workflow pages show what the database holds: workflows newest first with their steps
counted by status (filtered by status), one workflow's graph (a box per step, coloured by
its status, an arrow per dependency, laid out by depth) and its steps (actor, attempt,
dependencies, error or cancel reason, each a link to its job); a step's job page names its
workflow and, while it waits, what it waits for; unknown and malformed ids; the JSON twins."""

from __future__ import annotations

import re
from uuid import UUID, uuid4

import pytest

from taskq_cli.ui.config import UiConfig
from tests.conformance.states import args
from tests.conftest import PgTarget
from tests.ui.conftest import TOKEN
from tests.ui.inprocess import open_ui
from tests.ui.job_pages import HTMX
from tests.workflow_seed import make_workflow, run_step

pytestmark = [pytest.mark.postgres]

DIAMOND = [("a", ()), ("b", ("a",)), ("c", ("a",)), ("d", ("b", "c")), ("report", ("d",))]
_NODE = re.compile(
    r'<a href="/jobs/([0-9a-f-]{36})" class="wf-node status-(\w+)" data-step="([^"]*)"'
)
_BOX = re.compile(
    r'data-step="([^"]*)" data-status="\w+">\s*<title>[^<]*</title>\s*<rect x="(\d+)"'
)
_EDGE = re.compile(r'class="wf-edge[^>]* data-parent="([^"]*)" data-child="([^"]*)"')


def _row(html: str, attribute: str, value: object) -> str:
    start = html.index(f'<tr {attribute}="{value}"')
    return html[start : html.index("</tr>", start)]


def _section(html: str, name: str) -> str:
    start = html.index(f'id="{name}"')
    return html[start : html.index("</section>", start)]


async def test_the_list_counts_each_workflow_s_steps_newest_first(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        done = await make_workflow(backend, [("only", ())], name="backfill")
        await run_step(backend, done, "only")
        running = await make_workflow(backend, DIAMOND, finished=("report",))
        await run_step(backend, running, "a")
        await run_step(backend, running, "b", "running")

        html = (await ui.client.get("/workflows")).text
        assert 'href="/workflows" aria-current="page"' in html  # the nav link, this page
        rows = re.findall(r'<tr data-workflow="([0-9a-f-]{36})"', html)
        assert rows == [str(running.id), str(done.id)]  # newest first
        row = _row(html, "data-workflow", running.id)
        assert "nightly-etl" in row and "status-running" in row
        assert "2 waiting" in row and "1 pending" in row and "1 running" in row
        assert "1 succeeded" in row and f'href="/workflows/{running.id}"' in row
        assert "status-succeeded" in _row(html, "data-workflow", done.id)

        live = (await ui.client.get("/workflows?status=succeeded&part=live", headers=HTMX)).text
        assert str(done.id) in live and str(running.id) not in live
        listed = (await ui.client.get("/api/workflows", params={"status": "running"})).json()
        (summary,) = listed["workflows"]
        assert summary["id"] == str(running.id) and summary["steps"] == 5
        assert summary["by_status"] == {"waiting": 2, "pending": 1, "running": 1, "succeeded": 1}
        assert summary["finished_at"] is None and listed["more"] is False
        one = (await ui.client.get("/api/workflows", params={"limit": 1})).json()
        assert [w["id"] for w in one["workflows"]] == [str(running.id)] and one["more"] is True

        form = await ui.client.get("/workflows?status=")
        assert (form.status_code, form.headers["location"]) == (302, "/workflows")
        assert (await ui.client.get("/workflows?status=sometimes")).status_code == 400
        assert (await ui.client.get("/api/workflows?status=sometimes")).status_code == 400
        assert (await ui.client.get("/api/workflows?limit=0")).status_code == 400


async def test_a_workflow_s_page_draws_its_graph_and_lists_its_steps(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        wf = await make_workflow(
            backend, DIAMOND, finished=("report",), metadata={"night": "<i>4</i>"}
        )
        await run_step(backend, wf, "a")
        await run_step(backend, wf, "b", "failed")  # d is cancelled; c still to run
        await run_step(backend, wf, "c", "running")  # report runs once d ended: it is due

        html = (await ui.client.get(f"/workflows/{wf.id}")).text
        graph = _section(html, "graph")
        nodes = {name: (UUID(job), status) for job, status, name in _NODE.findall(graph)}
        assert nodes == {
            "a": (wf.jobs["a"], "succeeded"),
            "b": (wf.jobs["b"], "failed"),
            "c": (wf.jobs["c"], "running"),
            "d": (wf.jobs["d"], "cancelled"),
            "report": (wf.jobs["report"], "pending"),
        }
        edges = set(_EDGE.findall(graph))
        assert edges == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "report")}
        x = {name: int(left) for name, left in _BOX.findall(graph)}
        assert x["a"] < x["b"] == x["c"] < x["d"] < x["report"]  # a column per depth

        steps = _section(html, "steps")
        d = _row(steps, "data-step", "d")
        assert f'href="/jobs/{wf.jobs["d"]}"' in d and "status-cancelled" in d
        assert "etl_d" in d and "b, c" in d and "dependency b failed" in d
        b = _row(steps, "data-step", "b")
        assert "status-failed" in b and "ValueError: the March export has no header row" in b
        assert '<td class="num">1</td>' in b  # its attempt
        assert "(any outcome)" in _row(steps, "data-step", "report")
        assert "&lt;i&gt;4&lt;/i&gt;" in _section(html, "metadata")

        live = await ui.client.get(f"/workflows/{wf.id}?part=live", headers=HTMX)
        assert live.status_code == 200 and "<html" not in live.text and "wf-node" in live.text

        document = (await ui.client.get(f"/api/workflows/{wf.id}")).json()
        assert document["workflow"]["status"] == "running"
        assert document["metadata"] == {"night": "<i>4</i>"}
        by_name = {step["name"]: step for step in document["steps"]}
        assert [step["name"] for step in document["steps"]] == ["a", "b", "c", "d", "report"]
        assert by_name["d"]["after"] == ["b", "c"] and by_name["d"]["status"] == "cancelled"
        assert by_name["d"]["cancel_reason"] == "dependency b failed"
        assert by_name["report"]["requires"] == "finished"
        assert by_name["b"]["error_class"] == "ValueError"
        assert by_name["c"]["job_id"] == str(wf.jobs["c"])


async def test_names_are_escaped_in_the_graph_and_the_table(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        name = '<img src=x onerror="alert(1)">'
        wf = await make_workflow(ui.backend, [(name, ()), ("after", (name,))], name="<b>wf</b>")
        html = (await ui.client.get(f"/workflows/{wf.id}")).text
        assert "<img" not in html and "<b>wf" not in html
        assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in _section(html, "graph")
        assert "&lt;b&gt;wf&lt;/b&gt;" in html


async def test_a_step_s_job_page_names_its_workflow_and_what_it_waits_for(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        wf = await make_workflow(backend, DIAMOND, finished=("report",))
        await run_step(backend, wf, "a")
        await run_step(backend, wf, "b", "running")

        html = (await ui.client.get(f"/jobs/{wf.jobs['d']}")).text
        part = _section(html, "workflow")
        assert f'href="/workflows/{wf.id}"' in part and "nightly-etl" in part
        assert "running</span>, 1 of 5 steps ended" in part  # jobs show's words
        assert "<strong>d</strong>" in part
        assert f'href="/jobs/{wf.jobs["b"]}">b</a> <span class="status status-running">' in part
        assert "it runs once every one succeeded, and is cancelled if one fails for good" in part
        waits = part[part.index('id="waits-for"') :]
        assert "b (running), c (pending)</dd>" in waits

        document = (await ui.client.get(f"/api/jobs/{wf.jobs['d']}")).json()
        workflow = document["workflow"]
        assert (workflow["id"], workflow["step"], workflow["status"]) == (
            str(wf.id),
            "d",
            "running",
        )
        assert workflow["release"] == "wait"
        assert [d["step"] for d in workflow["waiting_for"]] == ["b", "c"]
        assert [(d["step"], d["status"]) for d in workflow["after"]] == [
            ("b", "running"),
            ("c", "pending"),
        ]

        # A root step names its workflow and waits for nothing.
        root = _section((await ui.client.get(f"/jobs/{wf.jobs['a']}")).text, "workflow")
        assert "<strong>a</strong>" in root and "waits-for" not in root

        # Its dependencies ended but no release ran yet (a worker died before its hook):
        # the page says the next release (the leader's sweep) decides it.
        chain = await make_workflow(backend, [("x", ()), ("y", ("x",))], queue="chain")
        await run_step(backend, chain, "x", release=False)
        html = (await ui.client.get(f"/jobs/{chain.jobs['y']}?part=live", headers=HTMX)).text
        assert (
            "nothing: every dependency ended (x succeeded); the release was lost and the "
            "leader&#39;s sweep decides the step at its next pass"
        ) in _section(html, "workflow")

        plain = await backend.enqueue(args())
        assert (await ui.client.get(f"/api/jobs/{plain.id}")).json()["workflow"] is None


async def test_unknown_and_malformed_ids_answer_404(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        for ref in (str(uuid4()), "yesterday"):
            page = await ui.client.get(f"/workflows/{ref}")
            assert page.status_code == 404 and "No such workflow" in page.text
            assert (await ui.client.get(f"/api/workflows/{ref}")).status_code == 404
        live = await ui.client.get(f"/workflows/{uuid4()}?part=live", headers=HTMX)
        assert live.status_code == 404 and live.headers["content-type"].startswith("text/plain")

        # A workflow's id pasted into a job's URL opens the workflow.
        wf = await make_workflow(ui.backend, [("only", ())])
        pasted = await ui.client.get(f"/jobs/{wf.id}")
        assert (pasted.status_code, pasted.headers["location"]) == (302, f"/workflows/{wf.id}")


async def test_the_openapi_document_describes_the_workflow_twins(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        assert (await ui.client.get("/api/workflows")).status_code == 401  # the token guards
        bearer = {"authorization": f"Bearer {TOKEN}"}
        document = (await ui.client.get("/api/openapi.json", headers=bearer)).json()
        paths, schemas = document["paths"], document["components"]["schemas"]
        listed = paths["/api/workflows"]["get"]
        assert {p["name"] for p in listed["parameters"]} == {"status", "limit"}
        assert {"200", "400", "401", "503"} <= set(listed["responses"])
        one = paths["/api/workflows/{ref}"]["get"]["responses"]
        assert {"200", "404", "401", "503"} <= set(one)
        for answers in (listed["responses"], one):
            assert "$ref" in answers["200"]["content"]["application/json"]["schema"]
        assert {"WorkflowsView", "WorkflowDetailView", "WorkflowStepView"} <= set(schemas)
        assert "workflow" in schemas["JobDetailView"]["properties"]
        assert "/workflows" not in paths and "/workflows/{ref}" not in paths

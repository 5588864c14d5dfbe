"""The dashboard in Debian's headless Chromium (driven by playwright, which
never downloads a browser of its own here), on a real 3-node cluster."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from tests.harness import WAIT_TIMEOUT, in_ci, join, wait_until
from tests.http.conftest import start_http_node

CHROMIUM = "/usr/bin/chromium"
# Flags for a machine without a network or a display.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]

pytestmark = pytest.mark.xdist_group("dashboard")


@pytest.fixture
async def browser():
    if not os.path.exists(CHROMIUM):
        if in_ci():
            pytest.fail(f"{CHROMIUM} missing: `make deps` installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} missing (make deps)")
    from playwright.async_api import async_playwright
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


def qstate(client, queue: str) -> bytes:
    return client.execute_command("PAUSE", queue, "state")


async def test_dashboard_on_a_three_node_cluster(node_factory, browser, tmp_path):
    nodes = [start_http_node(node_factory) for _ in range(3)]
    join(nodes)
    first = nodes[0]
    c = first.client()
    for i in range(5):
        c.execute_command("ADDJOB", "emails", f"mail {i}", 0, "REPLICATE", 1)
    letter = {"dead_letter": 1, "queue": "emails", "id": "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0000",
              "attempts": 5, "nacks": 4, "additional_deliveries": 0,
              "error": "ValueError: boom", "traceback": None, "failed_at": 1700000000.0,
              "body": "the original"}
    dead_id = c.execute_command("ADDJOB", "emails:dead", json.dumps(letter), 0,
                                "REPLICATE", 1).decode()

    page = await browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(WAIT_TIMEOUT * 1000)     # waits for what the page shows
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(first.http_url + "/")

    # Nodes and queues.
    await page.wait_for_function("document.querySelectorAll('#nodes tbody tr').length === 3")
    node_rows = await page.locator("#nodes tbody tr").all_inner_texts()
    for n in nodes:
        assert any(f"127.0.0.1:{n.port}" in row and "ok" in row for row in node_rows), node_rows
    row = page.locator('#queues tr[data-queue="emails"]')
    await row.wait_for()
    assert (await row.locator("td").nth(1).inner_text()) == "5"
    assert await page.locator('#queues tr[data-queue="emails:dead"]').count() == 1

    # The chart moves while jobs flow.
    chart = page.locator("#chart canvas")
    await chart.wait_for()
    before = await chart.screenshot()
    stop = threading.Event()

    def flow():
        p = first.client()
        while not stop.is_set():
            p.execute_command("ADDJOB", "flow", "x" * 20, 0, "REPLICATE", 1)
            p.execute_command("GETJOB", "NOHANG", "FROM", "flow")
    t = threading.Thread(target=flow, daemon=True)
    t.start()
    try:
        flow_row = page.locator('#queues tr[data-queue="flow"]')
        await flow_row.wait_for()
        await page.wait_for_function(
            "() => { const r = document.querySelector('#queues tr[data-queue=\"flow\"]');"
            " return r && parseFloat(r.cells[2].textContent) > 0; }")
        # A few points on the chart: it is drawn anew as they come.
        async with asyncio.timeout(WAIT_TIMEOUT):
            while await chart.screenshot() == before:
                await asyncio.sleep(0.25)
        legend = await page.locator(".u-legend").inner_text()
        assert "in (jobs/s)" in legend
        await page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    finally:
        stop.set()
        t.join()

    # Pause and resume buttons.
    await row.get_by_role("button", name="Pause in").click()
    await page.wait_for_function(
        "document.querySelector('#queues tr[data-queue=\"emails\"]').cells[7].textContent === 'in'")
    assert qstate(c, "emails") == b"in"
    await page.locator('#queues tr[data-queue="emails"]').get_by_role(
        "button", name="Resume").click()
    await page.wait_for_function(
        "document.querySelector('#queues tr[data-queue=\"emails\"]').cells[7].textContent"
        " === 'none'")
    assert qstate(c, "emails") == b"none"

    # A job found by id: SHOW's fields.
    jid = c.execute_command("QPEEK", "emails", 1)[0][1].decode()
    await page.fill("#job-id", jid)
    await page.click("#search button")
    await page.locator('#job tr[data-field="state"]').wait_for()
    assert "queued" in await page.locator('#job tr[data-field="state"]').inner_text()
    assert "mail 0" in await page.locator('#job tr[data-field="body"]').inner_text()

    # The dead letter, requeued: back in its queue, the letter acked.
    dead_row = page.locator(f'#dead tr[data-job="{dead_id}"]')
    await dead_row.wait_for()
    assert "ValueError: boom" in await dead_row.inner_text()
    await page.screenshot(path=str(tmp_path / "dashboard-dead.png"), full_page=True)
    await dead_row.get_by_role("button", name="Requeue").click()
    wait_until(lambda: c.execute_command("QLEN", "emails:dead") == 0)
    bodies = [j[2] for j in c.execute_command("QPEEK", "emails", 10)]
    assert b"the original" in bodies and len(bodies) == 6
    await page.wait_for_function("document.querySelectorAll('#dead tr[data-job]').length === 0")

    assert errors == []
    keep = os.environ.get("DISQUETTE_SCREENSHOTS")
    if keep:        # where a person can look at them
        for name in ("dashboard.png", "dashboard-dead.png"):
            shutil.copy(tmp_path / name, Path(keep) / name)

"""The operations page in a real browser (headless Chromium from Debian's packages, driven
by Playwright): it loads with no console error, its figures equal the database's on a
seeded scenario, a retry from the page moves a failed job back to ready and shows in the
action log, a non-operator gets no page, and a screenshot is kept (tests/artifacts/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pigeon.jobs.failed import show_job
from pigeon.ops.queries import overview
from pigeon.storage.base import Database
from tests.ops.scenario import APP, figures, ops_app, seed
from tests.server.conftest import OPERATOR_TOKEN, live_server

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
N_RECORDS = 200


def _page_figures(page: Any) -> dict[str, int]:
    found: dict[str, int] = page.eval_on_selector_all(
        "[data-figure]",
        "els => Object.fromEntries(els.map(e => "
        "[e.dataset.figure, parseInt(e.textContent.replace(/[≈,]/g, ''), 10)]))",
    )
    return found


def test_the_page_in_chromium(notes_db: Database, browser: Any) -> None:
    seed(notes_db, N_RECORDS)
    app = ops_app(notes_db)
    ARTIFACTS.mkdir(exist_ok=True)
    with live_server(app) as url:
        # a user (the stand-in authenticator takes "bob.1" as bob) and a stranger get no page
        bob = browser.new_context(extra_http_headers={"Authorization": "Bearer bob.1"})
        reply = bob.new_page().goto(url + "/pigeon/")
        assert reply.status == 404 and "data-figure" not in reply.text()
        bob.close()
        stranger = browser.new_context()
        page = stranger.new_page()
        reply = page.goto(url + "/pigeon/")
        assert reply.status == 401 and "data-figure" not in page.content()
        assert page.locator("input[name=token]").count() == 1  # the sign-in form instead
        page.fill("input[name=token]", "not-the-operator-token-at-all")
        page.fill("input[name=name]", "mallory")
        page.click("button[type=submit]")
        assert "that is not the operator token" in page.inner_text("#login-error")
        assert not [c for c in stranger.cookies() if c["name"] == "pigeon_ops"]
        stranger.close()

        context = browser.new_context(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url + "/pigeon/login")
        page.fill("input[name=token]", OPERATOR_TOKEN)
        page.fill("input[name=name]", "Ada on call")
        page.click("button[type=submit]")
        page.wait_for_url(url + "/pigeon/")
        (cookie,) = [c for c in context.cookies() if c["name"] == "pigeon_ops"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["path"] == "/pigeon/"
        assert OPERATOR_TOKEN not in cookie["value"]  # a session id, never the credential

        shown = _page_figures(page)
        truth = figures(overview(notes_db, APP))
        assert shown == truth  # every figure on the page, equal to the database's
        assert shown["failed.total"] == N_RECORDS // 50 + N_RECORDS // 10
        page.screenshot(path=str(ARTIFACTS / f"ops-page-{notes_db.backend}.png"), full_page=True)

        # retry one failed job: select it, dry run, reason, confirm
        group = page.locator("form.group").first
        job_id = int(group.locator("input[name=job]").first.get_attribute("value"))
        assert show_job(notes_db, job_id)["status"] == "failed"
        group.locator("input[name=job]").first.check()
        group.locator("button[value='retry:selected']").click()
        assert page.inner_text("#dry-run-count") == "1"
        page.click("#confirm")  # the reason is required: the browser refuses the form
        assert "/actions/preview" in page.url
        page.fill("textarea[name=reason]", "provider fixed, see incident 42")
        page.click("#confirm")
        page.wait_for_url(f"{url}/pigeon/?done=*")
        assert show_job(notes_db, job_id)["status"] == "queued"
        banner = page.inner_text("#done")
        assert "retry by Ada on call: 1 of 1 done" in banner
        log = page.inner_text("#actions")
        assert "provider fixed, see incident 42" in log and f"jobs {job_id}" in log
        reviews = show_job(notes_db, job_id)["reviews"]
        assert [(r["action"], r["reviewer"]) for r in reviews] == [("retry", "Ada on call")]

        # on a phone: nothing wider than the screen (the tables scroll inside their boxes)
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(url + "/pigeon/?refresh=0")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
        page.screenshot(
            path=str(ARTIFACTS / f"ops-page-phone-{notes_db.backend}.png"), full_page=True
        )
        assert errors == []
        context.close()

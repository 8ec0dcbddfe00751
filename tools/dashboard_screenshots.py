"""Screenshots of every dashboard page in a real browser (headless Chromium via Selenium).

    python tools/dashboard_screenshots.py RUNS_DIR [--out docs/img] [--port 8765]

Starts the dashboard on localhost (`trader dashboard`'s command), opens each page in
Debian's ``chromium`` through ``chromedriver``, waits until Streamlit has finished
running the page and the charts have drawn, and saves ``dashboard-<page>.png``. A page
that shows a Streamlit exception box is reported (exit status 1). `make screenshots`
runs it; ``tests/test_dashboard.py``'s browser test (marker ``browser``) does the same. A
developer's tool (Selenium), not part of the installed package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PAGES = {
    "strategies": "",
    "significance": "significance",
    "tournament": "tournament",
    "walkforward": "walkforward",
    "paper": "paper",
    "experiment": "experiment",
    "training": "training",
    "data": "data",
}
"""Page name -> URL path (st.navigation derives it from the page file's name; the default page is /)."""

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
"""Browser binaries looked for on PATH, Debian's first."""


@dataclass(frozen=True)
class PageShot:
    """One page's screenshot and what the page showed."""

    page: str
    path: Path
    exceptions: list[str]
    warnings: list[str]


def find_browser() -> tuple[str, str] | None:
    """(chromium binary, chromedriver binary) when both are installed, else None."""
    browser = next((shutil.which(name) for name in CHROMIUM if shutil.which(name)), None)
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def free_port() -> int:
    """A loopback port the kernel handed out and released (probably still free: `serve` tries again if not)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve(runs_dir: Path, port: int | None = None, timeout: float = 60.0, tries: int = 3) -> Iterator[str]:
    """Run the dashboard on 127.0.0.1 for the duration of the block; yield its URL.

    With no `port`, a free one is chosen; it is only probably still free when Streamlit binds it, so a
    server that exits before it answers is started again on another port, `tries` times in all. A port
    the caller named is tried once. An answer counts only once our own server listens on the port
    (another server there would answer the health check too, for another runs folder)."""
    from podracer.cli.dashboard import streamlit_command

    env = {**os.environ, "PODRACER_RUNS_DIR": str(Path(runs_dir).resolve())}
    errors = []
    for _ in range(tries if port is None else 1):
        chosen = port or free_port()
        with tempfile.TemporaryFile() as log:  # a file, not a pipe: a pipe nobody reads fills and stalls Streamlit
            process = subprocess.Popen(
                streamlit_command(runs_dir, chosen, "127.0.0.1"), env=env, stdout=subprocess.DEVNULL, stderr=log
            )
            try:
                url = answering(process, chosen, timeout)
                if url is not None:
                    yield url
                    return
                log.seek(0)
                errors.append(log.read().decode(errors="replace")[-500:])
            finally:
                stop(process)
    raise RuntimeError(f"the dashboard exited before it answered, {len(errors)} time(s): {errors[-1]}")


def answering(process: subprocess.Popen, port: int, timeout: float) -> str | None:
    """The URL once `process` listens on `port` and answers its health check there; None if it exits first."""
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200 and listens(process, port):
                    return url
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the dashboard did not answer on {url} within {timeout:.0f} s")
        time.sleep(0.5)
    return None


def listens(process: subprocess.Popen, port: int) -> bool:
    """Whether `process` or one of its children (`trader dashboard` runs Streamlit as one) listens on TCP `port`."""
    import psutil

    try:
        parent = psutil.Process(process.pid)
        family = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            if any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in member.net_connections("tcp")):
                return True
    return False


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)


def browser_driver(width: int = 1400, height: int = 1800):
    """A headless Chromium WebDriver (Selenium) of the given window size."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_browser()
    if found is None:
        raise RuntimeError(
            "chromium and chromedriver are not installed (Debian: apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(found[1]), options=options)


def wait_until_drawn(driver, timeout: float = 60.0, poll: float = 1.0) -> float:
    """Wait until Streamlit has run the page (no 'running' status) and the charts stopped changing.

    Returns the `time.monotonic()` at which the final state was first seen (the page
    is then checked once more, `poll` seconds later, to be sure it stopped changing).
    """
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    seen, seen_at = None, 0.0
    while time.monotonic() < deadline:
        time.sleep(poll)
        now = time.monotonic()
        body = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"], [data-testid="stAppViewContainer"]')
        running = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]')
        if not body or running:
            seen = None
            continue
        charts = len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg"))
        state = (charts, len(driver.page_source))
        if state == seen:
            return seen_at
        seen, seen_at = state, now
    raise RuntimeError(f"the page at {driver.current_url} did not finish drawing within {timeout:.0f} s")


def shoot(runs_dir: Path, out: Path, port: int | None = None, pages: dict[str, str] = PAGES) -> list[PageShot]:
    """Screenshot each page of the dashboard on `runs_dir` into `out`/dashboard-<page>.png."""
    from selenium.webdriver.common.by import By

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with serve(runs_dir, port) as url:
        driver = browser_driver()
        try:
            for page, path in pages.items():
                driver.get(f"{url}/{path}")
                wait_until_drawn(driver)
                exceptions = [e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')]
                warnings = [
                    e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentWarning"]')
                ]
                target = out / f"dashboard-{page}.png"
                height = driver.execute_script(
                    "return document.querySelector('[data-testid=\"stMain\"]')?.scrollHeight || 1800"
                )
                driver.set_window_size(1400, min(max(int(height) + 100, 900), 4000))
                wait_until_drawn(driver)
                driver.save_screenshot(str(target))
                shots.append(PageShot(page, target, exceptions, warnings))
        finally:
            driver.quit()
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", type=Path, help="folder of run directories to show")
    parser.add_argument("--out", type=Path, default=Path("docs/img"), help="where the PNGs go")
    parser.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    args = parser.parse_args(argv)
    if find_browser() is None:
        print(
            "error: chromium and chromedriver are not installed (make screenshots installs them with apt-get)",
            file=sys.stderr,
        )
        return 2
    if not args.runs_dir.is_dir():
        print(f"error: RUNS_DIR {args.runs_dir} is not a directory", file=sys.stderr)
        return 2
    shots = shoot(args.runs_dir, args.out, args.port)
    failed = False
    for shot in shots:
        status = "exception: " + shot.exceptions[0].splitlines()[0] if shot.exceptions else "ok"
        failed |= bool(shot.exceptions)
        print(f"{shot.page:<11} {shot.path}  {status}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

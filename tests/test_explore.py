"""``lockstep explore`` and ``lockstep show --html``: the explorer's JSON API, its refusals, the command's
life (URL on stderr, Ctrl-C), and the page in a real browser (Debian's Chromium driven by Playwright).

The browser tests need Playwright for Python (``pip install playwright``) and a system Chromium
(``apt-get install -y chromium``; ``LOCKSTEP_CHROMIUM`` may name another binary); Playwright never
downloads a browser here. Without them the browser tests are skipped, except under ``CI=true``,
where they fail saying what to install. Screenshots go to the test's ``tmp_path`` and, when
``LOCKSTEP_ARTIFACTS`` names a folder, are copied to ``$LOCKSTEP_ARTIFACTS/explore/``.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from lockstep.explore.page import static_page
from lockstep.explore.recorded import recorded_session
from lockstep.explore.server import ExplorerServer
from lockstep.explore.session import Session, SessionError
from lockstep.models import get_protocol
from lockstep.traces.merge import open_traces

ROOT = Path(__file__).resolve().parent.parent
CEILING = 120  # seconds: the most any wait here takes on a loaded machine
STEPS = 17  # dp-pause pre-fix seed: the shortest counterexample, of quiescent_during_rpc
PROPERTY = "quiescent_during_rpc"


def lockstep(*words: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockstep", *words], capture_output=True, text=True, timeout=CEILING, cwd=cwd
    )


@pytest.fixture(scope="module")
def counterexample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The counterexample ``lockstep check dp-pause --variant pre-fix`` writes."""
    target = tmp_path_factory.mktemp("counterexample") / "dp-pause-pre-fix.jsonl"
    completed = lockstep("check", "dp-pause", "--variant", "pre-fix", "--trace-out", str(target))
    assert completed.returncode == 1, completed.stderr
    return target


def events(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines()[1:]]


# ------------------------------------------------------------------------------ the JSON API in-process
class Client:
    """Requests to a running explorer, with the Host header a browser would send unless told otherwise."""

    def __init__(self, server: ExplorerServer) -> None:
        self.server = server
        self.base = f"/{server.token}/"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        host: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=CEILING)
        try:
            connection.putrequest(method, path, skip_host=True)
            connection.putheader("Host", f"127.0.0.1:{self.server.port}" if host is None else host)
            data = json.dumps(body).encode() if body is not None else b""
            for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(data)))
            connection.endheaders(data)
            response = connection.getresponse()
            raw = response.read()
            content_type = response.getheader("Content-Type", "")
            payload = json.loads(raw) if content_type.startswith("application/json") else {"text": raw.decode()}
            return response.status, payload, {name.lower(): value for name, value in response.getheaders()}
        finally:
            connection.close()

    def api(self, verb: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        method = "GET" if verb == "state" else "POST"
        status, payload, _ = self.request(method, self.base + "api/" + verb, {} if body is None else body)
        return status, payload

    def document(self, verb: str = "state", body: Any = None) -> dict[str, Any]:
        status, payload = self.api(verb, body)
        assert status == 200, payload
        document: dict[str, Any] = payload["document"]
        return document


@pytest.fixture
def client(counterexample: Path, tmp_path: Path) -> Iterator[Client]:
    """An explorer over the counterexample, served from this process (the real server, on a thread)."""
    session = recorded_session(open_traces([counterexample]))
    server = ExplorerServer(session, tmp_path / "exports")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Client(server)
    finally:
        server.shutdown()
        server.server_close()


def state_value(document: dict[str, Any], label: str) -> str:
    """The value the page shows for ``label`` at the cursor (the initial entries plus the steps' changes)."""
    values = dict(document["initial"]["entries"])
    for step in document["steps"][: document["cursor"]]:
        values.update({entry: after for entry, _, after in step["changes"]})
    return str(values[label])


def test_a_counterexample_opens_at_its_initial_state_with_its_steps(client: Client, counterexample: Path) -> None:
    document = client.document()
    assert document["cursor"] == 0 and len(document["steps"]) == STEPS
    assert [step["action"] for step in document["steps"]] == [event["action"] for event in events(counterexample)]
    assert all(step["model_step"] and step["facts"] is not None for step in document["steps"])
    assert document["lanes"][:2] == ["rank:0", "rank:1"] and "client" in document["lanes"]
    assert document["source"]["property"] == PROPERTY and document["source"]["verdict"] == "violated"
    last = document["steps"][-1]
    assert PROPERTY in last["facts"]["failing"]  # the violation, at the step where it happens
    assert all(PROPERTY not in step["facts"]["failing"] for step in document["steps"][:-1])
    assert last["mirrors"], "each step names the vLLM functions its action mirrors"
    assert last["facts"]["posted"]["worker_world"][1] == ["rpc#1"]  # the collective rank 1 waits in
    assert {prop["name"] for prop in document["properties"]} >= {PROPERTY, "no_hang", "no_deadlock"}
    assert document["enabled"], "the initial state has enabled actions"


def test_a_deadlock_marks_no_deadlock_at_the_state_where_nothing_is_enabled(tmp_path: Path) -> None:
    target = tmp_path / "deadlock.jsonl"
    completed = lockstep(
        "check", "dp-pause", "--variant", "pre-fix", "--property", "no_deadlock", "--trace-out", str(target)
    )
    assert completed.returncode == 1, completed.stderr
    session = recorded_session(open_traces([target]))
    steps = session.document()["steps"]
    last = steps[-1]["facts"]
    assert last["enabled"] == 0 and not last["final"] and "no_deadlock" in last["failing"]
    assert all("no_deadlock" not in step["facts"]["failing"] for step in steps[:-1])
    session.jump(len(steps))
    assert session.document()["enabled"] == []


def test_back_forward_jump_and_reset_move_the_cursor(client: Client) -> None:
    assert client.document("forward")["cursor"] == 1
    assert client.document("forward")["cursor"] == 2
    assert client.document("back")["cursor"] == 1
    assert client.document("jump", {"step": STEPS})["cursor"] == STEPS
    assert client.document("forward")["cursor"] == STEPS  # the end stays the end
    status, payload = client.api("jump", {"step": STEPS + 1})
    assert status == 400 and "no step" in payload["error"]
    status, payload = client.api("jump", {"step": "3"})
    assert status == 400
    assert client.document("reset")["cursor"] == 0
    assert client.document("back")["cursor"] == 0


def test_taking_an_enabled_action_extends_the_path_and_reset_restores_the_trace(client: Client) -> None:
    document = client.document("jump", {"step": 3})
    choice = document["enabled"][0]
    after = client.document("take", {"at": 3, "action": choice["action"], "arguments": choice["arguments"]})
    assert after["cursor"] == 4 and len(after["steps"]) == 4  # the trace's steps after 3 are dropped
    taken = after["steps"][3]
    assert taken["origin"] == "taken" and taken["label"] == choice["label"] and taken["actor"] == choice["actor"]
    assert taken["changes"] == choice["changes"]
    for label, _, new in choice["changes"]:
        assert state_value(after, label) == new
    back = client.document("back")
    assert back["cursor"] == 3 and len(back["steps"]) == 4
    restored = client.document("reset")
    assert restored["cursor"] == 0 and len(restored["steps"]) == STEPS
    assert all(step["origin"] == "trace" for step in restored["steps"])


def test_take_refuses_a_stale_cursor_and_an_action_that_is_not_enabled(client: Client) -> None:
    document = client.document()
    choice = document["enabled"][0]
    status, payload = client.api("take", {"at": 5, "action": choice["action"], "arguments": choice["arguments"]})
    assert status == 409 and "reload" in payload["error"]
    status, payload = client.api("take", {"at": 0, "action": "handle_collective_rpc", "arguments": {"rank": 1}})
    assert status == 400 and "is not enabled at step 0" in payload["error"] and "is false" in payload["error"]
    status, payload = client.api("take", {"at": 0, "action": "no_such_action", "arguments": {}})
    assert status == 400 and "no action 'no_such_action'" in payload["error"]
    status, payload = client.api("take", {"at": 0, "action": "handle_add", "arguments": {"rank": 7}})
    assert status == 400 and "beyond its bounds" in payload["error"]
    assert client.document()["cursor"] == 0 and len(client.document()["steps"]) == STEPS  # nothing changed


def test_export_writes_a_trace_that_replay_accepts(client: Client, tmp_path: Path) -> None:
    document = client.document("jump", {"step": STEPS})
    choice = next(choice for choice in document["enabled"] if choice["action"] == "client_collective_rpc")
    client.document("take", {"at": STEPS, "action": choice["action"], "arguments": choice["arguments"]})
    status, payload = client.api("export")
    assert status == 200, payload
    written = Path(payload["file"])
    assert written.parent == tmp_path / "exports" and written.read_text() == payload["text"]
    exported = events(written)
    assert len(exported) == STEPS + 1 and exported[-1]["action"] == "client_collective_rpc"
    assert json.loads(payload["text"].splitlines()[0])["parameters"]["property"] == PROPERTY
    completed = lockstep("replay", str(written), "--json")
    verdict = json.loads(completed.stdout)
    assert completed.returncode == 1 and verdict["verdict"] == "violated", completed.stderr
    assert verdict["property"] == PROPERTY and verdict["longest_conforming_prefix"] == STEPS + 1


def test_a_path_without_a_violation_exports_without_a_property(client: Client) -> None:
    client.document("jump", {"step": 4})
    status, payload = client.api("export")
    assert status == 200, payload
    header = json.loads(payload["text"].splitlines()[0])
    assert "property" not in header["parameters"] and header["source"]["backend"] == "lockstep-explore"
    completed = lockstep("replay", payload["file"], "--json")
    assert json.loads(completed.stdout)["longest_conforming_prefix"] == 4, completed.stderr


def test_a_foreign_host_header_is_refused(client: Client) -> None:
    """DNS rebinding: a page whose own name resolves to 127.0.0.1 sends its name as the Host."""
    port = client.server.port
    for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1:{port + 1}", ""):
        status, payload, _ = client.request("GET", client.base + "api/state", host=host)
        assert status == 403 and "answers only at" in payload["error"], host
        status, payload, _ = client.request("POST", client.base + "api/forward", {}, host=host)
        assert status == 403, host
    assert client.document()["cursor"] == 0  # the refused POSTs moved nothing
    status, _, _ = client.request("GET", client.base, host=f"localhost:{port}")
    assert status == 200


def test_requests_without_the_session_token_are_refused(client: Client) -> None:
    token = client.server.token
    for path in ("/", "/api/state", f"/{token[:-1]}/api/state", f"/{token}x/api/state", "/assets/explore.js"):
        status, payload, _ = client.request("GET", path)
        assert status == 403 and "no such session" in payload["error"], path
    status, _, _ = client.request("POST", f"/{token[::-1]}/api/forward", {})
    assert status == 403
    status, _, headers = client.request("GET", f"/{token}")
    assert status == 301 and headers["location"] == f"/{token}/"


def test_the_page_its_assets_and_bad_requests(client: Client) -> None:
    status, payload, headers = client.request("GET", client.base)
    assert status == 200 and "assets/explore.js" in payload["text"]
    assert "default-src 'none'" in headers["content-security-policy"] and headers["cache-control"] == "no-store"
    status, payload, headers = client.request("GET", client.base + "assets/explore.css")
    assert status == 200 and headers["content-type"].startswith("text/css")
    assert client.request("GET", client.base + "assets/../session.py")[0] == 404
    assert client.request("GET", client.base + "api/take")[0] == 405
    assert client.request("POST", client.base + "api/nothing", {})[0] == 404
    status, payload, _ = client.request(
        "POST", client.base + "api/forward", {}, headers={"Origin": "http://evil.example"}
    )
    assert status == 403 and "another site" in payload["error"]
    connection = http.client.HTTPConnection("127.0.0.1", client.server.port, timeout=CEILING)
    connection.request(
        "POST", client.base + "api/jump", body=b"{not json", headers={"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    assert response.status == 400 and "not JSON" in json.loads(response.read())["error"]
    connection.close()
    big = {"step": 1, "padding": "x" * 70_000}
    assert client.request("POST", client.base + "api/jump", big)[0] == 413
    assert client.document()["cursor"] == 0


def test_a_model_instance_starts_at_its_initial_state(tmp_path: Path) -> None:
    session = Session(get_protocol("dp-pause").instance("post-fix"))
    document = session.document()
    assert document["cursor"] == 0 and document["steps"] == [] and document["source"]["kind"] == "instance"
    choice = document["enabled"][0]
    session.take(0, choice["action"], choice["arguments"])
    assert session.document()["steps"][0]["label"] == choice["label"]
    written = session.export(tmp_path)
    completed = lockstep("replay", str(written), "--json")
    assert json.loads(completed.stdout)["longest_conforming_prefix"] == 1, completed.stderr


@pytest.fixture(scope="module")
def divergent(counterexample: Path) -> Path:
    """The counterexample with its third event changed to one the model cannot take (rank 1's queue is empty)."""
    lines = counterexample.read_text().splitlines()
    event = json.loads(lines[3])
    assert event["action"] == "handle_add" and event["args"] == {"rank": 0}
    event.update(actor="rank:1", args={"rank": 1})
    lines[3] = json.dumps(event)
    target = counterexample.with_name("diverges.jsonl")
    target.write_text("\n".join(lines) + "\n")
    return target


def test_a_divergence_is_explained_at_its_event(divergent: Path, tmp_path: Path) -> None:
    session = recorded_session(open_traces([divergent]))
    document = session.document()
    assert document["source"]["verdict"] == "diverges" and "diverges" in document["source"]["summary"]
    divergence = document["divergence"]
    assert divergence["step"] == 3 and divergence["event"] == 2 and divergence["line"] == 4
    assert "handle_add" in divergence["reason"]
    assert any("is false" in why for candidate in divergence["candidates"] for why in candidate["why"])
    assert [step["facts"] is not None for step in document["steps"]] == [True, True] + [False] * (STEPS - 2)
    session.jump(3)
    assert session.document()["enabled"] == []
    with pytest.raises(SessionError, match="no model state"):
        session.take(3, "handle_add", {"rank": 0})
    with pytest.raises(SessionError, match="step 3 .* is an event of the recording"):
        session.export(tmp_path)
    session.jump(2)  # the state the divergent event was taken from: the model goes on from there
    session.take(2, "handle_add", {"rank": 0})
    assert session.document()["steps"][2]["facts"]["failing"] == []


def test_a_runtime_recording_is_stepped_with_its_model_states(tmp_path: Path) -> None:
    """``lockstep run``'s recording: collective enter/complete events are not model steps, the others are."""
    recording = ROOT / "tests" / "fixtures" / "traces" / "runtime" / "dp-pause-post-fix"
    session = recorded_session(open_traces([recording]), profile="runtime")
    document = session.document()
    steps = document["steps"]
    assert document["source"]["verdict"] == "conforms" and len(steps) == 89
    assert {step["action"] for step in steps if not step["model_step"]} == {"enter", "complete"}
    assert all(step["facts"] is not None for step in steps)
    assert steps[-1]["facts"]["final"] and "resumed" in steps[-1]["facts"]["witnessed"]
    session.jump(len(steps))
    with pytest.raises(SessionError, match="is an event of the recording"):
        session.export(tmp_path)
    completed = lockstep("explore", str(recording), cwd=tmp_path)  # the model's own seed: replay refuses the header
    assert completed.returncode == 2 and "--profile runtime" in completed.stderr, completed.stderr


def test_the_explorer_imports_no_terminal_or_runtime_code() -> None:
    """The explorer sits on spec, traces and checkers (and the standard library's HTTP server)."""
    import ast

    for file in (ROOT / "lockstep" / "explore").glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                root = name.split(".")[0]
                assert root in sys.stdlib_module_names or name.split(".")[:2] in (
                    ["lockstep", "spec"],
                    ["lockstep", "traces"],
                    ["lockstep", "checkers"],
                    ["lockstep", "explore"],
                ), f"{file.name} imports {name}"


def test_the_static_page_cannot_be_broken_out_of_by_trace_text() -> None:
    hostile = "</script><script>alert(1)</script><!--"
    page = static_page({"title": hostile, "steps": [{"label": hostile}]})
    assert page.count("<script") == 2 and page.count("</script>") == 2 and hostile not in page
    assert "Content-Security-Policy" in page and "http" not in page.split("<body>")[0].replace("http-equiv", "")


# ------------------------------------------------------------------------------------ the command itself
class Explorer:
    """A ``lockstep explore`` process and the URL it printed."""

    def __init__(self, *words: str, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lockstep", "explore", *words],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
        )
        self.lines: list[str] = []
        found = threading.Event()

        def read() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.lines.append(line)
                if "http://" in line:
                    found.set()
            found.set()  # the process ended

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        found.wait(CEILING)
        urls = [word for line in self.lines for word in line.split() if word.startswith("http://")]
        assert urls, "".join(self.lines)
        self.url = urls[0]

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, and the exit code and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        code = self.process.wait(CEILING)
        self.reader.join(CEILING)
        return code, "".join(self.lines)


def test_the_command_prints_a_loopback_url_and_ctrl_c_stops_it_cleanly(counterexample: Path, tmp_path: Path) -> None:
    explorer = Explorer(str(counterexample), "--export-dir", str(tmp_path), cwd=tmp_path)
    try:
        address = urlsplit(explorer.url)
        assert address.hostname == "127.0.0.1" and address.port and len(address.path.strip("/")) >= 32
        connection = http.client.HTTPConnection("127.0.0.1", address.port, timeout=CEILING)
        connection.request("GET", address.path + "api/state")
        assert json.loads(connection.getresponse().read())["document"]["cursor"] == 0
        connection.close()
    finally:
        code, errors = explorer.stop()
    assert code == 0 and "explorer stopped (Ctrl-C)" in errors and "Traceback" not in errors, errors


def test_a_model_files_counterexample_is_explored_with_model_file(tmp_path: Path) -> None:
    """The example model of docs/adding-a-protocol.md: its counterexample opens against the file's model."""
    source = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "adding-a-protocol.md").read_text(), re.S)[0]
    model = tmp_path / "early_stop.py"
    model.write_text(source)
    trace = tmp_path / "early-stop.jsonl"
    completed = lockstep("check", "--model-file", str(model), "--variant", "pre-fix", "--trace-out", str(trace))
    assert completed.returncode == 1, completed.stderr
    assert lockstep("explore", str(trace), cwd=tmp_path).returncode == 2  # no built-in protocol of that name
    explorer = Explorer(str(trace), "--model-file", str(model), cwd=tmp_path)
    try:
        address = urlsplit(explorer.url)
        connection = http.client.HTTPConnection("127.0.0.1", address.port, timeout=CEILING)
        connection.request("GET", address.path + "api/state")
        document = json.loads(connection.getresponse().read())["document"]
        connection.close()
    finally:
        code, errors = explorer.stop()
    assert code == 0, errors
    assert document["model"]["protocol"] == "early-stop" and len(document["steps"]) == len(events(trace))
    assert document["source"]["verdict"] == "violated"


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["no-such-protocol"], "no-such-protocol"),
        (["missing.jsonl"], "missing.jsonl"),
        (["dp-pause", "--profile", "runtime"], "--profile and --trust-header apply to a trace"),
        ([], "name a protocol"),
    ],
)
def test_bad_input_exits_2_before_serving(words: list[str], message: str, tmp_path: Path) -> None:
    completed = lockstep("explore", *words, cwd=tmp_path)
    assert completed.returncode == 2 and message in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr and "http://" not in completed.stderr


def test_show_html_writes_one_self_contained_file(counterexample: Path, tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    completed = lockstep("show", "--html", str(counterexample), "-o", str(target))
    assert completed.returncode == 0 and f"wrote {target}" in completed.stderr, completed.stderr
    page = target.read_text()
    assert '<script type="application/json" id="lockstep-document">' in page
    assert not re.findall(r'(?:src|href)="(?!data:)', page)  # nothing loaded from anywhere
    completed = lockstep("show", "--html", str(counterexample), "-o", str(counterexample))
    assert completed.returncode == 2 and "input" in completed.stderr
    completed = lockstep("show", str(counterexample), "-o", str(target))
    assert completed.returncode == 2 and "applies to show --html" in completed.stderr


# --------------------------------------------------------------------------------------- in a browser
def browser_executable() -> str:
    """The system Chromium, or a skip (a failure under CI=true) saying what to install."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("Playwright for Python (.venv/bin/pip install playwright; never `playwright install`)")
    executable = os.environ.get("LOCKSTEP_CHROMIUM") or next(
        (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None
    )
    if executable is None:
        missing.append("Debian's Chromium (apt-get install -y chromium)")
    if missing:
        message = "the browser tests need " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    assert executable is not None
    return executable


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    executable = browser_executable()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            opened = browser.new_page(viewport={"width": 1600, "height": 1000})
            problems: list[str] = []
            opened.on("pageerror", lambda error: problems.append(str(error)))
            opened.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
            opened.set_default_timeout(CEILING * 1000)
            yield opened
            assert not problems, problems
        finally:
            browser.close()


def screenshot(page: Any, folder: Path, name: str) -> None:
    """A screenshot in ``folder`` and, with ``LOCKSTEP_ARTIFACTS`` set, a copy there."""
    target = folder / f"{name}.png"
    page.screenshot(path=str(target))
    assert target.stat().st_size > 0
    artifacts = os.environ.get("LOCKSTEP_ARTIFACTS")
    if artifacts:
        copy = Path(artifacts) / "explore"
        copy.mkdir(parents=True, exist_ok=True)
        shutil.copy(target, copy / target.name)


def shown(page: Any, label: str) -> str:
    text: str = page.text_content(f'#state tr[data-entry="{label}"] td.value')
    return text


def expected_text(value: Any) -> str:
    """A scalar JSON value as the state panel renders it."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def check_state_panel(page: Any, trace: list[dict[str, Any]], step: int) -> None:
    """The page is at ``step`` and its state panel shows each scalar the trace observed up to it."""
    page.wait_for_selector(f'body[data-cursor="{step}"]')
    assert page.text_content("#position") == f"step {step} of {STEPS}"
    assert page.text_content("#state-title") == f"State at step {step}"
    latest: dict[str, Any] = {}
    for event in trace[:step]:
        latest.update({name: value for name, value in event["observed"].items() if not isinstance(value, list)})
    assert latest or step == 0
    for name, value in latest.items():
        assert shown(page, name) == expected_text(value), (step, name)


def test_the_explorer_in_a_browser(page: Any, counterexample: Path, tmp_path: Path) -> None:
    """Open a counterexample, step through it, take an enabled action, step back, export."""
    trace = events(counterexample)
    explorer = Explorer(str(counterexample), "--export-dir", str(tmp_path / "exports"), cwd=tmp_path)
    try:
        page.goto(explorer.url)
        check_state_panel(page, trace, 0)
        assert page.is_visible("#enabled-panel") and page.locator("#enabled button").count() > 0
        screenshot(page, tmp_path, "1-initial")
        for step in range(1, 6):
            page.click("#forward")
            check_state_panel(page, trace, step)
        assert page.get_attribute('#swimlanes tr[data-step="5"]', "class") == "current"
        assert "(quiescent_during_rpc)" not in page.text_content("#properties")
        screenshot(page, tmp_path, "2-step-5")

        page.click(f'#swimlanes tr[data-step="{STEPS}"] td.number')  # jump to the violation
        check_state_panel(page, trace, STEPS)
        violated = page.locator(f'#properties tr.violated[data-property="{PROPERTY}"]')
        assert violated.count() == 1 and f"first false at step {STEPS}" in violated.text_content()
        assert "violation" in (page.get_attribute(f'#swimlanes tr[data-step="{STEPS}"]', "class") or "")
        assert "rpc#1" in page.text_content('#collectives table[data-communicator="worker_world"]')
        screenshot(page, tmp_path, "3-violation")

        assert shown(page, "client.sent_to[0]") == "false"
        page.click('#enabled button[data-label="client_collective_rpc(rank=0)"]')  # take an enabled action
        page.wait_for_selector(f'body[data-cursor="{STEPS + 1}"]')
        assert page.text_content("#position") == f"step {STEPS + 1} of {STEPS + 1}"
        assert shown(page, "client.sent_to[0]") == "true"
        assert "changed" in (page.get_attribute('#state tr[data-entry="client.sent_to[0]"]', "class") or "")
        assert "(taken)" in page.text_content(f'#swimlanes tr[data-step="{STEPS + 1}"]')
        screenshot(page, tmp_path, "4-taken")

        page.click("#back")  # step back
        page.wait_for_selector(f'body[data-cursor="{STEPS}"]')
        assert page.text_content("#position") == f"step {STEPS} of {STEPS + 1}"
        assert shown(page, "client.sent_to[0]") == "false"
        screenshot(page, tmp_path, "5-back")

        page.click("#forward")
        page.wait_for_selector(f'body[data-cursor="{STEPS + 1}"]')
        page.click("#export")
        page.wait_for_selector("#status a[download]")
        written = Path(page.text_content("#status").removeprefix("wrote ").removesuffix(" download").strip())
        completed = lockstep("replay", str(written), "--json")
        assert json.loads(completed.stdout)["longest_conforming_prefix"] == STEPS + 1, completed.stderr

        page.click("#reset")
        check_state_panel(page, trace, 0)
        assert page.text_content("#position") == f"step 0 of {STEPS}"
    finally:
        code, errors = explorer.stop()
    assert code == 0 and "Traceback" not in errors, errors


def test_show_html_in_a_browser(page: Any, counterexample: Path, tmp_path: Path) -> None:
    """The self-contained file, opened from disk: stepping works, there is nothing to take."""
    trace = events(counterexample)
    target = tmp_path / "counterexample.html"
    completed = lockstep("show", "--html", str(counterexample), "-o", str(target))
    assert completed.returncode == 0, completed.stderr
    page.goto(target.as_uri())
    check_state_panel(page, trace, 0)
    assert not page.is_visible("#enabled-panel") and not page.is_visible("#export")
    page.click("#forward")
    page.click("#forward")
    check_state_panel(page, trace, 2)
    page.click(f'#swimlanes tr[data-step="{STEPS}"] td.number')
    check_state_panel(page, trace, STEPS)
    assert page.locator(f'#properties tr.violated[data-property="{PROPERTY}"]').count() == 1
    page.click("#back")
    check_state_panel(page, trace, STEPS - 1)
    assert page.locator("#properties tr.violated").count() == 0
    screenshot(page, tmp_path, "show-html")


def test_show_html_of_a_divergent_trace_in_a_browser(page: Any, divergent: Path, tmp_path: Path) -> None:
    target = tmp_path / "diverges.html"
    completed = lockstep("show", "--html", str(divergent), "-o", str(target))
    assert completed.returncode == 0, completed.stderr
    page.goto(target.as_uri())
    assert page.is_visible("#divergence-panel")
    text = page.text_content("#divergence")
    assert "At step 3, event 2" in text and "handle_add(rank=1) is not enabled" in text and "is false" in text
    page.click('#swimlanes tr[data-step="3"] td.number')
    page.wait_for_selector('body[data-cursor="3"]')
    assert "divergence" in (page.get_attribute('#swimlanes tr[data-step="3"]', "class") or "")
    assert "No model state at this step" in page.text_content("#state-note")
    assert page.text_content('#state tr[data-entry="requests"] td.value') == "[1,0]"  # what the event observed (JSON)
    screenshot(page, tmp_path, "show-html-divergence")

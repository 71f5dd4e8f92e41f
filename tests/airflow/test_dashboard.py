"""The Replication dashboard after a real copy on the session's clusters: its data endpoint answers only to
Airflow's JWT (minted by the auth manager, as the UI's login does) and only with the flows whose DAG the user may
read, each DAG's Replication tab opens the page on its flow, and headless Chromium shows the real lag.

The copy leaves partition 0 of the topic 30 records behind, the oldest two minutes old; a fresh heartbeat and
checkpoint are written for the pair; a second flow's source points at a closed port and must read unreachable.
A->B has a 30 s RPO target, so with its two-minute-old uncopied record it is outside its SLO and drawn in red.
The screenshot of the page is saved in the test's tmp dir (docs/dashboard.png and the breached card alone as
docs/dashboard-slo.png with MIRRORFLOW_UPDATE_SCREENSHOT=1).
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.airflow.api_server import serving

from mirrorflow.airflow.dag_ids import flow_dag_id
from mirrorflow.config.loader import load_config
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.core.heartbeat import Heartbeat
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range

pytestmark = pytest.mark.integration
# Written to the test's own directory; MIRRORFLOW_UPDATE_SCREENSHOT=1 refreshes docs/dashboard.png instead.
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"
DOCS_SLO_SCREENSHOT = DOCS_SCREENSHOT.with_name("dashboard-slo.png")
KEEP = {"retention.ms": "-1"}
SECRET = "dashboard-s3cret"
JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{SECRET}";'
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1200,900",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def produce(producer: Producer, topic: str, partition: int, n: int, ts: int) -> None:
    for i in range(n):
        producer.produce(topic, key=b"k%d" % i, value=b"x" * 50, partition=partition, timestamp=ts + i)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def copied(kafka_clusters: LocalClusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A real copy of 190 records, then 30 more not copied; MIRRORFLOW_CONFIG names the flows' config."""
    topic = f"dash-{uuid.uuid4().hex[:8]}"
    config = tmp_path_factory.mktemp("dashboard") / "mm2.properties"
    config.write_text(
        "clusters = A, B, C\n"
        f"A.bootstrap.servers = {kafka_clusters.bootstrap('A')}\n"
        f"B.bootstrap.servers = {kafka_clusters.bootstrap('B')}\n"
        f"C.bootstrap.servers = 127.0.0.1:{free_port()}\n"
        "C.security.protocol = SASL_PLAINTEXT\nC.sasl.mechanism = PLAIN\n"
        f"C.sasl.jaas.config = {JAAS}\n"
        f"A->B.enabled = true\nA->B.topics = {topic}\nA->B.mirrorflow.rpo.target.seconds = 30\n"
        "C->B.enabled = true\nC->B.topics = nothing\n"
        "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
    )
    admin = {a: admin_client({"bootstrap.servers": kafka_clusters.bootstrap(a)}) for a in ("A", "B")}
    producer = {a: Producer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap(a)})) for a in ("A", "B")}
    admin["A"].create_topics([NewTopic(topic, 2, 1, config=KEEP)])[topic].result()
    admin["B"].create_topics([NewTopic(f"A.{topic}", 2, 1, config=KEEP)])[f"A.{topic}"].result()
    for name in ("mirrorflow-progress.A.internal", "mirrorflow-offset-map.A.internal", "heartbeats"):
        create_compacted_topic(admin["B"], "B", name, 1, 30)
    create_compacted_topic(admin["B"], "B", "A.checkpoints.internal", 1, 30)
    create_compacted_topic(admin["A"], "A", "mm2-offset-syncs.B.internal", 1, 30)

    flow = load_config(config).flow("A->B")
    ten_s_ago = int(time.time() * 1000) - 10_000
    produce(producer["A"], topic, 0, 150, ten_s_ago)
    produce(producer["A"], topic, 1, 40, ten_s_ago)
    tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 2)], interval=True)
    assert sum(copy_range(t).records for t in tasks) == 190
    produce(producer["A"], topic, 0, 30, int(time.time() * 1000) - 120_000)
    now = int(time.time() * 1000)
    beat = Heartbeat("A", "B", now)
    producer["B"].produce("heartbeats", key=beat.record_key(), value=beat.record_value(), partition=0, timestamp=now)
    mark = Checkpoint(f"g-{topic}", f"A.{topic}", 0, 100, 100)
    producer["B"].produce("A.checkpoints.internal", key=mark.record_key(), value=mark.record_value(), timestamp=now)
    assert producer["B"].flush(30) == 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MIRRORFLOW_CONFIG", str(config))
        mp.delenv("MIRRORFLOW_CLUSTERS", raising=False)
        mp.setenv("MIRRORFLOW_DASHBOARD_TIMEOUT_S", "3")
        yield {"topic": f"A.{topic}", "config": config}


@pytest.fixture(scope="module")
def tokens(airflow_db: None) -> dict[str, str]:
    """JWTs signed by the auth manager the API server uses: an admin's, and one of a user without a role."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    manager = init_auth_manager()
    return {
        "admin": manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="admin")),
        "nobody": manager.generate_jwt(SimpleAuthManagerUser(username="nobody", role=None)),
    }


def airflow_like_app() -> Any:
    """The plugin's app mounted the way Airflow's API server mounts plugin apps."""
    from fastapi import FastAPI

    from mirrorflow.airflow.dashboard import URL_PREFIX, app

    root = FastAPI()
    root.mount(URL_PREFIX, app)
    return root


def test_plugin_registers_the_app_and_the_nav_view() -> None:
    from mirrorflow_plugin import MirrorflowPlugin

    [entry] = MirrorflowPlugin.fastapi_apps
    assert entry["url_prefix"] == "/mirrorflow"
    [view] = [v for v in MirrorflowPlugin.external_views if v["destination"] == "nav"]
    assert (view["name"], view["href"]) == ("Replication", "mirrorflow/")


@pytest.fixture
def per_dag_token(airflow_db: None, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """`per_dag_token(username, *dag_ids)` -> the JWT of a viewer who may read only those DAGs (`general=True`: a
    plain viewer), with `PerDagAuthManager` as the API server's auth manager for the test."""
    from airflow.api_fastapi import app as api_app
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class PerDagAuthManager(SimpleAuthManager):  # type: ignore[misc]
        """SimpleAuthManager, except that the users in `readable` may read exactly their listed DAGs and no DAG in
        general (as FAB's per-DAG `DAG:<id>` permissions allow); other users keep their role's access."""

        readable: dict[str, frozenset[str]] = {}  # noqa: RUF012 (one manager per test)

        def is_authorized_dag(self, *, method: str, user: Any, access_entity: Any = None, details: Any = None) -> bool:
            if user.username not in self.readable:
                allowed = super().is_authorized_dag(
                    method=method, user=user, access_entity=access_entity, details=details
                )
                return bool(allowed)
            return method == "GET" and details is not None and details.id in self.readable[user.username]

    manager = PerDagAuthManager()
    monkeypatch.setattr(api_app._AuthManagerState, "instance", manager)

    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    def token(username: str, *dag_ids: str, general: bool = False) -> str:
        if not general:
            manager.readable[username] = frozenset(dag_ids)
        return str(manager.generate_jwt(SimpleAuthManagerUser(username=username, role="viewer")))

    return token


def test_data_api_shows_only_the_flows_whose_dag_the_user_may_read(
    copied: dict[str, Any], per_dag_token: Callable[..., str]
) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(airflow_like_app())

    def get(token: str, query: str = "") -> Any:
        return client.get(f"/mirrorflow/api/flows{query}", headers={"Authorization": f"Bearer {token}"})

    ab_dag, cb_dag = flow_dag_id("A", "B"), flow_dag_id("C", "B")
    only_ab = get(per_dag_token("ab-reader", ab_dag, "some_other_dag"))
    assert only_ab.status_code == 200, only_ab.text
    assert [(f["flow"], f["dag_id"]) for f in only_ab.json()["flows"]] == [("A->B", ab_dag)]
    # Nothing of the hidden flow: not its name, DAG, error or the address of its cluster C.
    assert "C->B" not in only_ab.text and cb_dag not in only_ab.text and "127.0.0.1" not in only_ab.text
    only_cb = get(per_dag_token("cb-reader", cb_dag))
    assert [f["flow"] for f in only_cb.json()["flows"]] == ["C->B"]
    # One Kafka read per cache interval, shared: both answers are cut from the same snapshot.
    assert only_ab.json()["generated_ms"] == only_cb.json()["generated_ms"]
    # The tab's filter narrows what the user may read, never widens it.
    ab_reader = per_dag_token("ab-reader", ab_dag)
    assert [f["flow"] for f in get(ab_reader, f"?dag_id={ab_dag}").json()["flows"]] == ["A->B"]
    for hidden in (f"?dag_id={cb_dag}", "?flow=C->B", "?dag_id=no_such_dag"):
        assert get(ab_reader, hidden).json()["flows"] == [], hidden

    assert get(per_dag_token("reads-nothing")).status_code == 403
    assert get(per_dag_token("reads-other-dags", "some_other_dag")).status_code == 403
    # A viewer with no per-DAG list reads every DAG, so every flow.
    viewer = get(per_dag_token("viewer", general=True))
    assert sorted(f["flow"] for f in viewer.json()["flows"]) == ["A->B", "C->B"]


def test_data_endpoint_needs_an_airflow_token(copied: dict[str, Any], tokens: dict[str, str]) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(airflow_like_app())
    assert client.get("/mirrorflow/api/flows").status_code == 401
    bad = client.get("/mirrorflow/api/flows", headers={"Authorization": "Bearer not-a-jwt"})
    assert bad.status_code == 403
    nobody = client.get("/mirrorflow/api/flows", headers={"Authorization": f"Bearer {tokens['nobody']}"})
    assert nobody.status_code == 403
    page = client.get("/mirrorflow/")
    assert page.status_code == 200 and "api/flows" in page.text and SECRET not in page.text

    ok = client.get("/mirrorflow/api/flows", headers={"Authorization": f"Bearer {tokens['admin']}"})
    assert ok.status_code == 200, ok.text
    flows = {f["flow"]: f for f in ok.json()["flows"]}
    assert set(flows) == {"A->B", "C->B"}
    ab, cb = flows["A->B"], flows["C->B"]
    assert cb["state"] == "unreachable" and cb["error"]
    rows = {p["partition"]: p for p in ab["partitions"] if p["topic"] == copied["topic"]}
    assert (rows[0]["lag_records"], rows[1]["lag_records"]) == (30, 0)
    assert 120 <= rows[0]["lag_seconds"] < 300 and rows[1]["lag_seconds"] == 0
    assert (rows[0]["record_count"], rows[1]["record_count"]) == (150, 40)
    assert ab["state"] == "lagging"
    # Outside its 30 s RPO since the oldest uncopied record (two minutes old) turned 30 s old.
    slo = ab["slo"]
    assert slo["breached"] and slo["rpo_breached"] and slo["rpo_target_s"] == 30 and slo["rpo_s"] >= 120
    assert 85_000 <= int(time.time() * 1000) - slo["since_ms"] < 270_000
    assert cb.get("slo") is None
    assert 0 <= ab["heartbeat_age_s"] < 60 and 0 <= ab["checkpoint_age_s"] < 60
    assert SECRET not in ok.text

    # The UI's way: the session cookie set at login.
    client.cookies.set("_token", tokens["admin"])
    assert client.get("/mirrorflow/api/flows").status_code == 200


def test_airflow_api_server_serves_the_plugin_behind_its_auth(copied: dict[str, Any], tokens: dict[str, str]) -> None:
    """Airflow's own app (plugins folder = ./plugins, set by the root conftest) mounts the dashboard."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    client = TestClient(create_app())
    assert client.get("/mirrorflow/api/flows").status_code == 401
    assert client.get("/mirrorflow/").status_code == 200
    client.cookies.set("_token", tokens["admin"])
    ok = client.get("/mirrorflow/api/flows")
    assert ok.status_code == 200 and {f["flow"] for f in ok.json()["flows"]} == {"A->B", "C->B"}


def test_each_dag_gets_a_replication_tab_that_opens_its_flow(copied: dict[str, Any], tokens: dict[str, str]) -> None:
    """The tab as Airflow's own plugins API lists it for the UI, followed as the UI does: `{DAG_ID}` replaced by
    the URL-encoded DAG id, the href taken relative to the UI's `<base href>` (the API server's root)."""
    from urllib.parse import quote, urljoin, urlsplit

    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    client = TestClient(create_app())
    client.cookies.set("_token", tokens["admin"])
    plugins = client.get("/api/v2/plugins")
    assert plugins.status_code == 200, plugins.text
    [plugin] = [p for p in plugins.json()["plugins"] if p["name"] == "mirrorflow"]
    [tab] = [v for v in plugin["external_views"] if v["destination"] == "dag"]
    assert tab["name"] == "Replication" and "{DAG_ID}" in tab["href"]
    dag = flow_dag_id("A", "B")
    page_url = urlsplit(urljoin("/", tab["href"].replace("{DAG_ID}", quote(dag, safe=""))))
    assert client.get(page_url.path).status_code == 200
    # What the page's script asks for: `api/flows` beside it, with the page's own query.
    data = client.get(urljoin(page_url.path, "api/flows") + "?" + page_url.query).json()
    assert [f["flow"] for f in data["flows"]] == ["A->B"] and data["filter"]["dag_id"] == dag


def test_metrics_serve_exports_heartbeat_and_checkpoint_age(copied: dict[str, Any]) -> None:
    from mirrorflow.cli.metrics_cmd import FlowCollector

    flows = [load_config(copied["config"]).flow("A->B")]
    samples = {(s.name, s.labels.get("source")): s.value for f in FlowCollector(flows).collect() for s in f.samples}
    assert 0 <= samples[("mirrorflow_heartbeat_age_seconds", "A")] < 60
    assert 0 <= samples[("mirrorflow_checkpoint_age_seconds", "A")] < 60


@pytest.fixture
def server(copied: dict[str, Any], tokens: dict[str, str]) -> Iterator[str]:
    with serving(airflow_like_app()) as url:
        yield url


def test_browser_shows_real_lag(server: str, copied: dict[str, Any], tokens: dict[str, str], tmp_path: Path) -> None:
    update = bool(os.environ.get("MIRRORFLOW_UPDATE_SCREENSHOT"))
    screenshot = DOCS_SCREENSHOT if update else tmp_path / "dashboard.png"
    slo_screenshot = DOCS_SLO_SCREENSHOT if update else tmp_path / "dashboard-slo.png"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory(prefix="mirrorflow-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        try:
            driver.get(f"{server}/mirrorflow/")
            wait = WebDriverWait(driver, 20)
            wait.until(lambda d: "Not signed in" in d.find_element(By.ID, "status").text)
            driver.add_cookie({"name": "_token", "value": tokens["admin"], "path": "/"})
            driver.refresh()
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-flow='A->B'] table"))
            card = driver.find_element(By.CSS_SELECTOR, "[data-flow='A->B']")
            assert card.get_attribute("data-state") == "lagging"
            rows = [r.text for r in card.find_elements(By.CSS_SELECTOR, "tr") if copied["topic"] in r.text]
            assert any(r.startswith(f"{copied['topic']} 0 30 ") for r in rows), rows
            assert any(r.startswith(f"{copied['topic']} 1 0 ") for r in rows), rows
            assert "heartbeat age" in card.text and "checkpoint age" in card.text
            assert card.get_attribute("data-slo") == "breached"
            assert "breached" in (card.get_attribute("class") or "")
            slo_text = card.find_element(By.CSS_SELECTOR, ".slo").text
            assert re.fullmatch(r"outside its 30 s RPO since \d\d:\d\d( [AP]M)? \(RPO now \d+\.\d min\)", slo_text)
            red = driver.execute_script(
                "return getComputedStyle(arguments[0]).color", card.find_element(By.CSS_SELECTOR, ".slo")
            )
            assert red == "rgb(180, 35, 24)", red
            unreachable = driver.find_element(By.CSS_SELECTOR, "[data-flow='C->B']")
            assert unreachable.get_attribute("data-state") == "unreachable"
            assert driver.find_elements(By.CSS_SELECTOR, "[data-flow='A->B'] svg rect")
            driver.save_screenshot(str(screenshot))
            card.screenshot(str(slo_screenshot))
            # The DAG tab's address: the page shows that DAG's flow only, and links to all flows.
            driver.get(f"{server}/mirrorflow/?dag_id={flow_dag_id('A', 'B')}")
            wait.until(lambda d: d.find_elements(By.ID, "all-flows"))
            assert [c.get_attribute("data-flow") for c in driver.find_elements(By.CSS_SELECTOR, ".flow")] == ["A->B"]
            assert driver.find_element(By.ID, "status").text.startswith(f"1 flow(s) of {flow_dag_id('A', 'B')}")
        finally:
            driver.quit()
    assert screenshot.stat().st_size > 10_000 and slo_screenshot.stat().st_size > 5_000

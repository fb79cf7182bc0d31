"""--prometheus: the endpoint, scraped while a job runs, serves what the store records."""

import contextlib
import socket
import sys
import threading
import time
import urllib.request

import pytest

from tensorgauge.cli import main
from tensorgauge.errors import TensorgaugeError
from tensorgauge.live.prometheus import parse_address
from tensorgauge.store import Store

JOB = ("import time, tensorgauge\n"
       "with tensorgauge.phase('busy'):\n"
       "    for _ in range(250):\n"
       "        t = time.time()\n"
       "        while time.time() - t < 0.01: pass\n"
       "        tensorgauge.step()\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line.startswith("tensorgauge_"):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0] + ("{phase=busy}" if 'phase="busy"' in name else "")] = float(value)
    return values


@contextlib.contextmanager
def scraping(port: int, every_seconds: float = 0.15):
    """Scrape http://127.0.0.1:PORT/metrics in the background; yields the list of texts scraped."""
    texts: list[str] = []
    done = threading.Event()

    def scrape():
        while not done.is_set():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
                    texts.append(response.read().decode())
            except OSError:
                pass
            time.sleep(every_seconds)

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        yield texts
    finally:
        done.set()
        thread.join()


def test_scraped_values_are_the_recorded_samples(store_path):
    port = free_port()
    with scraping(port) as texts:
        assert main(["run", "-q", "--name", "scraped", "--prometheus", str(port), "--", sys.executable, "-c", JOB]) == 0
    scrapes = [parse(text) for text in texts]
    samples = {round(s.t, 6): s for s in Store.open(store_path).samples(Store.open(store_path).run("scraped").run_id)}
    matched = [v for v in scrapes if round(v.get("tensorgauge_sample_time_seconds", -1), 6) in samples]
    assert len(matched) >= 5
    for values in matched:
        s = samples[round(values["tensorgauge_sample_time_seconds"], 6)]
        assert values["tensorgauge_rss_bytes"] == s.rss_bytes
        if s.cores_busy is not None:  # not on the first sample: a rate needs two (no gauge until then)
            assert values["tensorgauge_cores_busy"] == pytest.approx(s.cores_busy)
        assert values["tensorgauge_threads"] == s.threads
    busy = [v for v in matched if v.get("tensorgauge_phase{phase=busy}") == 1.0]
    assert busy and max(v.get("tensorgauge_steps_total", 0) for v in busy) > 50
    assert max(v.get("tensorgauge_steps_per_second", 0) for v in busy) > 20  # ~90 steps/s at 10 ms a step


def test_address_defaults_to_loopback_and_bad_ones_are_clear():
    assert parse_address("9464") == ("127.0.0.1", 9464)
    assert parse_address(":9464") == ("127.0.0.1", 9464)
    assert parse_address("0.0.0.0:9100") == ("0.0.0.0", 9100)
    for bad in ("http", "1:99999"):
        with pytest.raises(TensorgaugeError):
            parse_address(bad)


def test_a_port_in_use_is_one_line(store_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["run", "--prometheus", str(port), "--", sys.executable, "-c", "pass"]) == 2
    assert "cannot serve Prometheus metrics on 127.0.0.1:" in capsys.readouterr().err
    assert not store_path.exists()

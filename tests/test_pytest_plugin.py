"""The pytest plugin (`pytest --tensorgauge`), run as a user would: a test file in a fresh folder,
pytest in a subprocess, the plugin found by its entry point."""

import subprocess
import sys

TESTS = '''
import pytest

@pytest.mark.tensorgauge(max_memory="{limit}")
def test_small():
    held = b"x" * (2 << 20)
    assert len(held)

@pytest.mark.tensorgauge(max_memory="{limit}")
def test_large():
    held = b"x" * (96 << 20)  # written: resident
    assert len(held)
'''


def pytest_in(folder, limit, *args, store):
    (folder / "test_job.py").write_text(TESTS.format(limit=limit))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tensorgauge",
                           "--tensorgauge-store", str(store), *args, str(folder / "test_job.py")],
                          capture_output=True, text=True, cwd=folder, timeout=300)


def test_the_test_over_its_memory_limit_fails_with_figures_and_passes_when_raised(tmp_path):
    store = tmp_path / "runs.db"
    result = pytest_in(tmp_path, "32MiB", store=store)
    assert result.returncode == 1, result.stdout
    assert "1 failed, 1 passed" in result.stdout
    assert "test_job.py::test_large" in result.stdout and "over its limit of 32.0 MiB" in result.stdout
    assert "test_small" not in result.stdout.split("short test summary")[-1]
    assert "tensorgauge" in result.stdout and "OVER  test_job.py::test_large" in result.stdout  # the summary
    raised = pytest_in(tmp_path, "512MiB", store=store)
    assert raised.returncode == 0 and "2 passed" in raised.stdout, raised.stdout
    runs = subprocess.run([sys.executable, "-m", "tensorgauge", "runs", "--all", "--store", str(store)],
                          capture_output=True, text=True)
    assert runs.stdout.count("pytest test_job.py::tes") == 4  # each test a stored run


def test_without_the_option_nothing_is_recorded(tmp_path):
    (tmp_path / "test_job.py").write_text(TESTS.format(limit="1MiB"))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_job.py"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0 and "2 passed" in result.stdout  # the marker alone limits nothing


def test_a_bad_limit_is_a_usage_error(tmp_path):
    result = pytest_in(tmp_path, "lots", store=tmp_path / "runs.db")
    assert result.returncode != 0 and "tensorgauge marker" in (result.stdout + result.stderr)

"""The release a user installs: the sdist and the wheel built from this checkout carry the version, the
dependencies and entry points of pyproject.toml and the files the package needs at run time, and the
wheel installed into a new venv (outside the checkout) runs ``tensorgauge --version`` and ``demo``."""

import os
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import made_once, needs_tf

from tensorgauge import __version__

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.tf]


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist, and the wheel built from it (so the sdist is complete), with this venv's setuptools (no
    download: no build isolation)."""
    pytest.importorskip("build", reason="the [dev] extra (build) is not installed")

    def build(out: Path) -> None:
        built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                                str(ROOT)], capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]

    return made_once(tmp_path_factory, "dist", build)


def project() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads pyproject.toml")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_wheel_and_sdist_carry_the_version_dependencies_entry_points_and_data(dist):
    wheel = dist / f"tensorgauge-{__version__}-py3-none-any.whl"
    sdist = dist / f"tensorgauge-{__version__}.tar.gz"
    assert wheel.exists() and sdist.exists(), sorted(p.name for p in dist.iterdir())
    info = f"tensorgauge-{__version__}.dist-info"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = Parser().parsestr(z.read(f"{info}/METADATA").decode())
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    assert metadata["Name"] == "tensorgauge" and metadata["Version"] == __version__
    requires = [r for r in metadata.get_all("Requires-Dist") if "extra ==" not in r]
    assert sorted(r.replace(" ", "") for r in requires) == sorted(d.replace(" ", "") for d in project()["dependencies"])
    assert set(project()["optional-dependencies"]) <= set(metadata.get_all("Provides-Extra"))
    assert "tensorgauge = tensorgauge.cli:main" in entry_points  # the command
    assert "[pytest11]" in entry_points and "tensorgauge.pytest_plugin" in entry_points  # pytest --tensorgauge
    assert "tensorgauge/py.typed" in names  # types for the users' checkers
    assert "tensorgauge/hook/_site/sitecustomize.py" in names  # what puts the hook into the job
    assert not any(n.startswith("tests/") for n in names)
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "CHANGELOG.md", "tensorgauge/py.typed"} <= members


@needs_tf
def test_the_wheel_installed_in_a_new_venv_runs_version_and_demo(dist, tmp_path):
    """Installed without its dependencies (no download here): they come from this venv's site-packages,
    added after the new venv's own, where the wheel's tensorgauge is; the checkout is not on the path."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = dist / f"tensorgauge-{__version__}-py3-none-any.whl"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TENSORGAUGE_STORE")}
    env["TENSORGAUGE_DEMO_EPOCHS"] = "1"
    command = env_dir / "bin" / "tensorgauge"

    def run(*args):
        return subprocess.run([str(command), *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)

    imported = subprocess.run([python, "-c", "import tensorgauge; print(tensorgauge.__file__)"], capture_output=True,
                              text=True, cwd=tmp_path, env=env)
    assert imported.returncode == 0, imported.stderr[-2000:]
    where = imported.stdout.strip()
    assert where.startswith(site), where  # the wheel's package, not the checkout's
    version = run("--version")
    assert version.returncode == 0 and version.stdout.split() == ["tensorgauge", __version__]
    demo = run("demo", "--store", str(tmp_path / "store" / "runs.db"))
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "Phases" in demo.stdout and "epoch 1" in demo.stdout

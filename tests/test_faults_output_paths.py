"""Every path the tool writes to (the store, `--json`, `-o`, `--tensorboard`, `--checkpoint`, a bundle): never
the store itself, never through a link to nothing, never over another user's file, never into a store folder
another user controls. Each case records or reads a real store on disk and checks what is left there."""

import json
import os
import sys

import pytest

from tensorgauge.cli import main
from tensorgauge.store import Store

NOBODY = 65534  # another user, as root can make one
JOB = "open('ran', 'w').close()"


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("making a file another user's takes root")


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A store holding one run named ``keep``; the working folder a scratch one."""
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store" / "runs.db"
    monkeypatch.setenv("TENSORGAUGE_STORE", str(store))
    assert main(["run", "-q", "--name", "keep", "--", sys.executable, "-c", "pass"]) == 0
    return store


def _kept(store) -> bool:
    """The store still opens and holds the run ``keep``."""
    with Store.open(store, create=False) as opened:
        return [r.name for r in opened.runs()] == ["keep"]


WRITERS = {
    "show --json": lambda dest: ["show", "keep", "--json", dest],
    "show --from --json": lambda dest: ["show", "keep", "--from", "0", "--json", dest],
    "report -o": lambda dest: ["report", "keep", "-o", dest],
    "export -o": lambda dest: ["export", "keep", "-o", dest],
    "check -o": lambda dest: ["check", "keep", "--against", "keep", "-o", dest],
    "check --json": lambda dest: ["check", "keep", "--against", "keep", "--json", dest],
    "compare --json": lambda dest: ["compare", "keep", "keep", "--json", dest],
    "run --json": lambda dest: ["run", "-q", "--json", dest, "--", sys.executable, "-c", JOB],
}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("part", ["", "-wal"])
def test_no_output_is_written_onto_the_store(recorded, capsys, writer, part):
    """`show keep --json runs.db` replaced every run with the JSON and exited 0."""
    assert main(WRITERS[writer](f"{recorded}{part}")) == 2
    err = capsys.readouterr().err
    assert "is the run store itself: write somewhere else" in err and len(err.strip().splitlines()) == 1
    assert _kept(recorded) and not os.path.exists("ran")


@pytest.mark.parametrize("writer", WRITERS)
def test_no_output_is_made_through_a_link_to_nothing(recorded, tmp_path, capsys, writer):
    """A link planted where the output goes (to a file another user chose) made that file, as root."""
    target = tmp_path / "theirs" / "made.txt"
    target.parent.mkdir()
    (tmp_path / "out.txt").symlink_to(target)
    assert main(WRITERS[writer](str(tmp_path / "out.txt"))) == 2
    err = capsys.readouterr().err
    assert "it is a link to nothing" in err and len(err.strip().splitlines()) == 1
    assert not target.exists() and not os.path.exists("ran") and _kept(recorded)


def test_an_output_is_written_through_a_link_to_ones_own_file_and_not_over_another_users(recorded, tmp_path, capsys):
    mine = tmp_path / "mine.json"
    mine.write_text("old")
    (tmp_path / "link.json").symlink_to(mine)
    assert main(["show", "keep", "--json", str(tmp_path / "link.json")]) == 0
    assert json.loads(mine.read_text())["name"] == "keep" and (tmp_path / "link.json").is_symlink()
    _as_root()
    theirs = tmp_path / "theirs.json"
    theirs.write_text("their data")
    os.chown(theirs, NOBODY, NOBODY)
    capsys.readouterr()
    for writer in ("show --json", "export -o", "report -o"):
        assert main(WRITERS[writer](str(theirs))) == 2
        assert "belongs to another user (nobody)" in capsys.readouterr().err
    assert theirs.read_text() == "their data"


def test_a_dangling_link_as_the_store_is_refused_and_nothing_is_made(tmp_path, monkeypatch, capsys):
    """The store a link to a file in a shared folder: an empty file was made there as root, and the run was
    refused as "read-only and written by an older tensorgauge"."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "shared" / "planted.db"
    target.parent.mkdir()
    (tmp_path / "runs.db").symlink_to(target)
    assert main(["run", "-q", "--store", str(tmp_path / "runs.db"), "--", sys.executable, "-c", JOB]) == 2
    err = capsys.readouterr().err
    assert "is a link to nothing" in err and len(err.strip().splitlines()) == 1
    assert not target.exists() and not (tmp_path / "ran").exists()
    assert list(target.parent.iterdir()) == []


@pytest.mark.parametrize("part", ["-wal", "-shm"])
def test_a_dangling_link_beside_the_store_is_refused(tmp_path, monkeypatch, capsys, part):
    """SQLite makes its -wal and -shm files beside the store: through a planted link, where the link chose."""
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "mine" / "runs.db"
    store.parent.mkdir()
    Store.open(store).close()
    os.remove(f"{store}-wal") if os.path.exists(f"{store}-wal") else None
    target = tmp_path / "theirs"
    os.symlink(target, f"{store}{part}")
    assert main(["run", "-q", "--store", str(store), "--", sys.executable, "-c", JOB]) == 2
    assert "is a link to nothing" in capsys.readouterr().err
    assert not target.exists() and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("folder", ["0777", "another user's"])
def test_a_store_folder_another_user_controls_is_refused(tmp_path, monkeypatch, capsys, folder):
    """``$XDG_DATA_HOME/tensorgauge`` owned by another user, or writable by all: that user could move or
    replace ``runs.db``, and it was used as it was."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TENSORGAUGE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    shared = tmp_path / "data" / "tensorgauge"
    shared.mkdir(parents=True)
    if folder == "0777":
        shared.chmod(0o777)
    else:
        _as_root()
        os.chown(shared, NOBODY, NOBODY)
    assert main(["run", "-q", "--", sys.executable, "-c", JOB]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tensorgauge: the store's folder {shared} ") and "they could move or replace the store" in err
    assert ("mode 0777" if folder == "0777" else "belongs to another user (nobody)") in err
    assert list(shared.iterdir()) == [] and not (tmp_path / "ran").exists()


def test_a_sticky_shared_folder_still_takes_ones_own_store(tmp_path, monkeypatch):
    """A folder all may write with the sticky bit (as /tmp): others cannot move what is in it."""
    monkeypatch.chdir(tmp_path)
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    assert main(["run", "-q", "--store", str(shared / "runs.db"), "--", sys.executable, "-c", JOB]) == 0
    assert (tmp_path / "ran").exists()


def test_a_tensorboard_folder_of_another_user_is_refused(recorded, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    _as_root()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "tensorgauge").symlink_to(theirs)
    assert main(["run", "-q", "--tensorboard", str(tmp_path / "logs"), "--", sys.executable, "-c", JOB]) == 2
    assert "belongs to another user (nobody)" in capsys.readouterr().err
    assert list(theirs.iterdir()) == [] and not (tmp_path / "ran").exists()


def test_a_checkpoint_that_is_a_file_is_refused_at_the_start(recorded, tmp_path, capsys):
    """`--checkpoint /etc/passwd` was accepted (without --max-memory, never looked at)."""
    a_file = tmp_path / "passwd"
    a_file.write_text("root:x:0:0")
    for budget in ([], ["--max-memory", "1GiB"]):
        assert main(["run", "-q", "--checkpoint", str(a_file), *budget, "--", sys.executable, "-c", JOB]) == 2
        assert "is a file, not a folder" in capsys.readouterr().err
    assert a_file.read_text() == "root:x:0:0" and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("name", ["two\nlines", "tab\there", "bell\x07"])
def test_a_run_name_with_control_characters_is_refused(recorded, capsys, name):
    assert main(["run", "-q", "--name", name, "--", sys.executable, "-c", JOB]) == 2
    err = capsys.readouterr().err
    assert "a run's name is one line without control characters" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists("ran")
    from tensorgauge import monitor
    from tensorgauge.errors import TensorgaugeError

    with pytest.raises(TensorgaugeError, match="one line without control characters"):
        monitor(name=name)


def test_an_imported_name_with_a_newline_keeps_to_its_row_and_a_run_id_with_one_is_refused(recorded, tmp_path,
                                                                                         capsys):
    assert main(["export", "keep", "-o", str(tmp_path / "keep.json")]) == 0
    bundle = json.loads((tmp_path / "keep.json").read_text())
    bundle["run"]["run_id"] += "\n"
    (tmp_path / "bad-id.json").write_text(json.dumps(bundle))
    capsys.readouterr()
    assert main(["import", str(tmp_path / "bad-id.json")]) == 2
    assert "run_id is not a run id" in capsys.readouterr().err
    bundle["run"]["run_id"] = "imported-1"
    bundle["run"]["name"] = "first\nsecond"
    (tmp_path / "named.json").write_text(json.dumps(bundle))
    assert main(["import", str(tmp_path / "named.json")]) == 0
    capsys.readouterr()
    assert main(["runs"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 3 and "first\\x0asecond" in rows[1]


def test_check_markdown_shows_html_in_a_run_name_as_text(recorded, tmp_path, capsys):
    assert main(["run", "-q", "--name", "<img src=x onerror=alert(1)>", "--", sys.executable, "-c", "pass"]) == 0
    capsys.readouterr()
    main(["check", "<img src=x onerror=alert(1)>", "--against", "keep", "--format", "markdown"])
    out = capsys.readouterr().out
    assert "&lt;img src=x onerror=alert(1)>" in out and "<img" not in out

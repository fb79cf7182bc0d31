"""The Vega bundle every report inlines is cached in the user's cache folder: only the user can write
it there, whatever the umask, and a copy someone else could have written is never inlined."""

import os
import stat

import pytest

from tensorgauge.render import user_cache

OTHER_UID = 65534  # nobody


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    home = tmp_path / "cache"  # not there yet: made by the tool
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture
def umask_000():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_under_umask_000_the_vega_cache_is_the_users_alone(cache_home, umask_000):
    """It was a 0666 file in a 0777 folder: anyone could put script into every later report."""
    vl_convert = pytest.importorskip("vl_convert")
    from tensorgauge.render.html import javascript

    js = javascript()
    cached = cache_home / "tensorgauge" / f"vega-{vl_convert.__version__}.js"
    assert cached.read_text() == js
    assert mode(cache_home) == mode(cache_home / "tensorgauge") == 0o700
    assert mode(cached) == 0o644 and os.stat(cached).st_uid == os.getuid()
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # no partial file left


def test_a_cached_bundle_others_could_have_written_is_not_inlined(cache_home, umask_000):
    """What an earlier version left under umask 000 (0666 in 0777): rebuilt, and the folder closed."""
    vl_convert = pytest.importorskip("vl_convert")
    from tensorgauge.render.html import javascript

    folder = cache_home / "tensorgauge"
    folder.mkdir(parents=True, mode=0o777)
    planted = folder / f"vega-{vl_convert.__version__}.js"
    planted.write_text("alert('planted')")
    os.chmod(planted, 0o666)
    assert "planted" not in javascript()
    assert mode(folder) == 0o700 and mode(planted) == 0o644 and "planted" not in planted.read_text()


def test_the_users_own_cache_is_read_back(cache_home, umask_000):
    assert user_cache.write("x.js", "kept")
    assert user_cache.read("x.js") == "kept"


@pytest.mark.parametrize("plant", ["group-writable file", "symlink", "fifo", "hard link"])
def test_a_cache_file_that_is_not_the_users_alone_is_not_read(cache_home, tmp_path, plant):
    assert user_cache.write("x.js", "kept")
    path = cache_home / "tensorgauge" / "x.js"
    elsewhere = tmp_path / "elsewhere.js"
    elsewhere.write_text("planted")
    path.unlink()
    if plant == "group-writable file":
        path.write_text("planted")
        os.chmod(path, 0o664)
    elif plant == "symlink":
        path.symlink_to(elsewhere)
    elif plant == "fifo":
        os.mkfifo(path)  # opening it to read would wait for a writer for ever
    else:
        os.link(elsewhere, path)
    assert user_cache.read("x.js") is None


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user owns needs root")
def test_a_cache_folder_another_user_owns_is_neither_read_nor_written(cache_home):
    folder = cache_home / "tensorgauge"
    folder.mkdir(parents=True, mode=0o755)
    (folder / "x.js").write_text("planted")
    os.chown(folder / "x.js", OTHER_UID, OTHER_UID)
    os.chown(folder, OTHER_UID, OTHER_UID)
    assert user_cache.read("x.js") is None
    assert not user_cache.write("x.js", "mine")
    assert (folder / "x.js").read_text() == "planted" and mode(folder) == 0o755


def test_a_symlink_in_place_of_the_cache_folder_is_not_followed(cache_home, tmp_path):
    target = tmp_path / "theirs"
    target.mkdir(mode=0o700)
    cache_home.mkdir(mode=0o700)
    (cache_home / "tensorgauge").symlink_to(target)
    assert not user_cache.write("x.js", "mine")
    assert list(target.iterdir()) == []

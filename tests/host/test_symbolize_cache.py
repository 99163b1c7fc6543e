"""The symbolizer's /tmp fallback cache (/tmp/pmm-<uid>, used when the
user's own cache directory cannot be written) is used only when it is our
own private directory: one another user made first, or a symlink, is
neither read (forged maps) nor written (through their symlinks). A user
with uid UID runs pmctl's code in a forked child; "another user" is nobody."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from as_user import as_user as shared_as_user

from pmm import symbolize as sy

UID = 54_321  # a uid no one uses: its /tmp/pmm-UID is this test's alone
NOBODY = 65534
TMP = Path(f"/tmp/pmm-{UID}")
PID, TICKS = 4_000_555, 777
MAPS = [sy.Mapping(0x400000, 0x401000, "r-xp", 0, 42, "/usr/bin/true")]
FORGED = "7f0000000000-7f0000001000 r-xp 00000000 00:00 1 /tmp/evil.so\n"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("needs root to act as two other users")

    def wipe() -> None:
        if TMP.is_symlink() or TMP.is_file():
            TMP.unlink()
        elif TMP.exists():
            shutil.rmtree(TMP)

    wipe()
    yield
    wipe()


def as_user(fn: Callable[[], Any]) -> Any:
    """fn() in a forked child running as UID, with no usable home cache."""
    # HOME cannot be created: the /tmp fallback
    return shared_as_user(UID, UID, fn, env={"PMM_CACHE_DIR": None, "XDG_CACHE_HOME": None,
                                             "HOME": "/nonexistent"})


def paths(maps: list[sy.Mapping] | None) -> list[str] | None:
    return [m.path for m in maps] if maps is not None else None


def use_cache() -> Any:
    saved = sy.save_maps(PID, TICKS, MAPS)
    loaded = sy.load_cached_maps(PID, TICKS)
    sym = sy.sym_cache_file("/usr/bin/true", "addr2line")
    return [str(saved) if saved else None, paths(loaded), str(sym) if sym else None]


def plant(d: Path) -> None:
    """A cache as another user would lay it out: open to all, forged maps."""
    (d / "maps").mkdir(parents=True)
    (d / "sym").mkdir()
    (d / "maps" / f"{PID}-{TICKS}").write_text(FORGED)
    for p in (d, d / "maps", d / "sym"):
        os.chmod(p, 0o777)
    for p in (d, d / "maps", d / "sym", d / "maps" / f"{PID}-{TICKS}"):
        os.chown(p, NOBODY, NOBODY)


def test_own_fallback_is_made_private_and_used() -> None:
    saved, loaded, sym = as_user(use_cache)
    assert saved == f"{TMP}/maps/{PID}-{TICKS}"
    assert loaded == ["/usr/bin/true"]
    assert sym is not None and sym.startswith(f"{TMP}/sym/")
    for p, want in ((TMP, 0o700), (TMP / "maps", 0o700), (Path(saved), 0o600)):
        st = os.lstat(p)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (UID, want), p


def test_fallback_made_first_by_another_user_is_not_used() -> None:
    plant(TMP)
    assert as_user(use_cache) == [None, None, None]
    assert (TMP / "maps" / f"{PID}-{TICKS}").read_text() == FORGED
    assert sorted(os.listdir(TMP / "maps")) == [f"{PID}-{TICKS}"]


def test_fallback_that_is_a_symlink_is_not_used(tmp_path: Path) -> None:
    theirs = Path("/tmp") / f"pmm-theirs-{os.getpid()}"
    try:
        plant(theirs)
        os.symlink(theirs, TMP)
        os.lchown(TMP, NOBODY, NOBODY)
        assert as_user(use_cache) == [None, None, None]
        assert sorted(os.listdir(theirs / "maps")) == [f"{PID}-{TICKS}"]
    finally:
        shutil.rmtree(theirs)


def test_our_own_dir_given_to_others_is_not_used() -> None:
    plant(TMP)
    for p in (TMP, TMP / "maps", TMP / "sym", TMP / "maps" / f"{PID}-{TICKS}"):
        os.chown(p, UID, UID)  # ours, but anyone may write into it
    assert as_user(use_cache) == [None, None, None]


def test_a_symlink_in_the_cache_is_not_followed() -> None:
    as_user(use_cache)
    forged = Path("/tmp") / f"pmm-forged-{os.getpid()}"
    forged.write_text(FORGED)
    try:
        link = TMP / "maps" / f"{PID}-{TICKS + 100}"
        os.symlink(forged, link)
        os.lchown(link, UID, UID)
        assert as_user(lambda: paths(sy.load_cached_maps(PID, TICKS + 100))) is None
        # writing replaces the symlink, never writes through it
        assert as_user(lambda: str(sy.save_maps(PID, TICKS + 100, MAPS))) == str(link)
        assert forged.read_text() == FORGED
        assert not link.is_symlink()
        assert stat.S_IMODE(os.lstat(link).st_mode) == 0o600
    finally:
        forged.unlink()

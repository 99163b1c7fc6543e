"""Output files pmctl writes (a plot, a report, a profile), checked before
any work: a wrong path is a usage error at once, not after a watch."""

from __future__ import annotations

import os
from pathlib import Path

import typer


def check_output(path: Path, option: str, example: str, renamed_over: bool) -> None:
    """Refuses (typer.BadParameter, for `option`) a path this user cannot
    write: a directory (`example` names a file to give instead), a missing or
    non-directory parent, or no permission. renamed_over: the file is
    written beside the path and renamed over it, so its directory must take
    a new file even when the path exists."""

    def refuse(why: str) -> typer.BadParameter:
        return typer.BadParameter(why, param_hint=option)

    if path.is_dir():
        raise refuse(f"{path} is a directory: give the file to write, e.g. {path / example}")
    where = path.parent
    if not where.exists():
        raise refuse(f"cannot write {path}: its directory {where} does not exist")
    if not where.is_dir():
        raise refuse(f"cannot write {path}: {where} is not a directory")
    if (renamed_over or not path.exists()) and not os.access(where, os.W_OK | os.X_OK):
        raise refuse(f"cannot write {path}: this user cannot create files in {where}")
    if path.exists() and not os.access(path, os.W_OK):
        raise refuse(f"cannot write {path}: this user may not write it")

"""scripts/vmtest.sh keeps what was written before the VM when the output
goes to a file (`make test > log`): QEMU opens its console on
/proc/self/fd/1 with O_TRUNC, which on a file would erase the host's part.

The script runs from a copy of the tree whose .venv/bin/vng is a stand-in
that does what QEMU does to fd 1, then runs the --exec command as vng would.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]

FAKE_VNG = r"""#!/bin/bash
# vng stand-in: write to fd 1 the way QEMU's console does (open, truncate),
# then run the --exec command and exit with its status.
cmd=
while [ $# -gt 0 ]; do
	case "$1" in
	--exec) cmd=$2; shift 2 ;;
	*) shift ;;
	esac
done
echo "console: guest booted" >/proc/self/fd/1
bash -c "$cmd"
"""


def test_output_redirected_to_a_file_keeps_the_host_part(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("vmtest.sh", "kver.sh"):
        shutil.copy(TOP / "scripts" / name, tree / "scripts" / name)
    vng = tree / ".venv" / "bin" / "vng"
    vng.parent.mkdir(parents=True)
    vng.write_text(FAKE_VNG)
    vng.chmod(0o755)
    log = tmp_path / "log"
    with log.open("w") as out:
        r = subprocess.run(
            ["bash", "-c", "echo 'host: tests passed'; scripts/vmtest.sh -- echo 'guest: ran'"],
            cwd=tree, stdout=out, stderr=subprocess.STDOUT, timeout=60,
            env={"PATH": "/usr/bin:/bin", "VM_NO_KVM": "1", "KVER": "0-test",
                 "RESULTS": str(tmp_path / "results")})
    text = log.read_text()
    assert r.returncode == 0, text
    lines = text.splitlines()
    assert lines[0] == "host: tests passed", text
    assert "console: guest booted" in lines and "guest: ran" in lines, text

"""An install script run for real against this machine's /usr, /etc and /var,
with accounts a test chooses, changing nothing outside: a private mount
namespace with overlays (upper layers on a tmpfs) over /usr, /etc and /var,
and a tmpfs over /run whose /run/userdb holds accounts of a name service
beyond /etc/group and /etc/passwd (systemd's userdb, which nss-systemd
answers from, as nss-ldap would from a directory)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# $1 scratch (a tmpfs here), $2 results (outside), then the command
IN_NAMESPACE = r"""
set -eu
scratch=$1 results=$2
shift 2
mount -t tmpfs pmm-accounts "$scratch"
for d in usr etc var; do
	mkdir -p "$scratch/$d.up" "$scratch/$d.work"
	mount -t overlay "pmm-accounts-$d" \
		-o "lowerdir=/$d,upperdir=$scratch/$d.up,workdir=$scratch/$d.work" "/$d"
done
mount -t tmpfs pmm-accounts-run /run
mkdir /run/userdb
sh -ec "$PMM_SETUP"
# every file and directory the layers hold, with a digest of each file's data
layers() (
	cd "$scratch" && find usr.up etc.up var.up | sort | while read -r f; do
		if [ -f "$f" ] && [ ! -L "$f" ]; then
			echo "$f $(md5sum <"$f" | cut -c1-32)"
		else
			echo "$f"
		fi
	done
)
layers >"$scratch/before"
rc=0
"$@" >"$results/stdout" 2>"$results/stderr" </dev/null || rc=$?
layers >"$scratch/after"
echo "$rc" >"$results/rc"
diff "$scratch/before" "$scratch/after" | grep '^[<>]' >"$results/changed" || true
getent group "$PMM_GROUP_NAME" >"$results/group" || true
getent -s files group "$PMM_GROUP_NAME" >"$results/group_files" || true
getent passwd pmd >"$results/user" || true
getent -s files passwd pmd >"$results/user_files" || true
getent -s files group pmm-readers >"$results/readers" || true
cat /etc/modprobe.d/pmm.conf >"$results/modprobe" 2>/dev/null || true
"""


@dataclass
class Outcome:
    rc: int
    stdout: str
    stderr: str
    changed: list[str]  # lines of the layers' diff: "> path" added, "< path" gone
    group: str  # getent group NAME (every name service), "" when none
    group_files: str  # from /etc/group alone
    user: str  # getent passwd pmd
    user_files: str
    readers: str  # group pmm-readers, from /etc/group
    modprobe: str  # /etc/modprobe.d/pmm.conf


def userdb_group(name: str, gid: int) -> str:
    """Setup lines: a group of another name service (systemd's userdb)."""
    record = json.dumps({"groupName": name, "gid": gid})
    return (f"printf '%s' '{record}' >/run/userdb/{name}.group\n"
            f"ln -s {name}.group /run/userdb/{gid}.group\n")


def userdb_user(name: str, uid: int) -> str:
    """Setup lines: a user of another name service (systemd's userdb)."""
    record = json.dumps({"userName": name, "uid": uid, "gid": uid,
                         "homeDirectory": "/nonexistent", "shell": "/usr/sbin/nologin"})
    return (f"printf '%s' '{record}' >/run/userdb/{name}.user\n"
            f"ln -s {name}.user /run/userdb/{uid}.user\n")


def run_in_namespace(tmp: Path, setup: str, argv: list[str], env: dict[str, str],
                     cwd: Path | None = None, group: str = "pmm",
                     timeout: float = 600) -> Outcome:
    """argv run as root with the accounts `setup` (shell lines, run first)
    made, in a namespace whose /usr, /etc, /var and /run are throwaway
    layers; what it changed in them, and the accounts afterwards."""
    scratch, results = tmp / "scratch", tmp / "results"
    scratch.mkdir()
    results.mkdir()
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        IN_NAMESPACE, "in-namespace", str(scratch), str(results), *argv],
                       env={**env, "PMM_SETUP": setup, "PMM_GROUP_NAME": group}, cwd=cwd,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0 and (results / "rc").exists(), r.stderr

    def read(name: str) -> str:
        return (results / name).read_text()

    return Outcome(rc=int(read("rc")), stdout=read("stdout"), stderr=read("stderr"),
                   changed=read("changed").splitlines(), group=read("group").strip(),
                   group_files=read("group_files").strip(), user=read("user").strip(),
                   user_files=read("user_files").strip(), readers=read("readers").strip(),
                   modprobe=read("modprobe"))


def system_range(kind: str) -> range:
    """SYS_GID_MIN..SYS_GID_MAX (kind "GID") or the UID one, as shadow reads
    /etc/login.defs (its defaults when unset)."""
    values: dict[str, int] = {}
    for line in Path("/etc/login.defs").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].isdigit():
            values[fields[0]] = int(fields[1])
    low = values.get(f"SYS_{kind}_MIN", 101)
    high = values.get(f"SYS_{kind}_MAX", values.get(f"{kind}_MIN", 1000) - 1)
    return range(low, high + 1)


def can_run() -> str | None:
    """Why these runs cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (a mount namespace and overlays)"
    r = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if r.returncode != 0:
        return f"no mount namespace here: {r.stderr.decode().strip()}"
    return None

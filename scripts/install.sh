#!/bin/bash
# make install / make uninstall. Copies what `make` built; builds nothing.
#   DESTDIR   staging root (default: none, the real system)
#   PREFIX    default /usr/local
#   KVER      kernel the module was built for (default: scripts/kver.sh)
#   PMM_GROUP group allowed to use /dev/pmm and to read pmd's database (default:
#             pmm, as in the Debian package: the udev rule makes /dev/pmm root:pmm
#             0660 so pmd, which the unit runs as user pmd of group pmm, can open
#             it; the group is created empty, so only pmd is in it). Created as a
#             system group when installing to the real system if missing; an
#             existing one (and an existing user pmd) must be a system account
#             in /etc/group (/etc/passwd), else nothing is installed.
#   PMM_DKMS=0        copy pmm.ko into /lib/modules/KVER/extra instead of DKMS
#   PMM_INSTALL_PYTHON=0  skip pmctl/pmd (the module, library, headers, rules only)
#   PMM_KO    the module file to install (default kmod/pmm.ko)
#
# Layout: DESTDIR/lib/modules/KVER/extra/pmm.ko (or DKMS), PREFIX/lib/libpmmhook.so,
# PREFIX/libexec/pmm/pmm-inject (pmctl attach, pmctl run --no-preload),
# PREFIX/libexec/pmm/pmm-scan (pmctl unreachable),
# PREFIX/include/{pmm_hooks.h,pmm.h}, PREFIX/lib/pmm/python (the Python package and
# its dependencies), PREFIX/bin/{pmctl,pmd}, /etc/udev/rules.d/60-pmm.rules,
# /etc/systemd/system/pmd.service (run as user pmd, created if missing, in group
# pmm-readers: /etc/modprobe.d/pmm.conf gives the module that group's gid as its
# reader_gid), /etc/default/pmd (kept when present); every file is listed in
# PREFIX/share/pmm/manifest,
# which `uninstall` reads.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-install}
destdir=${DESTDIR:-}
prefix=${PREFIX:-/usr/local}
kver=${KVER:-$(scripts/kver.sh)}
version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' dkms.conf)
manifest_rel=$prefix/share/pmm/manifest
manifest=$destdir$manifest_rel

if [ "$action" = uninstall ]; then
	if [ ! -f "$manifest" ]; then
		echo "uninstall: no $manifest: pmm is not installed there" >&2
		exit 1
	fi
	while read -r f; do
		case "$f" in
		dkms:*) dkms remove -m pmm -v "${f#dkms:}" --all >/dev/null 2>&1 || true
			rm -rf "/usr/src/pmm-${f#dkms:}" ;;
		*/) rm -rf "$destdir$f" ;;
		*) rm -f "$destdir$f" ;;
		esac
	done <"$manifest"
	rm -f "$manifest"
	rmdir "$destdir$prefix/share/pmm" 2>/dev/null || true
	[ -d "$destdir/lib/modules/$kver" ] && [ -z "$destdir" ] && depmod "$kver" 2>/dev/null || true
	echo "pmm uninstalled from ${destdir:-/}"
	exit 0
fi

ko=${PMM_KO:-kmod/pmm.ko}
for f in "$ko" hooklib/libpmmhook.so hooklib/pmm-inject hooklib/pmm-scan hooklib/pmm_hooks.h; do
	[ -f "$f" ] || { echo "install: $f is missing: run 'make' first" >&2; exit 1; }
done
# /dev/pmm's group, and pmd's user (the unit runs pmd as user pmd, group
# pmm): created as system accounts when missing, adopted only when they are
# system accounts of this machine (scripts/accounts.sh). Checked before
# anything is installed: a refusal changes nothing.
group=${PMM_GROUP:-pmm}
with_unit=0
[ "${PMM_INSTALL_PYTHON:-1}" != 0 ] && [ -f pmd/pmd.service ] && with_unit=1
if [ -z "$destdir" ]; then
	. scripts/accounts.sh
	refused=$(pmm_account_refusal group "$group")
	[ $with_unit = 1 ] && [ -z "$refused" ] && refused=$(pmm_account_refusal passwd pmd)
	[ $with_unit = 1 ] && [ -z "$refused" ] &&
		refused=$(pmm_account_refusal group pmm-readers "$pmm_readers_gives")
	if [ -n "$refused" ]; then
		echo "install: $refused; nothing was installed" >&2
		exit 1
	fi
fi

installed=()
put() { # put MODE SRC DEST (DEST relative to DESTDIR)
	install -D -m "$1" "$2" "$destdir$3"
	installed+=("$3")
}

if [ -z "$destdir" ] && [ "${PMM_DKMS:-1}" != 0 ] && command -v dkms >/dev/null; then
	src=/usr/src/pmm-$version
	rm -rf "$src" && mkdir -p "$src"
	cp -r dkms.conf kmod scripts "$src/"
	make -s -C "$src/kmod" clean >/dev/null 2>&1 || true
	dkms install -m pmm -v "$version" -k "$kver"
	installed+=("dkms:$version")
else
	put 0644 "$ko" "/lib/modules/$kver/extra/pmm.ko"
	if [ -n "$destdir" ]; then
		depmod -b "$destdir" "$kver"
	else
		depmod "$kver"
	fi
fi

# loaded at boot by systemd-modules-load, before services that preload the hook
put 0644 packaging/modules-load.d/pmm.conf /etc/modules-load.d/pmm.conf
put 0755 hooklib/libpmmhook.so "$prefix/lib/libpmmhook.so"
put 0755 hooklib/pmm-inject "$prefix/libexec/pmm/pmm-inject"
put 0755 hooklib/pmm-scan "$prefix/libexec/pmm/pmm-scan"
put 0644 hooklib/pmm_hooks.h "$prefix/include/pmm_hooks.h"
put 0644 README.md "$prefix/share/doc/pmm/README.md"
put 0644 kmod/uapi/pmm.h "$prefix/include/pmm.h"

# /dev/pmm's group: pmd (user pmd, group pmm in the unit) must open it
if [ -z "$destdir" ] && ! getent group "$group" >/dev/null; then
	groupadd --system "$group"
fi

rules=$(mktemp)
sed "s/GROUP=\"root\", MODE=\"0600\"/GROUP=\"$group\", MODE=\"0660\"/" packaging/60-pmm.rules >"$rules"
grep -q "^KERNEL==\"pmm\",.*GROUP=\"$group\", MODE=\"0660\"$" "$rules" ||
	{ echo "install: packaging/60-pmm.rules: no GROUP=\"root\", MODE=\"0600\" to replace" >&2; exit 1; }
put 0644 "$rules" /etc/udev/rules.d/60-pmm.rules
rm -f "$rules"

if [ "${PMM_INSTALL_PYTHON:-1}" != 0 ]; then
	# The tools run for every user (the pmm group's too): an interpreter
	# anyone may execute, not a shim or a venv in root's home. $PYTHON
	# chooses; else Debian's /usr/bin/python3 (3.11+, with pip); else the
	# real file behind python3.
	if [ -n "${PYTHON:-}" ]; then
		python=$PYTHON
	elif /usr/bin/python3 -c 'import sys, pip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
		python=/usr/bin/python3
	else
		python=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')
	fi
	case "$python" in
	/*[[:space:]]* | [!/]*)
		echo "install: PYTHON=$python: give an absolute path without spaces (it goes in the scripts' #! line)" >&2
		exit 1 ;;
	esac
	pydir=$prefix/lib/pmm/python
	"$python" -m pip install -q --upgrade --no-warn-script-location --target "$destdir$pydir" .
	installed+=("$pydir/")
	for tool in pmctl:pmctl.cli pmd:pmd.main; do
		name=${tool%%:*}
		wrapper=$(mktemp)
		# Scripts, as the Debian package installs them. -I: neither the current
		# directory nor the script's, PYTHONPATH or a user's site-packages is on
		# sys.path, so `sudo pmctl` run where a user left a dataclasses.py, or
		# with a user's environment, imports only the installed code.
		cat >"$wrapper" <<EOF
#!$python -I
# $name, from pmm's make install: its code, and the libraries it needs, are in
# $pydir.
import sys

sys.path.insert(0, "$pydir")
from ${tool#*:} import main  # noqa: E402

sys.exit(main())
EOF
		put 0755 "$wrapper" "$prefix/bin/$name"
		rm -f "$wrapper"
	done
	if [ -f pmd/pmd.service ]; then
		unit=$(mktemp)
		sed "s|/usr/bin/pmd|$prefix/bin/pmd|g; s|/usr/share/doc/pmm-tools|$prefix/share/doc/pmm|g" pmd/pmd.service >"$unit"
		if [ -n "${PMM_GROUP:-}" ]; then # pmd gives its database to this group
			sed -i "s|^Group=pmm$|Group=$PMM_GROUP|; s|^StateDirectory=pmm$|&\nEnvironment=PMM_GROUP=$PMM_GROUP|" "$unit"
		fi
		put 0644 "$unit" /etc/systemd/system/pmd.service
		rm -f "$unit"
		# the unit runs pmd as user pmd, primary group the database's
		if [ -z "$destdir" ] && ! getent passwd pmd >/dev/null; then
			useradd --system --gid "$group" --home-dir /nonexistent --no-create-home \
				--shell /usr/sbin/nologin --comment "pmm monitoring daemon" pmd
		fi
		# the unit's SupplementaryGroups=pmm-readers: the module's reader_gid
		if [ -z "$destdir" ]; then
			pmm_readers_setup
			installed+=(/etc/modprobe.d/pmm.conf)
		fi
		if [ ! -e "$destdir/etc/default/pmd" ]; then # the admin's settings are kept
			put 0644 packaging/pmd.default /etc/default/pmd
		fi
		if [ -f docs/fleet.md ]; then
			put 0644 docs/fleet.md "$prefix/share/doc/pmm/fleet.md"
		fi
	fi
fi

mkdir -p "$(dirname "$manifest")"
printf '%s\n' "${installed[@]}" >"$manifest"
echo "pmm installed into ${destdir:-/} (prefix $prefix); files listed in $manifest_rel"
if [ -z "$destdir" ]; then
	udevadm control --reload-rules 2>/dev/null || true
	systemctl daemon-reload 2>/dev/null || true
fi

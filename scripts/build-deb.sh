#!/bin/bash
# make deb: Debian packages of this tree, built with dpkg-deb (no debhelper).
#
#   scripts/build-deb.sh [OUTDIR]        (default build/deb)
#
# OUTDIR gets, VERSION being dkms.conf's PACKAGE_VERSION:
#   pmm-dkms_VERSION_all.deb      the module's source in /usr/src/pmm-VERSION; DKMS
#                                 builds it on install; loaded at boot (modules-load.d)
#   libpmmhook_VERSION_amd64.deb  /usr/lib/pmm/libpmmhook.so (a private directory:
#                                 a preloaded library has no soname),
#                                 /usr/libexec/pmm/{pmm-inject,pmm-scan},
#                                 /usr/include/{pmm_hooks.h,pmm.h}; stripped as dh_strip
#                                 does, their debug info in
#   libpmmhook-dbgsym_VERSION_amd64.deb  /usr/lib/debug/.build-id/XX/YYYY.debug
#   pmm-tools_VERSION_all.deb     /usr/bin/{pmctl,pmd}, their Python code in
#                                 /usr/share/pmm/python, their man pages (from
#                                 their --help, help2man), pmd.service,
#                                 /etc/default/pmd, the udev rule (/dev/pmm:
#                                 group pmm, 0660)
# Each has its copyright and changelog in /usr/share/doc/PACKAGE. `lintian`
# shows no error on them (tests/host/test_deb.py).
#
# Python: the libraries Debian packages new enough come from Debian (the versions
# installed here, see DEBIAN_PYTHON, are pip's constraints and the Depends'
# minimums); pip downloads the others from PyPI now, as pure-Python wheels only
# (py3-none-any), unpacked into /usr/share/pmm/python. Installing the packages
# needs no network, and nothing in them names a Python version: the scripts
# start with #!/usr/bin/python3 -I and postinst compiles the code for whatever
# python3 is (again when it changes: /usr/share/python3/runtime.d).
#
#   PMM_DEB_MAINTAINER   the Maintainer field (default: the author of HEAD)
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
out=$(realpath -m "${1:-build/deb}")
version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' dkms.conf)
python=$top/.venv/bin/python # pip and setuptools (make setup)
[ -x "$python" ] || { echo "build-deb: no .venv: run 'make setup'" >&2; exit 1; }
maintainer=${PMM_DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>' 2>/dev/null || true)}
[ -n "$maintainer" ] || { echo "build-deb: set PMM_DEB_MAINTAINER='Name <address>'" >&2; exit 1; }

# The Python distributions bookworm packages in versions pmm's dependencies
# accept (PyPI name, Debian package). Not typer (0.7; pmctl needs 0.28+ for
# typer.TyperException), sqlite-utils (not packaged; pmd needs 4.0+ for
# Database.atomic) and click (sqlite-utils 4 needs 8.3.1; bookworm has 8.1.3),
# rich and markdown-it-py (typer 0.28 needs rich 13.8),
# click-default-group (sqlite-utils needs 1.2.3), prometheus-client (0.16;
# 0.20 needed), protobuf (3.21: the generated profile_pb2.py needs 7.35),
# pyroute2 (0.7.2: pmd's netlink code fails on it), ioctl-opt (not packaged).
DEBIAN_PYTHON=(
	pygments:python3-pygments
	mdurl:python3-mdurl
	shellingham:python3-shellingham
	python-dateutil:python3-dateutil
	six:python3-six
	tabulate:python3-tabulate
	pluggy:python3-pluggy
	sqlite-fts4:python3-sqlite-fts4
)

# what make builds (the hook, pmm-inject); make decides what is out of date
make -s all >/dev/null

work=$(mktemp -d /tmp/pmm-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# upstream part of a Debian version: 1:2.14.0+dfsg-1 -> 2.14.0
upstream() { local v=${1#*:}; v=${v%-*}; v=${v%%+*}; echo "${v%%~*}"; }

# pkg_control NAME ROOT DEPENDS: DEBIAN/control from packaging/deb/NAME.control
pkg_control() {
	local size
	size=$(du -sk --exclude=DEBIAN "$2" | cut -f1)
	mkdir -p "$2/DEBIAN"
	sed -e "s|@VERSION@|$version|g" -e "s|@MAINTAINER@|$maintainer|g" \
		-e "s|@INSTALLED_SIZE@|$size|g" -e "s|@DEPENDS@|$3|g" \
		"packaging/deb/$1.control" >"$2/DEBIAN/control"
}
# pkg_script NAME ROOT KIND: a maintainer script (postinst, prerm, postrm);
# an @ACCOUNTS@ line becomes scripts/accounts.sh (shared with make install)
pkg_script() {
	sed -e "s|@VERSION@|$version|g" -e '/^@ACCOUNTS@$/{r scripts/accounts.sh' -e 'd;}' \
		"packaging/deb/$1.$3" >"$2/DEBIAN/$3"
	! grep -q '@[A-Z]\+@' "$2/DEBIAN/$3" ||
		{ echo "build-deb: packaging/deb/$1.$3: a placeholder is left" >&2; exit 1; }
	chmod 0755 "$2/DEBIAN/$3"
	sh -n "$2/DEBIAN/$3"
}
pkg_build() { # pkg_build ROOT FILE
	find "$1" -type d -exec chmod 0755 {} +
	# DEBIAN/md5sums as dh_md5sums writes it: every file but the conffiles
	(cd "$1" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort |
		grep -vxF -f <(sed 's|^/||' DEBIAN/conffiles 2>/dev/null || true) |
		xargs -d '\n' -r md5sum) >"$1/DEBIAN/md5sums"
	chmod 0644 "$1/DEBIAN/md5sums"
	dpkg-deb --root-owner-group -Zxz --build "$1" "$out/$2" >/dev/null
	echo "build-deb: $out/$2 ($(du -k "$out/$2" | cut -f1) KiB)"
}
year=$(git log -1 --format=%ad --date=format:%Y 2>/dev/null || date +%Y)
# a native package's changelog (policy 12.7: changelog.gz): this build
changelog=$work/changelog.gz
{
	echo "pmm ($version) unstable; urgency=medium"
	echo
	echo "  * Built from the pmm source tree$(git log -1 --format=' (commit %h)' 2>/dev/null ||
		true) by scripts/build-deb.sh."
	echo
	echo " -- $maintainer  $(git log -1 --format=%aD 2>/dev/null || date -R)"
} | gzip -9n >"$changelog"
doc() { # doc PACKAGE ROOT: its copyright file and changelog
	install -d "$2/usr/share/doc/$1"
	sed "s|@YEAR@|$year|" packaging/deb/copyright >"$2/usr/share/doc/$1/copyright"
	chmod 0644 "$2/usr/share/doc/$1/copyright"
	install -m 0644 "$changelog" "$2/usr/share/doc/$1/changelog.gz"
}
# split_debug ROOT PATH DBGROOT: strips ROOT/PATH as dh_strip does and keeps
# its debug info in DBGROOT under its build-id (where gdb and pmctl look);
# prints the build-id
split_debug() {
	local f=$1$2 id debug
	id=$(readelf -n "$f" | sed -n 's/^ *Build ID: \([0-9a-f]*\)$/\1/p')
	[ ${#id} -gt 2 ] || { echo "build-deb: $2 has no build-id" >&2; exit 1; }
	debug=$3/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
	install -d -m 0755 "$(dirname "$debug")"
	objcopy --only-keep-debug --compress-debug-sections "$f" "$debug"
	chmod 0644 "$debug"
	case "$2" in
	*.so) strip --remove-section=.comment --remove-section=.note --strip-unneeded "$f" ;;
	*) strip --remove-section=.comment --remove-section=.note "$f" ;;
	esac
	objcopy --add-gnu-debuglink="$debug" "$f"
	echo "$id"
}

# --- pmm-dkms: what dkms.conf's MAKE needs, no build products
root=$work/pmm-dkms
src=$root/usr/src/pmm-$version
install -D -m 0644 dkms.conf "$src/dkms.conf"
for f in $(git ls-files kmod); do # the sources, not what a build left beside them
	install -D -m 0644 "$f" "$src/$f"
done
install -D -m 0755 scripts/kver.sh "$src/scripts/kver.sh" # kmod/Makefile's default KVER
install -D -m 0644 packaging/modules-load.d/pmm.conf "$root/usr/lib/modules-load.d/pmm.conf"
doc pmm-dkms "$root"
pkg_control pmm-dkms "$root" ""
for s in postinst prerm; do pkg_script pmm-dkms "$root" $s; done
pkg_build "$root" "pmm-dkms_${version}_all.deb"

# --- libpmmhook: where pmctl looks (/usr/lib/pmm, pmm-inject in /usr/libexec/pmm)
root=$work/debian/libpmmhook # dpkg-shlibdeps reads debian/control beside it
dbg=$work/libpmmhook-dbgsym
hook=/usr/lib/pmm/libpmmhook.so
install -D -m 0644 hooklib/libpmmhook.so "$root$hook"
install -D -m 0755 hooklib/pmm-inject "$root/usr/libexec/pmm/pmm-inject"
install -D -m 0755 hooklib/pmm-scan "$root/usr/libexec/pmm/pmm-scan"
build_ids=()
for f in "$hook" /usr/libexec/pmm/pmm-inject /usr/libexec/pmm/pmm-scan; do
	build_ids+=("$(split_debug "$root" "$f" "$dbg")")
done
install -D -m 0644 hooklib/pmm_hooks.h "$root/usr/include/pmm_hooks.h"
install -D -m 0644 kmod/uapi/pmm.h "$root/usr/include/pmm.h"
doc libpmmhook "$root"
printf 'Source: pmm\n\nPackage: libpmmhook\nArchitecture: amd64\n' >"$work/debian/control"
shlibs=$(cd "$work" && dpkg-shlibdeps -O "$root$hook" \
	"$root/usr/libexec/pmm/pmm-inject" "$root/usr/libexec/pmm/pmm-scan" 2>/dev/null)
pkg_control libpmmhook "$root" "${shlibs#shlibs:Depends=}"
pkg_build "$root" "libpmmhook_${version}_amd64.deb"
# its debug info, as Debian's automatic -dbgsym packages hold it
install -d "$dbg/usr/share/doc"
ln -s libpmmhook "$dbg/usr/share/doc/libpmmhook-dbgsym"
pkg_control libpmmhook-dbgsym "$dbg" ""
sed -i "s|@BUILD_IDS@|${build_ids[*]}|" "$dbg/DEBIAN/control"
pkg_build "$dbg" "libpmmhook-dbgsym_${version}_amd64.deb"

# --- pmm-tools
root=$work/pmm-tools
pydir=/usr/share/pmm/python
lib=$root$pydir
mkdir -p "$lib" "$work/wheels"

# pip's constraints: the Debian packages' versions installed here
constraints=$work/constraints.txt
declare -A debian_of
for entry in "${DEBIAN_PYTHON[@]}"; do
	name=${entry%%:*} pkg=${entry#*:}
	v=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) ||
		{ echo "build-deb: $pkg is not installed: run 'make setup'" >&2; exit 1; }
	echo "$name==$(upstream "$v")" >>"$constraints"
	debian_of[$name]=$pkg
done
mapfile -t requirements < <("$python" -c '
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
quiet() { # quiet CMD...: its output only when it fails
	"$@" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
}
quiet "$python" -m pip download --disable-pip-version-check --dest "$work/wheels" \
	--only-binary=:all: --platform any --abi none --implementation py --python-version 3.11 \
	-c "$constraints" "${requirements[@]}"

# pmm itself, from a copy of what its build reads (pip builds in the tree it is
# given); the venv's setuptools, so no download
mkdir -p "$work/src"
cp pyproject.toml README.md LICENSE "$work/src/"
mkdir -p "$work/src/src"
cp -r src/pmm "$work/src/src/"
cp -r pmctl pmd "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
quiet "$python" -m pip wheel --disable-pip-version-check --no-deps --no-build-isolation \
	-w "$work/pmm-wheel" "$work/src"

depends="python3 (>= 3.11), binutils, passwd"
vendored=()
for whl in "$work/pmm-wheel"/*.whl "$work/wheels"/*.whl; do
	base=$(basename "$whl")
	name=$(echo "${base%%-*}" | tr 'A-Z_' 'a-z-')
	wheel_version=$(echo "$base" | cut -d- -f2)
	case "$base" in
	*-py3-none-any.whl | *-py2.py3-none-any.whl) ;;
	*) echo "build-deb: $base is not a pure-Python wheel" >&2; exit 1 ;;
	esac
	# sqlite-utils lists pip for its `install` command, which pmm never runs
	# (7 MB; nothing imports it)
	[ "$name" = pip ] && continue
	if [ -n "${debian_of[$name]:-}" ]; then
		depends+=", ${debian_of[$name]} (>= $wheel_version)"
		continue
	fi
	"$python" -m zipfile -e "$whl" "$lib"
	[ "$name" = pmm ] || vendored+=("$name")
done
if compgen -G "$lib/*.data" >/dev/null; then
	echo "build-deb: a wheel has a .data directory (scripts or headers): not handled" >&2
	exit 1
fi
# nothing compiled, nothing naming a Python version: the same files work
# with every python3 (the check the host test repeats)
# (a vendored library's comment may quote a traceback's path: only paths,
# pmm's own code, .pth files and metadata are searched)
bad=$(find "$lib" \( -name '*.so' -o -name '*.so.*' -o -name '*.pyd' -o -name '*.pyc' \
	-o -path '*python3.1*' \) -print
	grep -rl 'python3\.1' "$lib"/pmm "$lib"/pmctl "$lib"/pmd "$lib"/*.dist-info \
		$(compgen -G "$lib/*.pth") || true)
if [ -n "$bad" ]; then
	echo "build-deb: compiled or version-bound files in $pydir:" >&2
	echo "$bad" >&2
	exit 1
fi
# a library module's #! line means nothing (they are not executable): blank,
# so that line numbers stay
find "$lib" -name '*.py' -exec sed -i '1s/^#!.*//' {} +
# pmm.installed: hints name apt's packages (python3-matplotlib, libpmmhook)
echo "pmm-tools: this is Debian's package of pmm" >"$lib/pmm/debian-package"
find "$lib" -type f -exec chmod 0644 {} +

for tool in pmctl:pmctl.cli pmd:pmd.main; do
	name=${tool%%:*}
	# -I: neither the current directory nor /usr/bin, PYTHONPATH or a user's
	# site-packages is on sys.path (sudo pmctl imports only what is installed)
	cat >"$work/$name" <<EOF
#!/usr/bin/python3 -I
# $name, from the pmm-tools package: its code, and the libraries Debian does not
# package in versions new enough, are in $pydir.
import sys

sys.path.insert(0, "$pydir")
from ${tool#*:} import main  # noqa: E402

sys.exit(main())
EOF
	install -D -m 0755 "$work/$name" "$root/usr/bin/$name"
done

# man pages from the tools' --help in typer's plain form, run as installed
# (Debian's python3 -I on the package's code); pmctl's with each command's
man=$work/man
mkdir -p "$man" "$root/usr/share/man/man1"
for tool in pmctl:pmctl.cli pmd:pmd.main; do
	name=${tool%%:*}
	printf '#!/usr/bin/python3 -IB\nimport sys\n\nsys.path.insert(0, "%s")\nfrom %s import main\n\nsys.exit(main())\n' \
		"$lib" "${tool#*:}" >"$man/$name"
	chmod 0755 "$man/$name"
done
export TYPER_USE_RICH=0 COLUMNS=80
commands=$("$man/pmctl" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z]\+\) .*/\1/p')
[ -n "$commands" ] || { echo "build-deb: pmctl --help lists no command" >&2; exit 1; }
{
	echo "[COMMANDS]"
	for cmd in $commands; do
		echo ".SS \"pmctl $cmd\""
		echo ".nf"
		# roff: a backslash is \e, and a line starting with . or ' is a request
		"$man/pmctl" "$cmd" --help | sed -e 's/\\/\\e/g' -e "s/^[.']/\\\\\&&/"
		echo ".fi"
	done
	printf '[SEE ALSO]\npmd(1); /usr/share/doc/pmm-tools/README.md\n'
} >"$man/pmctl.h2m"
printf '[SEE ALSO]\npmctl(1); /usr/share/doc/pmm-tools/README.md\n' >"$man/pmd.h2m"
for name in pmctl pmd; do
	case $name in
	pmctl) desc="control pmm, the process memory monitor" ;;
	pmd) desc="pmm's daemon: samples and leak alerts in SQLite, metrics" ;;
	esac
	quiet help2man --no-info --section=1 --name="$desc" --include="$man/$name.h2m" \
		--version-string="$version" --output="$man/$name.1" "$man/$name"
	gzip -9n <"$man/$name.1" >"$root/usr/share/man/man1/$name.1.gz"
	chmod 0644 "$root/usr/share/man/man1/$name.1.gz"
done
unset TYPER_USE_RICH COLUMNS

# the unit as the tree has it, for /usr/bin and this package's docs
install -d "$root/lib/systemd/system"
sed 's|/usr/local/bin/|/usr/bin/|g; s|/usr/local/share/doc/pmm/|/usr/share/doc/pmm-tools/|g' \
	pmd/pmd.service >"$root/lib/systemd/system/pmd.service"
install -D -m 0644 packaging/pmd.default "$root/etc/default/pmd"
install -D -m 0644 packaging/deb/pmm-tools.rtupdate \
	"$root/usr/share/python3/runtime.d/pmm-tools.rtupdate"
chmod 0755 "$root/usr/share/python3/runtime.d/pmm-tools.rtupdate"
# /dev/pmm for group pmm (which postinst creates empty): pmd runs as user pmd
# in that group; the module still checks each request (ptrace-read access)
install -d "$root/usr/lib/udev/rules.d"
sed 's/GROUP="root", MODE="0600"/GROUP="pmm", MODE="0660"/' packaging/60-pmm.rules \
	>"$root/usr/lib/udev/rules.d/60-pmm.rules"
grep -q 'GROUP="pmm", MODE="0660"' "$root/usr/lib/udev/rules.d/60-pmm.rules" ||
	{ echo "build-deb: packaging/60-pmm.rules: no GROUP=\"root\", MODE=\"0600\" to replace" >&2; exit 1; }
install -D -m 0644 README.md "$root/usr/share/doc/pmm-tools/README.md"
for f in docs/*.md; do
	install -m 0644 "$f" "$root/usr/share/doc/pmm-tools/"
done
doc pmm-tools "$root"
# a stanza for each vendored distribution: its files (from RECORD), its licence
cat packaging/deb/pmm-tools.copyright >>"$root/usr/share/doc/pmm-tools/copyright"
"$python" - "$lib" "$pydir" "${vendored[@]}" >>"$root/usr/share/doc/pmm-tools/copyright" <<'EOF'
import sys
from email.parser import Parser
from pathlib import Path

lib, pydir = Path(sys.argv[1]), sys.argv[2].lstrip("/")
for info in sorted(lib.glob("*.dist-info")):
    meta = Parser().parsestr((info / "METADATA").read_text(encoding="utf-8"))
    if meta["Name"].lower().replace("_", "-") not in sys.argv[3:]:
        continue
    tops = sorted({line.split(",")[0].split("/")[0]
                   for line in (info / "RECORD").read_text().splitlines() if line})
    classifiers = [c.rsplit(" :: ", 1)[1] for c in meta.get_all("Classifier") or []
                   if c.startswith("License :: OSI Approved :: ")]
    lic = meta["License-Expression"] or (classifiers[0] if classifiers else None) \
        or (meta["License"] or "").split("\n")[0] or "see its METADATA"
    texts = sorted(str(p.relative_to(lib)) for p in info.rglob("*")
                   if p.is_file() and ("LICEN" in p.name.upper() or "COPYING" in p.name.upper()))
    print(f"\nFiles: " + "\n ".join(f"{pydir}/{t}" for t in tops))
    print(f"Copyright: the authors of {meta['Name']} {meta['Version']} (from PyPI)")
    print(f"License: {lic}")
    where = ", ".join(f"/{pydir}/{t}" for t in texts) or f"/{pydir}/{info.name}/METADATA"
    print(f" The text is in {where}.")
EOF
pkg_control pmm-tools "$root" "$depends"
echo /etc/default/pmd >"$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do pkg_script pmm-tools "$root" $s; done
pkg_build "$root" "pmm-tools_${version}_all.deb"

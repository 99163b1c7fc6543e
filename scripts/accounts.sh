# pmm's accounts: group pmm (or PMM_GROUP) gets /dev/pmm and reads pmd's
# database, user pmd runs pmd with its capabilities. An install creates them
# as system accounts, or adopts existing ones only if they are system
# accounts of this machine: in /etc/group or /etc/passwd themselves (not a
# same-named LDAP, NIS, sssd or userdb account, whose members a directory's
# admin chooses) with an id within SYS_GID_MIN..SYS_GID_MAX or
# SYS_UID_MIN..SYS_UID_MAX of /etc/login.defs (not a person's).
# Sourced by scripts/install.sh; scripts/build-deb.sh copies it into
# pmm-tools' postinst. POSIX sh.

# pmm_login_defs KEY DEFAULT: KEY's number in /etc/login.defs, else DEFAULT
pmm_login_defs() {
	pmm_value=$(awk -v k="$1" '$1 == k && $2 ~ /^[0-9]+$/ { v = $2 } END { print v }' \
		/etc/login.defs 2>/dev/null || true)
	echo "${pmm_value:-$2}"
}

# pmm_account_refusal group|passwd NAME [WHAT]: one line saying why the
# existing account NAME may not be adopted; nothing when it may, or when there
# is no such account (it is to be created). WHAT: what a group gives its
# members, when it is not /dev/pmm's
pmm_account_refusal() {
	if [ "$1" = group ]; then
		pmm_kind=group pmm_id=GID pmm_file=/etc/group
		pmm_gives=${3:-"its members would use /dev/pmm and read pmd's database"}
	else
		pmm_kind=user pmm_id=UID pmm_file=/etc/passwd
		pmm_gives="pmd would run as it, with pmd's capabilities"
	fi
	pmm_entry=$(getent "$1" "$2") || return 0
	pmm_local=$(getent -s files "$1" "$2") || pmm_local=
	if [ "$pmm_entry" != "$pmm_local" ]; then
		echo "$pmm_kind $2 exists, but from a name service other than $pmm_file (LDAP, NIS, sssd, userdb): $pmm_gives; refusing to adopt it"
		return 0
	fi
	pmm_num=$(echo "$pmm_entry" | cut -d: -f3)
	pmm_min=$(pmm_login_defs "SYS_${pmm_id}_MIN" 101)
	pmm_max=$(pmm_login_defs "SYS_${pmm_id}_MAX" $(($(pmm_login_defs "${pmm_id}_MIN" 1000) - 1)))
	if [ "$pmm_num" -lt "$pmm_min" ] || [ "$pmm_num" -gt "$pmm_max" ]; then
		echo "$pmm_kind $2 exists, but is not a system $pmm_kind ($pmm_id $pmm_num is outside SYS_${pmm_id}_MIN..SYS_${pmm_id}_MAX of /etc/login.defs, $pmm_min..$pmm_max): $pmm_gives; refusing to adopt it"
	fi
}

# Group pmm-readers: the module's reader group (its reader_gid parameter):
# its members, pmd among them (pmd.service's SupplementaryGroups), read every
# monitored process, without CAP_SYS_PTRACE.
pmm_readers_gives="its members would read every monitored process"

# pmm_readers_setup: the group made a system group if missing; its gid for
# the module at each load (/etc/modprobe.d/pmm.conf) and now if it is loaded
pmm_readers_setup() {
	getent group pmm-readers >/dev/null || groupadd --system pmm-readers
	pmm_gid=$(getent group pmm-readers | cut -d: -f3)
	printf '%s\n' "# pmm's install: members of group pmm-readers (pmd) read every monitored process" \
		"options pmm reader_gid=$pmm_gid" >/etc/modprobe.d/pmm.conf
	if [ -w /sys/module/pmm/parameters/reader_gid ]; then
		echo "$pmm_gid" >/sys/module/pmm/parameters/reader_gid
	fi
}

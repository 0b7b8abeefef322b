# shellcheck shell=bash
# apt_install PKG… — install Debian packages: `apt-get update` first, three
# tries, sudo when not root (non-interactive without a terminal). Sourced by
# scripts/services.sh and web/browser/install-deps.sh, which define log and
# die; APT_HINT, if set, is added to the error when apt-get is missing.
apt_install() {
	local -a sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 ||
			die "missing Debian packages ($*) and not root, and sudo is not installed: install them as root: apt-get install -y $*"
		if [[ -t 0 ]]; then sudo=(sudo); else sudo=(sudo -n); fi
	fi
	command -v apt-get >/dev/null 2>&1 ||
		die "missing packages ($*) and apt-get is not available: install them yourself${APT_HINT:+ ($APT_HINT)}"
	log "installing Debian packages: $*"
	local try
	for try in 1 2 3; do
		if "${sudo[@]}" apt-get update -q >&2 &&
			"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -q --no-install-recommends "$@" >&2; then
			return 0
		fi
		log "apt-get failed (attempt $try of 3)"
		sleep $((try * 3))
	done
	die "could not install: $*"
}

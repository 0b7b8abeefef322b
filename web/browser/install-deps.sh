#!/usr/bin/env bash
# Installs what the preview page's browser test needs, each part only when
# missing: Debian's Chromium (and fonts) with apt-get, and playwright-core
# from package-lock.json with `npm ci`. No browser is downloaded by npm:
# playwright-core drives the Debian Chromium at $GEOTOLL_CHROMIUM.
#
# `make browser-deps` runs this; `make test` depends on it.
set -euo pipefail

DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHROMIUM=${GEOTOLL_CHROMIUM:-/usr/bin/chromium}

log() { printf 'browser-deps: %s\n' "$*" >&2; }
die() {
	printf 'browser-deps: error: %s\n' "$*" >&2
	exit 1
}

apt_install() {
	local -a sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 ||
			die "missing Debian packages ($*) and not root, and sudo is not installed: apt-get install -y $*"
		if [[ -t 0 ]]; then sudo=(sudo); else sudo=(sudo -n); fi
	fi
	command -v apt-get >/dev/null 2>&1 || die "apt-get is not available: install Chromium yourself (GEOTOLL_CHROMIUM names it)"
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

if [[ ! -x $CHROMIUM ]]; then
	# fonts-liberation: Chromium's default sans-serif for the side panel.
	apt_install chromium fonts-liberation
fi
[[ -x $CHROMIUM ]] || die "$CHROMIUM is still missing after installing chromium"

command -v npm >/dev/null 2>&1 || die "npm is not installed (Node.js 20 or later is needed for the browser test)"
if [[ ! -f $DIR/node_modules/playwright-core/package.json ]]; then
	log "npm ci in $DIR"
	# No browser download: playwright-core has none, and this skips any
	# other package's postinstall fetch too.
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$DIR" --no-audit --no-fund --ignore-scripts >&2
fi

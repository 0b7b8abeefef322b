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

APT_HINT="GEOTOLL_CHROMIUM names an installed Chromium"
# shellcheck source=scripts/apt.sh
. "$DIR/../../scripts/apt.sh"

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

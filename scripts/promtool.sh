#!/usr/bin/env bash
# Installs promtool, which checks and unit-tests the alerting rules in
# deploy/prometheus, from Debian's prometheus package — without leaving the
# package's Prometheus server running or enabled: the package starts it,
# listening on every interface at :9090, and enables it at boot. While the
# package installs, a policy-rc.d (asked by invoke-rc.d and
# deb-systemd-invoke before they start a service) forbids starting it,
# unless the machine has a policy of its own; then the server is disabled
# at boot (systemd and sysvinit). Nothing happens when promtool is already
# there. POLICY_RC_D overrides where the policy goes (tests).
set -euo pipefail

command -v promtool >/dev/null 2>&1 && exit 0

log() { echo "promtool: $*" >&2; }
die() {
	log "$*"
	exit 1
}
# shellcheck source=scripts/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo -n); fi
policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}
placed=
if [[ ! -e $policy ]]; then
	if printf '#!/bin/sh\n# placed by geotoll scripts/promtool.sh while it installs prometheus\nexit 101\n' |
		"${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod 755 "$policy"; then
		placed=1
	else
		log "could not place $policy: the package may start its server (disabled below)"
	fi
fi
cleanup() { if [[ -n $placed ]]; then "${sudo[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT

apt_install prometheus
if command -v systemctl >/dev/null 2>&1; then
	"${sudo[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
if command -v update-rc.d >/dev/null 2>&1; then
	"${sudo[@]}" update-rc.d prometheus disable >/dev/null 2>&1 || true
fi
command -v promtool >/dev/null 2>&1 || die "the prometheus package installed no promtool"

#!/usr/bin/env bash
# Builds sbworker's .deb with cargo-deb, checks its systemd unit, installs it with dpkg,
# runs the installed `sbworker --version` and `sbworker check-config` as the service's
# user, checks that neither the binary nor the package carries the development tools,
# and (unless --keep) purges it again. Run as root from the repository's root:
#
#   packaging/build-deb.sh            # build, install, check, purge
#   packaging/build-deb.sh --keep     # leave it installed
#
# Needs: cargo, dpkg, systemd-analyze (systemd), adduser; installs cargo-deb if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0
[[ "${1:-}" == "--keep" ]] && keep=1
say() { echo "build-deb: $*"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "build-deb: run it as root (dpkg -i)" >&2
    exit 2
fi
if ! command -v cargo-deb >/dev/null; then
    say "installing cargo-deb"
    cargo install cargo-deb --locked --quiet
fi
need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v adduser >/dev/null || need+=(adduser)
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
if ((${#need[@]})); then
    say "installing ${need[*]}"
    apt-get install -y -qq "${need[@]}" >/dev/null
fi

say "cargo deb (release build)"
deb=$(cargo deb --locked --quiet | tail -n 1)
[[ -f "$deb" ]] || { echo "build-deb: cargo deb wrote no package" >&2; exit 1; }
say "built $deb"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Depends\|Architecture\):/  \1:/p'
dpkg-deb --contents "$deb" | awk '{print "  " $6}' | grep -E 'usr/bin/sbworker$|etc/sbworker/|sbworker.service$'

cleanup() {
    if ((keep == 0)) && dpkg -s sbworker >/dev/null 2>&1; then
        say "purging the package again"
        dpkg --purge sbworker >/dev/null
    fi
}
trap cleanup EXIT

say "dpkg -i"
dpkg -i "$deb" >/dev/null
unit=/lib/systemd/system/sbworker.service
[[ -f "$unit" ]] || unit=/usr/lib/systemd/system/sbworker.service
say "systemd-analyze verify $unit"
out=$(systemd-analyze verify "$unit" 2>&1 || true)
# Only what concerns this unit counts (the host's own units may warn about themselves).
mine=$(grep -i 'sbworker' <<<"$out" || true)
if [[ -n "$mine" ]]; then
    echo "$mine" >&2
    echo "build-deb: systemd-analyze verify found problems in the unit" >&2
    exit 1
fi
say "the unit verifies clean"
getent passwd sbworker >/dev/null || { echo "build-deb: no sbworker user" >&2; exit 1; }
stat -c '  %U:%G %a %n' /etc/sbworker/sbworker.toml /etc/sbworker/sbworker.env
say "installed: $(/usr/bin/sbworker --version)"
# The package ships the worker without the development tools (the `tools` feature).
for tool in demo emulator bench bench-worker; do
    if /usr/bin/sbworker "$tool" --help >/dev/null 2>&1; then
        echo "build-deb: the packaged binary has the development tool '$tool'" >&2
        exit 1
    fi
done
contents=$(dpkg-deb --contents "$deb")
if grep -qE 'usr/share/sbworker/.*(bench|demo|cluster|emulator)' <<<"$contents"; then
    echo "build-deb: the package ships the tools' SQL" >&2
    exit 1
fi
say "no development tools in the package"
say "check-config as the service's user"
runuser -u sbworker -- /usr/bin/sbworker check-config --config /etc/sbworker/sbworker.toml | head -n 2
say "ok"

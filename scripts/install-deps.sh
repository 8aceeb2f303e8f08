#!/usr/bin/env bash
# install-deps.sh installs what the cove daemon needs on a Debian 12 host:
# the Debian packages it shells out to and a pinned, static runsc.
#
# Idempotent and quick when everything is in place: apt is only consulted
# when a package is missing, and runsc is built once per pinned version
# into /var/cache/cove/runsc/<version>/seccomp-<key>/runsc, with its
# seccomp filters precompiled (scripts/runsc-seccomp).
set -euo pipefail

# Pinned gVisor. Debian's runsc (2022) lacks systrap and hangs on
# checkpoint --leave-running; @latest resolves to a moving branch.
RUNSC_VERSION="${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}"
RUNSC_CACHE="${RUNSC_CACHE:-/var/cache/cove/runsc}"
RUNSC_DEST="${RUNSC_DEST:-/usr/local/bin/runsc}"
APT_PACKAGES=(debootstrap iproute2 nftables ca-certificates curl python3)
# The QEMU microVM backend (cove serve --backend qemu, cove image build
# --vm): only when asked, so the gVisor path stays lean.
if [[ ${INSTALL_QEMU:-0} == 1 ]]; then
	APT_PACKAGES+=(qemu-system-x86 qemu-utils busybox-static e2fsprogs util-linux)
fi
# The e2e suite's browser check of preview URLs (headless Chromium) and its
# terminal that drives cove shell (tmux): only for the tests (make e2e), not
# on a daemon's host.
if [[ ${INSTALL_E2E:-0} == 1 ]]; then
	# nodejs: the published E2B SDK the e2e suite runs (make e2b-sdk); npm
	# from Debian only where no npm came with it (NodeSource's has one).
	APT_PACKAGES+=(chromium tmux nodejs)
	command -v npm >/dev/null || APT_PACKAGES+=(npm)
fi

log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root"

# --- Debian packages -------------------------------------------------------

installed() {
	grep -q 'install ok installed' <<<"$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)"
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
	installed "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends "${missing[@]}"
else
	log "packages present: ${APT_PACKAGES[*]}"
fi

# --- QEMU 10 -------------------------------------------------------------------
#
# QEMU 7.2 (Debian 12's) loses guest writes during a live migration under TCG (a
# branched VM's children crashed), and cove's live branch depends on it. On
# Debian 12 QEMU 10 comes from bookworm-backports; apt only takes from there
# what -t names.
qemu_major() {
	local v
	v=$(qemu-system-x86_64 --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p')
	echo "${v:-0}"
}
if [[ ${INSTALL_QEMU:-0} == 1 ]] && (($(qemu_major) < 10)); then
	. /etc/os-release
	[[ ${VERSION_CODENAME:-} == bookworm ]] ||
		die "QEMU $(qemu_major) is too old (need 10): install QEMU 10 from your distribution"
	list=/etc/apt/sources.list.d/cove-bookworm-backports.list
	if ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		log "adding bookworm-backports for QEMU 10"
		echo 'deb http://deb.debian.org/debian bookworm-backports main' >"$list"
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends -t bookworm-backports qemu-system-x86 qemu-utils
	(($(qemu_major) >= 10)) || die "QEMU 10 did not install"
fi

# --- the QEMU user -------------------------------------------------------------

# QEMU runs as this unprivileged system user (cove serve --qemu-user takes
# it by default when it exists). Under KVM it needs /dev/kvm: the kvm group.
if [[ ${INSTALL_QEMU:-0} == 1 ]]; then
	if id -u cove-qemu >/dev/null 2>&1; then
		log "user cove-qemu exists"
	else
		log "creating system user cove-qemu"
		useradd --system --user-group --no-create-home --home-dir /nonexistent \
			--shell /usr/sbin/nologin cove-qemu
	fi
	if getent group kvm >/dev/null && ! id -nG cove-qemu | tr ' ' '\n' | grep -qx kvm; then
		usermod -a -G kvm cove-qemu
	fi
fi

# --- room for tasks -----------------------------------------------------------
#
# Every idle gVisor sandbox holds some 60 host threads: the kernel's default
# pid_max (32768) caps a host at about 500 of them, far short of what its
# memory holds. Raised for good, once.
PID_MAX=4194304
if (($(cat /proc/sys/kernel/pid_max) < PID_MAX)); then
	log "raising kernel.pid_max to $PID_MAX (/etc/sysctl.d/90-cove.conf)"
	echo "kernel.pid_max = $PID_MAX" >/etc/sysctl.d/90-cove.conf
	sysctl -q -w kernel.pid_max=$PID_MAX
fi

# --- runsc -----------------------------------------------------------------

find_go() {
	if command -v go >/dev/null 2>&1; then
		command -v go
	elif [[ -x /usr/local/go/bin/go ]]; then
		echo /usr/local/go/bin/go
	else
		return 1
	fi
}

# runsc is built from a copy of the module's source in which
# scripts/runsc-seccomp has precompiled its seccomp-bpf programs, as gVisor's
# own (Bazel) build does: a plain `go install` runsc compiles them at every
# sandbox start and restore, in both the sandbox and the gofer. The cache is
# keyed by the pin, the generator and this recipe, so a change to either
# rebuilds. RUNSC_PRECOMPILE_SECCOMP=0 builds the plain way instead (an
# escape hatch for a gVisor the generator does not know: it fails loudly
# rather than fall back by itself).
RUNSC_PRECOMPILE_SECCOMP="${RUNSC_PRECOMPILE_SECCOMP:-1}"
runsc_ldflags="-s -w -X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION"
seccomp_gen="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/runsc-seccomp/main.go"
if [[ $RUNSC_PRECOMPILE_SECCOMP == 1 ]]; then
	[[ -f $seccomp_gen ]] || die "$seccomp_gen not found (or RUNSC_PRECOMPILE_SECCOMP=0)"
	recipe="build -trimpath -ldflags=$runsc_ldflags ./runsc; CGO_ENABLED=0"
	key=$({ printf '%s\n' "$recipe"; cat "$seccomp_gen"; } | sha256sum | cut -c1-12)
	cached="$RUNSC_CACHE/$RUNSC_VERSION/seccomp-$key/runsc"
else
	cached="$RUNSC_CACHE/$RUNSC_VERSION/runsc"
fi
# The build stamps the pin into `runsc --version`; a cached binary without
# it (from an older recipe) is rebuilt.
if [[ -x $cached ]] && grep -q -- "$RUNSC_VERSION" <<<"$("$cached" --version 2>/dev/null)"; then
	log "runsc $RUNSC_VERSION cached at $cached"
else
	GO=$(find_go) || die "go not found (looked in PATH and /usr/local/go/bin)"
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	start=$SECONDS
	# Static on purpose: a cgo runsc fails at sandbox start because the
	# sandbox has no ELF interpreter. Go runs from / or from the copy, so no
	# go.mod nearby (or GOFLAGS like -mod=vendor, or a go.work) interferes.
	if [[ $RUNSC_PRECOMPILE_SECCOMP == 1 ]]; then
		log "building runsc $RUNSC_VERSION with precompiled seccomp filters with $("$GO" version) (takes 2-4 minutes)"
		(cd / && GOFLAGS= GOWORK=off "$GO" mod download "gvisor.dev/gvisor@$RUNSC_VERSION") ||
			die "cannot download gvisor.dev/gvisor@$RUNSC_VERSION"
		moddir="$(cd / && GOFLAGS= "$GO" env GOMODCACHE)/gvisor.dev/gvisor@$RUNSC_VERSION"
		[[ -f $moddir/go.mod ]] || die "gVisor's source is not at $moddir"
		# The module cache is read-only: generate into a copy, with the
		# generator as a package of that copy so that its programs come from
		# the very source being built.
		cp -R "$moddir" "$work/gvisor"
		chmod -R u+w "$work/gvisor"
		mkdir "$work/gvisor/cove-runsc-seccomp"
		cp "$seccomp_gen" "$work/gvisor/cove-runsc-seccomp/main.go"
		log "precompiling runsc's seccomp filters (about a minute of CPU)"
		(cd "$work/gvisor" && CGO_ENABLED=0 GOFLAGS= GOWORK=off "$GO" run ./cove-runsc-seccomp -src .) ||
			die "precompiling runsc's seccomp filters failed (RUNSC_PRECOMPILE_SECCOMP=0 builds runsc without them)"
		log "building runsc"
		(cd "$work/gvisor" && CGO_ENABLED=0 GOFLAGS= GOWORK=off "$GO" build -trimpath -ldflags="$runsc_ldflags" -o "$work/runsc" ./runsc)
		# Its programs are named by their options; cove's (systrap, netstack)
		# must be among them.
		grep -qaF 'Platform="systrap" HostNetwork=false' "$work/runsc" ||
			die "the runsc built has no precompiled seccomp program for systrap"
	else
		log "building runsc $RUNSC_VERSION with $("$GO" version) (takes 1-2 minutes)"
		(cd / && GOBIN="$work" CGO_ENABLED=0 GOFLAGS= "$GO" install -ldflags="$runsc_ldflags" \
			"gvisor.dev/gvisor/runsc@$RUNSC_VERSION")
	fi
	log "built runsc in $((SECONDS - start))s"
	mkdir -p "$(dirname "$cached")"
	# Rename into place so an interrupted run never leaves a partial binary
	# that a later run would trust.
	install -m 0755 "$work/runsc" "$cached.tmp"
	mv -f "$cached.tmp" "$cached"
fi

if [[ -f $RUNSC_DEST ]] && cmp -s "$cached" "$RUNSC_DEST"; then
	log "$RUNSC_DEST is up to date"
else
	log "installing $cached as $RUNSC_DEST"
	mkdir -p "$(dirname "$RUNSC_DEST")"
	# Copy beside and rename: replacing a running binary in place fails
	# with ETXTBSY, and a rename is atomic for concurrent callers.
	install -m 0755 "$cached" "$RUNSC_DEST.tmp.$$"
	mv -f "$RUNSC_DEST.tmp.$$" "$RUNSC_DEST"
fi

log "runsc: $("$RUNSC_DEST" --version 2>/dev/null | sed -n 1p)"

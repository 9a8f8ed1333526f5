#!/usr/bin/env bash
# CI: the package's file list holds everything it must, and it installs
# into a scratch root where the installed gpufree runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# The newest package, should several be there.
deb=$(ls -t target/debian/gpufree_*.deb | head -n 1)
list=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/gpufree ./usr/share/man/man1/gpufree.1.gz ./usr/share/man/man1/gpufree-check.1.gz \
    ./usr/share/bash-completion/completions/gpufree ./usr/share/zsh/vendor-completions/_gpufree \
    ./usr/share/fish/vendor_completions.d/gpufree.fish ./usr/share/gpufree/systemd/gpufree.conf \
    ./usr/share/gpufree/systemd/gpufree-serve.service \
    ./usr/share/gpufree/slurm/prolog.sh ./usr/share/gpufree/slurm/epilog.sh \
    ./usr/share/gpufree/slurm/healthcheck.sh ./usr/share/gpufree/nhc/gpufree.nhc \
    ./usr/share/gpufree/k8s/npd-gpufree-monitor.json ./usr/share/gpufree/k8s/npd-daemonset-gpufree.yaml; do
    grep -qx "$f" <<<"$list" || { echo "check-deb: $deb lacks $f" >&2; exit 1; }
done
root=$(mktemp -d)
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
: >"$root/var/lib/dpkg/status"
# Only the package itself goes in: its dependency (libc6) is the host's.
if ! out=$(dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless -i "$deb" 2>&1); then
    echo "check-deb: dpkg could not install $deb into $root: $out" >&2
    exit 1
fi
dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Package} ${Status}\n' gpufree | grep -q "install ok installed"
env -i HOME="$root/home" "$root/usr/bin/gpufree" --version
echo "check-deb: $(basename "$deb") lists $(wc -l <<<"$list") entries and installs into a scratch root"

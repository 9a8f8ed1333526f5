#!/usr/bin/env bash
# CI, after scripts/check-deb.sh (which checks what the packages hold) and
# build-rpm.sh: the RPM holds the .deb's files, with the same modes and
# contents, at RHEL's paths; it requires only what RHEL 9 provides; and it
# installs with Debian's rpm into a scratch root where the installed
# gpufree runs.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "check-rpm: $*" >&2; exit 1; }
# The newest packages, should several be there (file names of our own).
# shellcheck disable=SC2012
rpm=$(ls -t target/rpm/gpufree-*.rpm | head -n 1)
# shellcheck disable=SC2012
deb=$(ls -t target/debian/gpufree_*.deb | head -n 1)

# Where the RPM differs from the .deb: the zsh completion goes where RHEL's
# zsh looks (scripts/rpm-spec.py maps it on its own, so each checks the
# other); the .deb's copyright file is Debian's (the RPM's License tag says
# it).
deb_zsh=/usr/share/zsh/vendor-completions/
rpm_zsh=/usr/share/zsh/site-functions/
rhel_paths() {
    sed -e "s# $deb_zsh# $rpm_zsh#" |
        grep -vx -- '-rw-r--r-- /usr/share/doc/gpufree/copyright'
}
# Regular files only: each package format lists directories its own way.
deb_files=$(dpkg-deb -c "$deb" | awk '$1 ~ /^-/ { print $1, substr($6, 2) }' | rhel_paths | sort)
entries=$(rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\n]' "$rpm")
rpm_files=$(awk '$1 ~ /^-/ { print $1, $3 }' <<<"$entries" | sort)
if ! difference=$(diff <(echo "$deb_files") <(echo "$rpm_files")); then
    fail "$rpm and $deb hold different files (< only in the .deb, > only in the RPM):
$difference"
fi
awk '$2 != "root:root" { print; bad = 1 } END { exit bad }' <<<"$entries" ||
    fail "entries of $rpm not owned by root:root"
# 755 only for what is executed: the binary, and the Slurm scripts slurmd
# runs directly (not common.sh, which they source).
awk '{ want = ($2 ~ /^\/usr\/bin\// || ($2 ~ /\.sh$/ && $2 !~ /\/common\.sh$/)) ? "-rwxr-xr-x" : "-rw-r--r--"
       if ($1 != want) { print $0 " (want " want ")"; bad = 1 } } END { exit bad }' <<<"$rpm_files" ||
    fail "files of $rpm with the wrong mode"
# The RPM owns its own directories, and no one else's (/usr/bin is RHEL's
# filesystem package's).
dirs=$(awk '$1 ~ /^d/ { print $1, $3 }' <<<"$entries")
awk '$1 != "drwxr-xr-x" || $2 !~ /\/gpufree(\/|$)/ { print; bad = 1 } END { exit bad }' <<<"$dirs" ||
    fail "$rpm owns directories that are not its own"
while read -r _ f; do
    grep -qx "drwxr-xr-x ${f%/*}" <<<"$dirs" || fail "$rpm does not own ${f%/*}"
done < <(grep '/gpufree/' <<<"$rpm_files")

# Requirements RHEL 9 meets: glibc (2.34), libgcc, bash, rpm's own.
requires=$(rpm -qp --requires "$rpm")
while IFS= read -r r; do
    case $r in
    rpmlib\(*\)*' <= '* | 'rtld(GNU_HASH)' | /bin/bash | /bin/sh) ;;
    libgcc_s.so.1\(\)\(64bit\) | libgcc_s.so.1\(GCC_*\)\(64bit\)) ;;
    lib[cm].so.6\(\)\(64bit\) | ld-linux-*.so.[0-9]\(\)\(64bit\)) ;;
    lib[cm].so.6\(GLIBC_*\)\(64bit\) | ld-linux-*.so.[0-9]\(GLIBC_*\)\(64bit\))
        version=${r#*GLIBC_}
        version=${version%%)*}
        [ "$(printf '%s\n' "$version" 2.34 | sort -V | tail -n 1)" = 2.34 ] ||
            fail "$rpm requires $r: newer than RHEL 9's glibc 2.34"
        ;;
    *) fail "$rpm requires $r, which is not RHEL's glibc, libgcc or bash" ;;
    esac
done <<<"$requires"

# gpufree prepare runs at boot: the RPM enables its unit on install, as
# the .deb does.
scripts=$(rpm -qp --scripts "$rpm")
grep -q 'systemctl enable gpufree-prepare.service' <<<"$scripts" ||
    fail "$rpm does not enable gpufree-prepare.service on install: $scripts"
# Installed into a scratch root: only the package itself (its dependencies
# are the host's), no scriptlets (they would run the host's systemctl).
root=$(mktemp -d)
debroot=$(mktemp -d)
trap 'rm -rf "$root" "$debroot"' EXIT
rpm --root "$root" --dbpath /var/lib/rpm --initdb
if ! out=$(rpm --root "$root" --dbpath /var/lib/rpm -i --nodeps --noscripts "$rpm" 2>&1); then
    fail "rpm could not install $rpm into $root: $out"
fi
rpm --root "$root" --dbpath /var/lib/rpm -q gpufree >/dev/null
# What was installed is what the package says (sizes, modes, digests).
if ! out=$(rpm --root "$root" --dbpath /var/lib/rpm -V --nodeps gpufree 2>&1) || [ -n "$out" ]; then
    fail "the installed files differ from $rpm: $out"
fi
# The same bytes as the .deb's (man pages compared uncompressed).
dpkg-deb -x "$deb" "$debroot"
while read -r _ f; do
    d=$debroot${f/#"$rpm_zsh"/$deb_zsh}
    if [[ $f == *.gz ]]; then
        cmp -s <(gzip -dc "$root$f") <(gzip -dc "$d") || fail "$f differs from the .deb's"
    else
        cmp -s "$root$f" "$d" || fail "$f differs from the .deb's"
    fi
done <<<"$rpm_files"

# The installed binary runs (check-deb.sh runs the same bytes' demo).
env -i HOME="$root/home" "$root/usr/bin/gpufree" --version
echo "check-rpm: $(basename "$rpm") holds the .deb's $(wc -l <<<"$rpm_files") files at RHEL's paths, requires glibc <= 2.34, installs into a scratch root and runs"

#!/usr/bin/env python3
"""Writes gpufree's RPM spec on stdout from the .deb's asset list.

Reads `cargo metadata --no-deps --format-version 1` on stdin and takes
[package.metadata.deb] of the gpufree package: its `assets` (the same
files, modes and places, with the RHEL paths below), `systemd-units` (each
unit installed in the unit directory as cargo-deb does, enabled on install
and run again on upgrade where `enable` says so), `extended-description`,
and the package's version, description and license. So the two packages
have one list: an asset added for the .deb is in the RPM too.
    scripts/rpm-spec.py BINARY < metadata.json > gpufree.spec
BINARY replaces target/release/ in the sources (the debug build in CI), as
cargo-deb's --profile does.
"""

import glob
import json
import os
import shlex
import sys
import textwrap

# Where RHEL's packages put what Debian's put elsewhere (check-rpm.sh
# compares the two packages' file lists with the same differences).
RHEL_PATHS = {
    "usr/share/zsh/vendor-completions/": "usr/share/zsh/site-functions/",
}
# cargo-deb gzips man pages; so do RHEL's packages.
GZIPPED = "usr/share/man/"


def rhel_path(dest):
    for deb, rhel in RHEL_PATHS.items():
        if dest.startswith(deb):
            return rhel + dest[len(deb):]
    return dest


def files(assets, binary):
    """(source, installed path, mode) for every file, globs expanded."""
    release_dir = os.path.dirname(binary) + "/"
    for src, dest, mode in assets:
        if src.startswith("target/release/"):
            src = release_dir + src[len("target/release/"):]
        sources = sorted(glob.glob(src))
        if not sources:
            sys.exit(f"rpm-spec: asset {src} matches no file")
        for source in sources:
            path = dest.lstrip("/")
            if path.endswith("/"):
                path += os.path.basename(source)
            path = rhel_path(path)
            if path.startswith(GZIPPED):
                path += ".gz"
            yield os.path.abspath(source), "/" + path, int(mode, 8)


# Where cargo-deb installs a unit of `systemd-units`.
UNIT_DIR = "usr/lib/systemd/system/"


def units(deb):
    """(asset, enabled unit) for each unit of `systemd-units` (a table or
    a list of them), as cargo-deb finds it: UNIT.service in unit-scripts."""
    configs = deb.get("systemd-units") or []
    if isinstance(configs, dict):
        configs = [configs]
    for config in configs:
        name = config["unit-name"] + ".service"
        source = os.path.join(config["unit-scripts"], name)
        yield [source, UNIT_DIR, "644"], name if config.get("enable") else None


def scriptlets(enabled):
    """%post, %preun and %postun that enable `enabled` on install (offline:
    systemctl only makes the links), disable them on removal and run them
    again on upgrade, as cargo-deb's maintainer scripts do."""
    if not enabled:
        return []
    names = " ".join(shlex.quote(n) for n in enabled)
    return [
        "%post",
        f'if [ "$1" -eq 1 ]; then systemctl enable {names} >/dev/null 2>&1 || :; fi',
        "",
        "%preun",
        f'if [ "$1" -eq 0 ]; then systemctl disable {names} >/dev/null 2>&1 || :; fi',
        "",
        "%postun",
        f'if [ "$1" -ge 1 ]; then systemctl try-restart {names} >/dev/null 2>&1 || :; fi',
        "",
    ]


def own_dirs(paths):
    """The directories that are gpufree's own: at and below a `gpufree` one."""
    dirs = set()
    for path in paths:
        parts = path.split("/")[:-1]
        for i, part in enumerate(parts):
            if part == "gpufree":
                dirs.update("/".join(parts[: j + 1]) for j in range(i, len(parts)))
                break
    return sorted(dirs)


def literal(text):
    """Text rpmbuild shows as it is: a `%` would start a macro."""
    return text.replace("%", "%%")


def spec(package, binary):
    deb = package["metadata"]["deb"]
    unit_assets = list(units(deb))
    assets = deb["assets"] + [asset for asset, _ in unit_assets]
    enabled = [name for _, name in unit_assets if name]
    entries = list(files(assets, binary))
    q = shlex.quote
    dirs = sorted({os.path.dirname(path) for _, path, _ in entries})
    install = [f"mkdir -p {q('%{buildroot}' + d)}" for d in dirs]
    for source, path, mode in entries:
        dest = q("%{buildroot}" + path)
        if path.endswith(".gz") and not source.endswith(".gz"):
            install.append(f"gzip -9n -c {q(source)} > {dest}")
            install.append(f"chmod {mode:04o} {dest}")
        else:
            install.append(f"install -m {mode:04o} {q(source)} {dest}")
    listed = [f"%dir %attr(0755,root,root) {d}" for d in own_dirs(p for _, p, _ in entries)]
    listed += [f"%attr({mode:04o},root,root) {path}" for _, path, mode in entries]
    return "\n".join(
        [
            # The binary as built: no stripping, no debuginfo package, no
            # build-id links, no brp scripts (which would re-gzip the pages).
            "%global debug_package %{nil}",
            "%global __os_install_post %{nil}",
            "%global _build_id_links none",
            # zstd (rpm reads it since 4.14; RHEL 9 has 4.16): fast on the
            # debug binary CI packages (220 MB).
            "%global _binary_payload w3T0.zstdio",
            f"Name: {package['name']}",
            # `~` so that 1.0-rc1 sorts before 1.0, as in Debian.
            f"Version: {package['version'].replace('-', '~')}",
            "Release: 1",
            f"Summary: {literal(package['description'])}",
            f"License: {package['license']}",
            "",
            "%description",
            literal(textwrap.fill(deb["extended-description"].strip(), 76)),
            "",
            "%install",
            *install,
            "",
            *scriptlets(enabled),
            "%files",
            *listed,
            "",
        ]
    )


def main():
    binary = sys.argv[1]
    metadata = json.load(sys.stdin)
    package = next(p for p in metadata["packages"] if p["name"] == "gpufree")
    sys.stdout.write(spec(package, binary))


if __name__ == "__main__":
    main()

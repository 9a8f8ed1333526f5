//! Builds the simulated NVML library (`sim/`, a cdylib) so that the
//! gpufree binary can carry it: `cargo install --path .` installs only
//! binaries, and `gpufree demo` and `gpufree sim lib` must work from such
//! an install without a checkout (`src/sim.rs` writes it out on demand).
//!
//! Cargo cannot depend on another crate's cdylib (artifact dependencies
//! are unstable), so this runs cargo once more on `sim/`, in a target
//! directory of its own (no lock shared with the outer build), release
//! profile, and hands the file to the compiler through `GPUFREE_SIM_EMBED`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=sim/src");
    println!("cargo:rerun-if-changed=sim/Cargo.toml");
    println!("cargo:rerun-if-env-changed=GPUFREE_SIM_EMBED_SKIP");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let lib = out.join("libgpufree_nvml_sim.so");
    // <target>/<profile>/build/gpufree-HASH/out → <target>/sim-embed: one
    // build of the library for every profile and every rebuild.
    let target = out
        .ancestors()
        .nth(4)
        .map_or_else(|| out.join("sim-target"), |t| t.join("sim-embed"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--lib", "--manifest-path"])
        .arg(manifest.join("sim/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        // What the outer build set for itself is not the library's.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .status();
    let built = target.join("release/libgpufree_nvml_sim.so");
    match status {
        Ok(s) if s.success() && built.is_file() => {
            std::fs::copy(&built, &lib).expect("copy the simulated NVML library into OUT_DIR");
        }
        other => panic!("building the simulated NVML library (sim/) failed: {other:?}"),
    }
    println!("cargo:rustc-env=GPUFREE_SIM_EMBED={}", lib.display());
}

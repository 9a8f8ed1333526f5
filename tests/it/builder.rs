//! The command builder's own promises (tests/it/cmd.rs): where options go,
//! what a failed exit-code assertion says, the simulated library asked for
//! once.

use crate::cmd::{bin, sim_lib, Gpufree, NO_NVML};
use std::ffi::OsStr;

#[test]
fn options_go_between_the_words_and_the_arguments() {
    let cmd = Gpufree::new(["kill"])
        .args(["--", "x"])
        .json()
        .dev("/d")
        .no_nvml()
        .command();
    let args: Vec<&OsStr> = cmd.get_args().collect();
    assert_eq!(
        args,
        [
            "kill",
            "--json",
            "--dev-dir",
            "/d",
            "--nvml-lib",
            NO_NVML,
            "--",
            "x"
        ]
    );
    let wrapped = Gpufree::new(["status"]).wrapped(["timeout", "5"]).command();
    assert_eq!(wrapped.get_program(), "timeout");
    let args: Vec<&OsStr> = wrapped.get_args().collect();
    assert_eq!(
        args,
        [OsStr::new("5"), bin().as_os_str(), OsStr::new("status")]
    );
}

#[test]
fn a_wrong_exit_code_names_the_command_its_environment_and_what_it_printed() {
    let r = Gpufree::new(["frobnicate"])
        .env("GPUFREE_BUILDER_X", "a b")
        .run();
    let panic = std::panic::catch_unwind(|| {
        r.assert_exit(0);
    })
    .expect_err("exit 2 is not 0");
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    for part in [
        "expected exit code 0, got 2",
        "frobnicate",
        "GPUFREE_BUILDER_X='a b'",
        "GPUFREE_BPF_CACHE=",
        "unset NO_COLOR",
        "--- stdout ---",
        "--- stderr ---",
        r.stderr.trim(),
    ] {
        assert!(message.contains(part), "{part:?} missing from:\n{message}");
    }
}

#[test]
fn the_simulated_library_is_asked_for_once() {
    assert!(std::ptr::eq(sim_lib(), sim_lib()));
    assert!(sim_lib().exists(), "{}", sim_lib().display());
}

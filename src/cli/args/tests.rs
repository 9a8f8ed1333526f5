//! The command line's parsing.

use super::*;
use clap::CommandFactory;

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn bad_gpu_selector_is_a_usage_error() {
    let e = Cli::try_parse_from(["gpufree", "status", "--gpu", "lots"]).unwrap_err();
    assert!(e.to_string().contains("lots"));
    assert!(e.use_stderr());
}

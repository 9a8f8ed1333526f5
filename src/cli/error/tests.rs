//! Exit codes and error lines of the command line.

use super::*;
use crate::model::Why;

#[test]
fn outcomes_map_to_spec_codes() {
    let codes: Vec<u8> = [
        Outcome::Done,
        Outcome::NotReached,
        Outcome::Unknown,
        Outcome::Survivors,
        Outcome::Refused,
    ]
    .into_iter()
    .map(|o| exit_code(&Ok(o)))
    .collect();
    assert_eq!(codes, [0, 1, 3, 4, 5]);
}

#[test]
fn errors_map_to_spec_codes() {
    let code = |e: Error| exit_code(&Err(e));
    let miss = crate::model::GpuMiss::NoSuch {
        selector: "9".into(),
        here: crate::model::Here::Gpus(vec![0]),
    };
    assert_eq!(
        Error::Selector(miss.clone()).to_string(),
        "--gpu 9: no such GPU (GPUs here: 0)"
    );
    assert_eq!(code(Error::Selector(miss)), 2);
    use crate::act::kill::NotOurProc;
    assert_eq!(code(Error::KillRefused(NotOurProc::OtherRoot)), 2);
    assert_eq!(code(Error::CmdlinesExposed("127.0.0.1:9835".into())), 2);
    assert_eq!(code(Error::KillRefused(NotOurProc::Foreign)), 5);
    assert_eq!(
        code(Error::Write {
            target: "--output x".into(),
            source: WriteError::Refused(crate::paths::Refused::Symlink),
        }),
        2
    );
    assert_eq!(
        code(Error::Write {
            target: "--output x".into(),
            source: WriteError::Io(io::Error::other("disk full")),
        }),
        3
    );
    assert_eq!(code(Error::NoTerminal), 3);
    assert_eq!(code(Error::ReleaseUnknown(vec![Why::NoGpu.into()])), 3);
    assert_eq!(code(Error::NoConfirmation), 5);
    assert_eq!(code(Error::NotConfirmed), 5);
}

#[test]
fn a_closed_stdout_is_success_but_not_for_the_plan() {
    let pipe = || io::Error::from(io::ErrorKind::BrokenPipe);
    assert_eq!(exit_code(&Err(Error::Io(pipe()))), 0);
    assert_eq!(
        exit_code(&Err(Error::Watch(crate::watch::Error::Io(pipe())))),
        0
    );
    assert_eq!(exit_code(&Err(Error::PlanNotShown(pipe()))), 3);
    assert_eq!(exit_code(&Err(Error::Io(io::Error::other("eio")))), 3);
}

#[test]
fn a_closed_stdout_under_the_demo_is_success() {
    let pipe = io::Error::from(io::ErrorKind::BrokenPipe);
    let e = Error::Demo(crate::demo::Error::Io(pipe));
    assert_eq!(exit_code(&Err(e)), 0);
}

#[test]
fn a_watch_error_names_its_causes_in_one_line() {
    use crate::watch::Error as W;
    let e = Error::Watch(W::Terminal(io::Error::other("gone")));
    assert_eq!(e.to_string(), "watch: the terminal: gone");
    let e = Error::Watch(W::Io(io::Error::other("eio")));
    assert_eq!(e.to_string(), "watch: eio");
    let pipe = W::Io(io::Error::from(io::ErrorKind::BrokenPipe));
    assert_eq!(exit_code(&Err(Error::Watch(pipe))), 0);
}

//! The gpufree binary: wiring only. It becomes a holder process for the
//! demo and the tests when `GPUFREE_INTERNAL_HOLDER` is set (see
//! `gpufree::demo::holder`) — never where its caller has less privilege
//! than it (setuid, file capabilities) — otherwise it runs the command line.

fn main() -> std::process::ExitCode {
    let steerable = gpufree::proc::me::Privilege::of_process().secure.is_none();
    let holder = std::env::var(gpufree::demo::holder::HOLDER_ENV).ok();
    if let Some(spec) = holder.filter(|_| steerable) {
        if let Err(e) = gpufree::demo::holder::run(&spec) {
            eprintln!("gpufree holder: {e}");
            return std::process::ExitCode::from(3);
        }
    }
    gpufree::cli::main()
}

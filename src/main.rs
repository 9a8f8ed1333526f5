//! The gpufree binary: wiring only. It becomes a holder process for the
//! demo and the tests when `GPUFREE_INTERNAL_HOLDER` is set (see
//! `gpufree::demo::holder`); otherwise it runs the command line.

fn main() -> std::process::ExitCode {
    if let Ok(spec) = std::env::var(gpufree::demo::holder::HOLDER_ENV) {
        if let Err(e) = gpufree::demo::holder::run(&spec) {
            eprintln!("gpufree holder: {e}");
            return std::process::ExitCode::from(3);
        }
    }
    gpufree::cli::main()
}

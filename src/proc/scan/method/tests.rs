//! Tests of `method.rs`.

use super::*;

#[test]
fn one_shot_commands_load_only_past_the_crossover() {
    let auto = ScanChoice::Auto;
    let bpf = |p: Pick| matches!(p, Pick::Bpf(_));
    let fresh = Load::Fresh;
    assert!(!bpf(pick(auto, false, fresh, Some(CROSSOVER_FILES - 1))));
    assert!(bpf(pick(auto, false, fresh, Some(CROSSOVER_FILES))));
    assert!(!bpf(pick(auto, false, fresh, None)));
    // With this boot's relocation kept, the load costs less.
    let kept = Load::Kept;
    assert!(!bpf(pick(
        auto,
        false,
        kept,
        Some(CROSSOVER_FILES_CACHED - 1)
    )));
    assert!(bpf(pick(auto, false, kept, Some(CROSSOVER_FILES_CACHED))));
    // Below both, the reason names the lower one.
    let small = pick(auto, false, fresh, Some(300));
    assert!(
        matches!(
            small,
            Pick::Procfs(ScanPick::FewFiles {
                crossover: 8000,
                ..
            })
        ),
        "{small:?}"
    );
    // Long-running commands, and programs already loaded, always walk.
    assert!(bpf(pick(auto, true, fresh, Some(10))));
    assert!(bpf(pick(auto, false, Load::Done, Some(10))));
    // A forced choice is obeyed either way.
    assert!(bpf(pick(ScanChoice::Bpf, false, fresh, Some(10))));
    assert!(!bpf(pick(
        ScanChoice::Procfs,
        true,
        Load::Done,
        Some(1 << 30)
    )));
}

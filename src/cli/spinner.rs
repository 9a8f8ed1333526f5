//! A kill's progress on stderr, from the events `act` reports.

/// A kill's progress on stderr: a spinner while the memory is awaited,
/// drawn only where `show` (a terminal, neither `-q` nor `--json`).
pub(super) struct Spinner {
    show: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl Spinner {
    pub(super) fn new(show: bool) -> Spinner {
        Spinner { show, bar: None }
    }

    pub(super) fn on(&mut self, event: crate::act::progress::Event) {
        use crate::act::progress::Event;
        match event {
            Event::ReleaseWaitStarted if self.show => {
                let b = indicatif::ProgressBar::new_spinner();
                b.set_message(crate::present::words::front::RELEASE_WAIT);
                b.enable_steady_tick(std::time::Duration::from_millis(120));
                self.bar = Some(b);
            }
            Event::MemoryHeld { held, .. } => {
                if let Some(b) = &self.bar {
                    b.set_message(crate::present::words::front::still_held(&held));
                }
            }
            Event::ReleaseWaitEnded => {
                if let Some(b) = self.bar.take() {
                    b.finish_and_clear();
                }
            }
            _ => {}
        }
    }
}

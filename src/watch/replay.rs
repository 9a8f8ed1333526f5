//! `gpufree watch --replay FILE`: a recording (`gpufree record`) stepped
//! through in the live view's frame. The file is indexed once at open (each
//! record's time, where its line starts, and the full snapshot it builds
//! on); a moment's state is rebuilt only when it is shown, from that full
//! snapshot and the changes after it ([`Replay`]), and judged as `--from
//! REC --at T` judges it. Nothing here reads the host or signals anything.

use super::draw::draw;
use super::keys::{on_key, Flow};
use super::{App, Error};
use crate::diagnose::Options as Diagnose;
use crate::model::{index, KillSeen, Moment, RecordBad, Replay, ReplayStep, Selection, Snapshot};
use crate::pipeline::{judge_with, select_with};
use crate::present::words::watch::{self as words, ReplayAt};
use crossterm::event::{self, Event, KeyCode, KeyEventKind};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// A recording, indexed: its bytes and its moments, from the first full
/// snapshot on.
pub struct Recording {
    bytes: Vec<u8>,
    moments: Vec<Moment>,
}

impl Recording {
    /// Indexes `bytes` and builds its first moment (so a recording that
    /// cannot be read fails here, before the terminal is taken). A last
    /// line cut short (the recorder stopped mid-write) is the end.
    pub fn open(bytes: Vec<u8>) -> Result<Recording, RecordBad> {
        let moments = index(&bytes)?;
        if moments.is_empty() {
            return Err(RecordBad::Before {
                at_ms: 0,
                first_ms: None,
            });
        }
        let rec = Recording { bytes, moments };
        rec.state(0)?;
        Ok(rec)
    }

    /// How many moments there are (at least one).
    pub fn len(&self) -> usize {
        self.moments.len()
    }

    /// Never: a recording opens only with a moment.
    pub fn is_empty(&self) -> bool {
        self.moments.is_empty()
    }

    /// The state at moment `i` (not judged): its full snapshot and the
    /// records after it, up to and with its own.
    pub fn state(&self, i: usize) -> Result<Snapshot, RecordBad> {
        self.moment(i).map(|(s, _)| s)
    }

    /// The state at moment `i` (as [`Recording::state`]) and the moment's
    /// own record, applied (None where the recording ended before it).
    pub fn moment(&self, i: usize) -> Result<(Snapshot, Option<ReplayStep>), RecordBad> {
        let before = RecordBad::Before {
            at_ms: 0,
            first_ms: None,
        };
        let m = *self.moments.get(i).ok_or(before.clone())?;
        let base = self.moments[m.base];
        let mut replay = Replay::starting(&self.bytes, base);
        let mut own = None;
        for _ in m.base..=i {
            match replay.step() {
                Some(Ok((_, step))) => own = Some(step),
                Some(Err(e)) => return Err(e),
                None => {
                    own = None;
                    break;
                }
            }
        }
        match replay.snapshot(m.t) {
            Some(Ok(s)) => Ok((s, own)),
            Some(Err(e)) => Err(RecordBad::Line {
                line: m.line,
                error: e.to_string(),
            }),
            None => Err(before),
        }
    }
}

/// How a replay is judged and shown.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The diagnosis, as `--from` runs it.
    pub diagnose: Diagnose,
    /// The GPUs (or MIG devices) shown (None: all).
    pub gpus: Option<Selection>,
    /// Whether the view is drawn in colour.
    pub color: bool,
}

/// Where the replay stands and how it plays.
struct Player {
    pos: usize,
    /// A power of two, -4 to 6.
    speed: i32,
    playing: bool,
    /// When the moment shown was shown.
    shown: Instant,
}

impl Player {
    /// When the next moment is due, while playing and not at the end.
    fn due(&self, rec: &Recording) -> Option<Instant> {
        let next = rec.moments.get(self.pos + 1).filter(|_| self.playing)?;
        let gap = next.t.saturating_sub(rec.moments[self.pos].t) as f64 / 1000.0;
        Some(self.shown + Duration::from_secs_f64(gap / 2f64.powi(self.speed)))
    }

    /// Moves to moment `pos` (kept within the recording).
    fn go(&mut self, pos: usize, rec: &Recording) {
        self.pos = pos.min(rec.len() - 1);
        self.shown = Instant::now();
        if self.pos + 1 == rec.len() {
            self.playing = false;
        }
    }

    fn at(&self, rec: &Recording) -> ReplayAt {
        ReplayAt {
            t_ms: rec.moments[self.pos].t,
            start_ms: rec.moments[0].t,
            pos: self.pos,
            count: rec.len(),
            speed: self.speed,
            playing: self.playing,
        }
    }
}

/// Steps through `rec` in the live view's frame until q or Esc; it opens
/// paused on the first moment.
pub fn replay(rec: &Recording, opts: &ReplayOptions) -> Result<(), Error> {
    let mut terminal = ratatui::try_init().map_err(Error::Terminal)?;
    let result = ui(&mut terminal, rec, opts);
    ratatui::restore();
    result
}

fn ui(
    terminal: &mut ratatui::DefaultTerminal,
    rec: &Recording,
    opts: &ReplayOptions,
) -> Result<(), Error> {
    let mut app = App::new(opts.color);
    let mut player = Player {
        pos: 0,
        speed: 0,
        playing: false,
        shown: Instant::now(),
    };
    show(&mut app, rec, opts, &player);
    loop {
        app.replay = Some(player.at(rec));
        terminal.draw(|f| draw(f, &mut app))?;
        let due = player.due(rec);
        let wait = due.map_or(Duration::from_millis(500), |d| {
            d.saturating_duration_since(Instant::now())
        });
        if !event::poll(wait)? {
            if due.is_some_and(|d| Instant::now() >= d) {
                player.go(player.pos + 1, rec);
                show(&mut app, rec, opts, &player);
            }
            continue;
        }
        let Event::Key(key) = event::read()? else {
            continue;
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        let before = player.pos;
        if on_replay_key(&mut app, &mut player, key.code, rec) == Flow::Quit {
            return Ok(());
        }
        if player.pos != before {
            show(&mut app, rec, opts, &player);
        }
    }
}

/// A key in a replay: moving in time and the speed here; the kill and
/// rescan keys only say why they do nothing; the rest as in the live view.
fn on_replay_key(app: &mut App, player: &mut Player, code: KeyCode, rec: &Recording) -> Flow {
    app.notice = None;
    let last = rec.len() - 1;
    match code {
        KeyCode::Char(' ') => {
            player.playing = !player.playing && player.pos < last;
            player.shown = Instant::now();
        }
        KeyCode::Left => player.go(player.pos.saturating_sub(1), rec),
        KeyCode::Right => player.go(player.pos + 1, rec),
        KeyCode::Home => player.go(0, rec),
        KeyCode::End => player.go(last, rec),
        KeyCode::Char('+' | '=') => player.speed = (player.speed + 1).min(6),
        KeyCode::Char('-') => player.speed = (player.speed - 1).max(-4),
        KeyCode::Char('k') => app.notice = Some(words::REPLAY_NO_KILL),
        KeyCode::Char('r') => app.notice = Some(words::REPLAY_NO_RESCAN),
        code => return on_key(app, code, &AtomicBool::new(false)),
    }
    Flow::Go
}

/// Shows the player's moment, judged as `--from` judges a snapshot; one
/// that cannot be rebuilt is said instead.
fn show(app: &mut App, rec: &Recording, opts: &ReplayOptions, player: &Player) {
    match rec.moment(player.pos) {
        Ok((mut snap, own)) => {
            app.kill = match own {
                Some(ReplayStep::Kill(record)) => {
                    Some(words::replay_kill(KillSeen::read(&record).as_ref()))
                }
                _ => None,
            };
            judge_with(&mut snap, &opts.diagnose);
            let snap = match &opts.gpus {
                Some(sel) => select_with(snap, sel, &opts.diagnose),
                None => snap,
            };
            app.snap = Some(snap);
            app.error = None;
        }
        Err(e) => {
            app.kill = None;
            app.snap = None;
            app.error = Some(crate::present::words::from::record_bad(&e));
        }
    }
}

//! A room's operator mode: one machine (DESIGN §7c), the same on every edge that shares the room.
//!
//! The operator's mode and the release settings are two separate things. The mode says whether
//! people move at all — open, paused, queue-all, reject-all — and only the operator's actions move
//! it, along the transitions of [`Operator::apply`]. The release settings (auto or a fixed rate,
//! the controller's bounds) say how fast people move while the room is open: changing them, by
//! `PUT .../release` or a new room config, never touches the mode, and ending a hold (`resume`)
//! never touches them.
//!
//! | from \ action | pause | queue-all | reject-all | resume | release |
//! |---|---|---|---|---|---|
//! | open | paused | queue-all | reject-all | open | open |
//! | paused | paused | queue-all | reject-all | open | paused |
//! | queue-all | paused | queue-all | reject-all | open | queue-all |
//! | reject-all | **refused** (409) | **refused** (409) | reject-all | open | reject-all |
//!
//! A hold may be swapped for another hold (each lets nobody in), but the emergency stop is lifted
//! only by `resume`: a pause sent by a second operator in the same minute must not reopen the
//! queue to new fans.
//!
//! What the room's config says on top (its schedule closes it, `reject-all = true`, `test-mode`)
//! is not part of this machine: those are the config's, changed by changing the config, and they
//! win over the operator's mode (docs/src/api.md "A room's modes").
//!
//! With Redis room state the machine's state is published as one [`OperatorOverride`] per room,
//! and a transition is made against the published state with a compare-and-set
//! ([`super::Rooms::operate`]): two edges' operators acting at once both take effect in some order;
//! neither undoes the other by publishing a state it had not seen.

use serde::{Deserialize, Serialize};

use crate::controller::ReleaseMode;

/// The operator's mode of a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// People move at the release settings' pace.
    Open,
    /// Nothing is released; new fans get places and see "paused".
    Paused,
    /// Nothing is released; everyone queues (a passthrough room queues too), fans see "waiting".
    QueueAll,
    /// The emergency stop: nobody new queued or admitted, the closed page for everyone without a
    /// running session; places are kept for when the room resumes.
    RejectAll,
}

impl Mode {
    /// The name used in the admin API, the published override and the stats.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Open => "open",
            Mode::Paused => "paused",
            Mode::QueueAll => "queue_all",
            Mode::RejectAll => "reject_all",
        }
    }

    /// The lock-free mirror's value ([`super::Room`] keeps it in an atomic for status polls).
    pub(super) fn code(self) -> u8 {
        match self {
            Mode::Open => 0,
            Mode::Paused => 1,
            Mode::QueueAll => 2,
            Mode::RejectAll => 3,
        }
    }

    pub(super) fn from_code(c: u8) -> Mode {
        match c {
            1 => Mode::Paused,
            2 => Mode::QueueAll,
            3 => Mode::RejectAll,
            _ => Mode::Open,
        }
    }
}

/// How fast people move while the room is open.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// The controller's feedback loop, within its bounds.
    Auto,
    /// This many admissions per second.
    Fixed(f64),
}

/// An operator's action on a room.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// `POST .../pause`.
    Pause,
    /// `POST .../queue-all`.
    QueueAll,
    /// `POST .../reject-all`.
    RejectAll,
    /// `POST .../resume`.
    Resume,
    /// `PUT .../release`, or a room config whose release settings changed: the pace and the
    /// controller's bounds.
    Release { pace: Pace, min: f64, max: f64 },
}

impl Action {
    /// The admin path's name of the action.
    pub fn name(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::QueueAll => "queue-all",
            Action::RejectAll => "reject-all",
            Action::Resume => "resume",
            Action::Release { .. } => "release",
        }
    }
}

/// An action the machine refuses in the mode it is in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("room is in {}: only resume lifts it ({} refused)", .mode.name(), .action)]
pub struct Refused {
    /// The mode in force.
    pub mode: Mode,
    /// The refused action's name.
    pub action: &'static str,
}

/// The state of the machine: the mode and the release settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Operator {
    /// The operator's mode.
    pub mode: Mode,
    /// The pace while open.
    pub pace: Pace,
    /// The controller's lower bound, admissions/s.
    pub min: f64,
    /// The controller's upper bound, admissions/s.
    pub max: f64,
}

impl Operator {
    /// The state after `action`, or why the machine refuses it.
    pub fn apply(&self, action: Action) -> Result<Operator, Refused> {
        let mode = match (self.mode, action) {
            (Mode::RejectAll, Action::Pause | Action::QueueAll) => {
                return Err(Refused { mode: self.mode, action: action.name() });
            }
            (_, Action::Pause) => Mode::Paused,
            (_, Action::QueueAll) => Mode::QueueAll,
            (_, Action::RejectAll) => Mode::RejectAll,
            (_, Action::Resume) => Mode::Open,
            (m, Action::Release { pace, min, max }) => {
                return Ok(Operator { mode: m, pace, min, max });
            }
        };
        Ok(Operator { mode, ..*self })
    }

    /// What the release controller runs: the pace while open, else a stop.
    pub fn controller_mode(&self) -> ReleaseMode {
        match (self.mode, self.pace) {
            (Mode::Open, Pace::Auto) => ReleaseMode::Auto,
            (Mode::Open, Pace::Fixed(r)) => ReleaseMode::Fixed(r),
            (Mode::QueueAll, _) => ReleaseMode::QueueAll,
            (Mode::Paused | Mode::RejectAll, _) => ReleaseMode::Paused,
        }
    }

    /// This state as an override to publish under `stamp`.
    pub fn publish(&self, stamp: u64) -> OperatorOverride {
        let (release, rate) = match self.pace {
            Pace::Auto => ("auto", None),
            Pace::Fixed(r) => ("fixed", Some(r)),
        };
        OperatorOverride { stamp, mode: self.mode.name().into(), release: Some(release.into()), rate, min: self.min, max: self.max }
    }
}

/// The machine's state as published to the other edges sharing a room's state (one JSON value
/// per room in Redis).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorOverride {
    /// New for each change: an edge applies a stamp once.
    pub stamp: u64,
    /// `open`, `paused`, `queue_all` or `reject_all`. (Edges before the machine wrote `auto` or
    /// `fixed` here for an open room, with its pace: still read.)
    pub mode: String,
    /// `auto` or `fixed` (absent from edges before the machine: the pace in force is kept, or the
    /// one `mode` names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The admissions per second of `fixed`.
    #[serde(default)]
    pub rate: Option<f64>,
    /// The controller's lower bound.
    pub min: f64,
    /// The controller's upper bound.
    pub max: f64,
}

impl OperatorOverride {
    /// The state it describes, `current` filling what an older edge's override leaves out;
    /// `None` when it is not understood (a value out of range, a mode this edge does not know).
    pub fn read(&self, current: &Operator) -> Option<Operator> {
        let fixed = |r: Option<f64>| r.filter(|r| r.is_finite() && *r >= 0.0).map(Pace::Fixed);
        let (mode, legacy_pace) = match self.mode.as_str() {
            "open" => (Mode::Open, None),
            "auto" => (Mode::Open, Some(Pace::Auto)),
            "fixed" => (Mode::Open, Some(fixed(self.rate)?)),
            "paused" => (Mode::Paused, None),
            "queue_all" => (Mode::QueueAll, None),
            "reject_all" => (Mode::RejectAll, None),
            _ => return None,
        };
        let pace = match self.release.as_deref() {
            Some("auto") => Pace::Auto,
            Some("fixed") => fixed(self.rate)?,
            Some(_) => return None,
            None => legacy_pace.unwrap_or(current.pace),
        };
        if !(self.min.is_finite() && self.max.is_finite() && 0.0 <= self.min && self.min <= self.max) {
            return None;
        }
        Some(Operator { mode, pace, min: self.min, max: self.max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACTIONS: [Action; 5] =
        [Action::Pause, Action::QueueAll, Action::RejectAll, Action::Resume, Action::Release { pace: Pace::Fixed(7.0), min: 1.0, max: 9.0 }];
    const MODES: [Mode; 4] = [Mode::Open, Mode::Paused, Mode::QueueAll, Mode::RejectAll];

    fn op(mode: Mode) -> Operator {
        Operator { mode, pace: Pace::Auto, min: 5.0, max: 50.0 }
    }

    #[test]
    fn the_table_of_transitions() {
        use Mode::*;
        // Rows: from; columns: pause, queue-all, reject-all, resume, release (None: refused).
        let table = [
            (Open, [Some(Paused), Some(QueueAll), Some(RejectAll), Some(Open), Some(Open)]),
            (Paused, [Some(Paused), Some(QueueAll), Some(RejectAll), Some(Open), Some(Paused)]),
            (QueueAll, [Some(Paused), Some(QueueAll), Some(RejectAll), Some(Open), Some(QueueAll)]),
            (RejectAll, [None, None, Some(RejectAll), Some(Open), Some(RejectAll)]),
        ];
        for (from, row) in table {
            for (a, want) in ACTIONS.iter().zip(row) {
                let got = op(from).apply(*a).ok().map(|o| o.mode);
                assert_eq!(got, want, "{from:?} --{}-->", a.name());
            }
        }
    }

    #[test]
    fn release_settings_are_orthogonal_to_the_mode() {
        for m in MODES {
            for a in ACTIONS {
                let Ok(after) = op(m).apply(a) else { continue };
                match a {
                    Action::Release { pace, min, max } => {
                        assert_eq!((after.mode, after.pace, after.min, after.max), (m, pace, min, max), "a release change keeps the mode");
                    }
                    _ => assert_eq!((after.pace, after.min, after.max), (Pace::Auto, 5.0, 50.0), "{} keeps the release settings", a.name()),
                }
            }
        }
        // Resume goes back to the pace set at run time, whatever held the room in between.
        let fixed = op(Mode::Open).apply(Action::Release { pace: Pace::Fixed(30.0), min: 5.0, max: 50.0 }).unwrap();
        let back = fixed.apply(Action::RejectAll).unwrap().apply(Action::Resume).unwrap();
        assert_eq!(back.controller_mode(), ReleaseMode::Fixed(30.0));
        assert_eq!(fixed.apply(Action::Pause).unwrap().controller_mode(), ReleaseMode::Paused);
        assert_eq!(fixed.apply(Action::RejectAll).unwrap().controller_mode(), ReleaseMode::Paused);
        assert_eq!(fixed.apply(Action::QueueAll).unwrap().controller_mode(), ReleaseMode::QueueAll);
    }

    #[test]
    fn published_and_read_back_the_same() {
        for m in MODES {
            for pace in [Pace::Auto, Pace::Fixed(12.5)] {
                let o = Operator { mode: m, pace, min: 2.0, max: 20.0 };
                let json = serde_json::to_string(&o.publish(9)).unwrap();
                let back: OperatorOverride = serde_json::from_str(&json).unwrap();
                assert_eq!(back.read(&op(Mode::Open)), Some(o), "{json}");
            }
        }
    }

    #[test]
    fn overrides_of_edges_before_the_machine_are_read() {
        let cur = Operator { mode: Mode::Open, pace: Pace::Fixed(3.0), min: 1.0, max: 10.0 };
        let legacy = |mode: &str, rate: Option<f64>| OperatorOverride { stamp: 1, mode: mode.into(), release: None, rate, min: 1.0, max: 10.0 };
        assert_eq!(legacy("auto", None).read(&cur).map(|o| (o.mode, o.pace)), Some((Mode::Open, Pace::Auto)));
        assert_eq!(legacy("fixed", Some(8.0)).read(&cur).map(|o| (o.mode, o.pace)), Some((Mode::Open, Pace::Fixed(8.0))));
        assert_eq!(legacy("paused", None).read(&cur).map(|o| (o.mode, o.pace)), Some((Mode::Paused, Pace::Fixed(3.0))), "the pace in force kept");
        assert_eq!(legacy("fixed", None).read(&cur), None);
        assert_eq!(legacy("fixed", Some(f64::NAN)).read(&cur), None);
        assert_eq!(legacy("closed", None).read(&cur), None);
        let bad_bounds = OperatorOverride { min: 5.0, max: 1.0, ..legacy("auto", None) };
        assert_eq!(bad_bounds.read(&cur), None);
    }
}

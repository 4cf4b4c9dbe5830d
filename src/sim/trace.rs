//! Tracing: one record per event run, and an export as Chrome trace-event
//! JSON, which Perfetto (ui.perfetto.dev) and `chrome://tracing` open as a
//! timeline.
//!
//! The JSON is written by hand: the format needs only objects, arrays,
//! numbers and strings, and strings are escaped per RFC 8259 (quote,
//! backslash and every control character; everything else is written as
//! UTF-8).

use std::fmt::Write as _;
use std::io;
use std::time::Duration;

use super::EventId;

/// What the tracing hook and the recorded [`Trace`] see for each event run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    /// The event's id.
    pub id: EventId,
    /// The simulated time it ran at, in ticks.
    pub time: u64,
    /// Its priority.
    pub priority: i32,
    /// Its name, from the simulation's namer ([`Builder::namer`]).
    ///
    /// [`Builder::namer`]: super::Builder::namer
    pub name: &'static str,
    /// When its handler started, as wall-clock time since the simulation
    /// was built.
    pub wall_start: Duration,
    /// How long its handler took, wall-clock.
    pub wall: Duration,
}

/// Which clock the Chrome export lays events out on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Timeline {
    /// Wall-clock: each event is a box from when its handler started, as
    /// long as it ran. Shows where the real time went.
    Wall,
    /// Simulated time: each event is an instant at its simulated time,
    /// scaled by `micros_per_tick` (1.0 when a tick is a microsecond). The
    /// handler's wall duration is in the event's arguments.
    Virtual {
        /// Microseconds of timeline per tick; finite and positive.
        micros_per_tick: f64,
    },
}

/// The recorded trace of a simulation (see [`Builder::record_trace`]).
///
/// [`Builder::record_trace`]: super::Builder::record_trace
///
/// ```
/// use tickwheel::sim::{Simulation, Timeline};
///
/// let mut sim = Simulation::builder().record_trace(true).namer(|_: &u8| "tick").build();
/// sim.schedule(5, 1u8);
/// sim.run(|_, _| {}).unwrap();
/// let json = sim.trace().to_chrome_json(Timeline::Virtual { micros_per_tick: 1.0 });
/// assert!(json.contains(r#""name":"tick""#));
/// assert!(json.contains(r#""ts":5.000"#));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    records: Vec<TraceRecord>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a record.
    pub fn push(&mut self, record: TraceRecord) {
        self.records.push(record);
    }

    /// The records, in the order the events ran.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// `true` when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Forgets every record.
    pub fn clear(&mut self) {
        self.records.clear();
    }

    /// The trace as a Chrome trace-event JSON document.
    ///
    /// # Panics
    /// When `timeline` is [`Timeline::Virtual`] with a scale that is not
    /// finite and positive (see [`write_chrome_json`](Self::write_chrome_json)
    /// for the fallible form).
    pub fn to_chrome_json(&self, timeline: Timeline) -> String {
        let mut out = Vec::new();
        self.write_chrome_json(&mut out, timeline)
            .expect("a finite, positive micros_per_tick");
        String::from_utf8(out).expect("the writer emits UTF-8")
    }

    /// Writes the trace as a Chrome trace-event JSON document: one
    /// `traceEvents` entry per record (name, `cat` "sim", `ts`/`dur` in
    /// microseconds, and `args` with id, time and priority), preceded by a
    /// metadata entry naming the track.
    ///
    /// # Errors
    /// Errors of `out`, and [`io::ErrorKind::InvalidInput`] when `timeline`
    /// is [`Timeline::Virtual`] with a scale that is not finite and positive.
    pub fn write_chrome_json<W: io::Write>(
        &self,
        mut out: W,
        timeline: Timeline,
    ) -> io::Result<()> {
        if let Timeline::Virtual { micros_per_tick } = timeline {
            if !(micros_per_tick.is_finite() && micros_per_tick > 0.0) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "micros_per_tick must be finite and positive",
                ));
            }
        }
        out.write_all(
            br#"{"displayTimeUnit":"ns","traceEvents":[{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"simulation"}}"#,
        )?;
        let mut line = String::new();
        for record in &self.records {
            line.clear();
            line.push_str(",\n{\"name\":");
            push_json_string(&mut line, record.name);
            let wall_us = micros(record.wall);
            match timeline {
                Timeline::Wall => {
                    let _ = write!(
                        line,
                        r#","cat":"sim","ph":"X","ts":{:.3},"dur":{:.3},"pid":1,"tid":1"#,
                        micros(record.wall_start),
                        wall_us
                    );
                }
                Timeline::Virtual { micros_per_tick } => {
                    let _ = write!(
                        line,
                        r#","cat":"sim","ph":"i","s":"t","ts":{:.3},"pid":1,"tid":1"#,
                        record.time as f64 * micros_per_tick
                    );
                }
            }
            let _ = write!(
                line,
                r#","args":{{"id":{},"time":{},"priority":{},"wall_us":{:.3}}}}}"#,
                record.id.sequence(),
                record.time,
                record.priority,
                wall_us
            );
            out.write_all(line.as_bytes())?;
        }
        out.write_all(b"\n]}\n")
    }
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Appends `text` as a JSON string literal (RFC 8259 escaping).
pub(super) fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < '\u{20}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

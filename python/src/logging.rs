//! Rust `tracing` events forwarded to Python's `logging`.
//!
//! Every event from the Rust crates (`hlobridge`, `pjrt_client`, this
//! extension) that passes the `HLOBRIDGE_LOG` filter (an `EnvFilter`
//! directive such as `info` or `pjrt_client=trace`; default `debug`) is sent
//! to the Python logger named after its target, `hlobridge.<target>` with
//! `::` turned into `.` (e.g. `hlobridge.pjrt_client.client`). Python's own
//! logging configuration then decides what is shown (Python loggers filter
//! by level as usual); with the default
//! configuration only warnings and errors are printed.
//!
//! Events emitted while the GIL is released re-acquire it for the hand-off;
//! events after the interpreter has shut down go to stderr instead. A
//! `KeyboardInterrupt` raised by the hand-off (a Ctrl-C that arrived while
//! the GIL was released) is re-armed, never swallowed.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::EnvFilter;

static GET_LOGGER: GILOnceCell<PyObject> = GILOnceCell::new();

/// Installs the forwarding subscriber as the process's global default (a
/// no-op if another subscriber is already installed).
pub fn install() {
    let filter = hlobridge_config::get(hlobridge_config::Var::Log)
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new("debug"));
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(PythonLogging);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// The layer that hands events to Python.
struct PythonLogging;

/// Collects an event's message and fields as `message key=value ...`.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

fn python_level(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 5,
        Level::DEBUG => 10,
        Level::INFO => 20,
        Level::WARN => 30,
        Level::ERROR => 40,
    }
}

impl<S: Subscriber> Layer<S> for PythonLogging {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut msg = Message::default();
        event.record(&mut msg);
        let logger = format!("hlobridge.{}", meta.target().replace("::", "."));
        let level = python_level(meta.level());
        // SAFETY: Py_IsInitialized only reads interpreter state and may be
        // called without the GIL.
        if unsafe { pyo3::ffi::Py_IsInitialized() } == 0 {
            eprintln!("{logger}: {}", msg.0);
            return;
        }
        Python::with_gil(|py| {
            let sent = (|| -> PyResult<()> {
                let get_logger = GET_LOGGER.get_or_try_init(py, || {
                    Ok::<_, PyErr>(py.import("logging")?.getattr("getLogger")?.unbind())
                })?;
                get_logger
                    .bind(py)
                    .call1((logger.as_str(),))?
                    .call_method1("log", (level, msg.0.as_str()))?;
                Ok(())
            })();
            if let Err(e) = sent {
                // Running Python code (the logging call) also runs pending
                // signal handlers: a Ctrl-C that arrived while the GIL was
                // released surfaces here as KeyboardInterrupt. Swallowing it
                // would lose the interrupt, so trip SIGINT again: Python
                // raises it at its next check, after this native call.
                if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                    // SAFETY: called with the GIL held; it only records the
                    // signal for the interpreter's next check.
                    unsafe { pyo3::ffi::PyErr_SetInterrupt() };
                }
                eprintln!("{logger}: {}", msg.0);
            }
        });
    }
}

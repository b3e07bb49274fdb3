//! Logs on Workers: each `tracing` event as one JSON line on the console, where Workers Logs
//! (`[observability]` in wrangler.toml) and `wrangler tail` pick it up.
//!
//! tracing-subscriber's formatter reads the system clock (which panics on
//! wasm32-unknown-unknown) and would add to the bundle; the platform stamps every console
//! line with its time anyway, so this is a level filter and a JSON line. Spans are not
//! tracked: the fields that matter (a failure's `ref`, the run id) are on the events.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Installs the console logger at `level` (`error`, `warn`, `info`, `debug`, `trace`;
/// anything else is `warn`). Only the first call in an isolate has an effect.
pub fn init(level: &str) {
    let max = match level.to_ascii_lowercase().as_str() {
        "error" => Level::ERROR,
        "info" => Level::INFO,
        "debug" => Level::DEBUG,
        "trace" => Level::TRACE,
        _ => Level::WARN,
    };
    let _ = tracing::subscriber::set_global_default(Console { max, next_span: AtomicU64::new(1) });
}

struct Console {
    max: Level,
    next_span: AtomicU64,
}

impl Subscriber for Console {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::from_level(self.max))
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed).max(1))
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let metadata = event.metadata();
        let mut fields = Fields(Map::new());
        fields.0.insert("level".into(), Value::from(metadata.level().as_str()));
        fields.0.insert("target".into(), Value::from(metadata.target()));
        event.record(&mut fields);
        let line = Value::Object(fields.0).to_string();
        match *metadata.level() {
            Level::ERROR => worker::console_error!("{line}"),
            Level::WARN => worker::console_warn!("{line}"),
            _ => worker::console_log!("{line}"),
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), Value::from(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
}

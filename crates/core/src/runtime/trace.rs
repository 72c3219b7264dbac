//! Traces over OTLP (OpenTelemetry), off unless an endpoint is configured.
//!
//! One trace per emitted event: the emit's span (a child of the
//! application's own `traceparent` when it sent one), and under it one span
//! per attempt of each of the event's deliveries, whichever worker makes it
//! and however many retries later. What ties them across processes is the
//! delivery row: the emit writes its span's W3C trace context there
//! (`traceparent`), and each attempt's span is started as its child. A
//! worker may also send the attempt's `traceparent` to the receiver
//! (`--send-traceparent`), so a receiver that traces joins the same trace.
//!
//! Export never slows a delivery: spans go to a bounded queue that a thread
//! of the SDK's own sends in batches; when the queue is full, spans are
//! dropped (the SDK logs a warning at the first drop and the count at
//! exit), never waited for; a failed export is logged as an error. With
//! tracing off, nothing here allocates: [`enabled`] is one load. A span
//! that the sampler drops (`OTEL_TRACES_SAMPLER`) gets no attributes built.

use std::sync::OnceLock;
use std::time::Duration;

/// A span's kind (its callers name it).
pub use opentelemetry::trace::SpanKind;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::Context;
/// A span's attribute.
pub use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};

/// Spans waiting for export, unless `OTEL_BSP_MAX_QUEUE_SIZE` names
/// another number: a second of attempts at 16,000 deliveries/s (a span with
/// its nine attributes is about 1 KiB, so a full queue holds about 16 MiB).
/// Beyond it spans are dropped, never waited for.
pub const SPAN_QUEUE: usize = 16_384;

/// How often the queue is exported, unless `OTEL_BSP_SCHEDULE_DELAY` names
/// another number of milliseconds: the SDK's 5 s would let [`SPAN_QUEUE`]
/// fill at a few thousand deliveries/s.
pub const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// The longest a process waits at exit for its last spans to go out: a
/// batch to a reachable collector takes milliseconds, so 5 s is spent only
/// on one that does not answer; and it fits in the stop grace the deploy
/// files give a worker after its drain (65 s + 5 s within 80 s). A one-shot
/// `emit` may take this much longer to exit when the collector is down.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(5);

/// The W3C header a receiver is sent, and the field an event may carry.
pub const TRACEPARENT: &str = "traceparent";

/// How tracing is set up for a process.
#[derive(Debug, Clone, Default)]
pub struct TraceSettings {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is added, as the
    /// OTLP specification says for `OTEL_EXPORTER_OTLP_ENDPOINT`). None:
    /// tracing is off, unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` names the
    /// full URL.
    pub endpoint: Option<String>,
    /// The service name, unless `OTEL_SERVICE_NAME` says otherwise.
    pub service: &'static str,
    /// Send each attempt's `traceparent` to the receiver.
    pub send_traceparent: bool,
}

/// Why tracing could not be set up as asked.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TraceError {
    #[error("the OTLP endpoint is not an http(s) URL")]
    NotHttp,
    /// A password in the URL would be written into the exporter's error
    /// messages (they name the URL); credentials go in headers.
    #[error(
        "the OTLP endpoint carries credentials in its URL; \
         put them in OTEL_EXPORTER_OTLP_HEADERS instead"
    )]
    Credentials,
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
}

struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

static TRACING: OnceLock<Tracing> = OnceLock::new();
static SEND_TRACEPARENT: OnceLock<bool> = OnceLock::new();

/// Sets up tracing for this process as `settings` say (once; a second call
/// changes nothing). Returns whether spans are exported. The exporter is
/// built on a thread of its own: its blocking HTTP client may be neither
/// made nor dropped on an async runtime's thread.
pub fn init(settings: &TraceSettings) -> Result<bool, TraceError> {
    let _ = SEND_TRACEPARENT.set(settings.send_traceparent);
    let traces_url = std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let endpoint = settings
        .endpoint
        .as_deref()
        .map(str::trim)
        .filter(|e| !e.is_empty());
    let (checked, endpoint) = match (traces_url, endpoint) {
        // The signal's own variable is its full URL: the exporter reads it.
        (Some(full), _) => (full, None),
        (None, Some(base)) => {
            let url = format!("{}/v1/traces", base.trim_end_matches('/'));
            (url.clone(), Some(url))
        }
        (None, None) => return Ok(false),
    };
    let url = url::Url::parse(checked.trim())
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or(TraceError::NotHttp)?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(TraceError::Credentials);
    }
    let service = settings.service;
    let built = std::thread::spawn(move || -> Result<Tracing, TraceError> {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_http();
        if let Some(url) = endpoint {
            use opentelemetry_otlp::WithExportConfig;
            exporter = exporter.with_endpoint(url);
        }
        let exporter = exporter
            .build()
            .map_err(|e| TraceError::Exporter(e.to_string()))?;
        // Ours unless the variable names a number (the SDK would fall back
        // to its own defaults on one it cannot read).
        let given = |var: &str| {
            std::env::var(var)
                .ok()
                .is_some_and(|v| v.trim().parse::<u64>().is_ok())
        };
        let mut batch = BatchConfigBuilder::default();
        if !given("OTEL_BSP_MAX_QUEUE_SIZE") {
            batch = batch.with_max_queue_size(SPAN_QUEUE);
        }
        if !given("OTEL_BSP_SCHEDULE_DELAY") {
            batch = batch.with_scheduled_delay(EXPORT_EVERY);
        }
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch.build())
            .build();
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service);
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("hookfleet");
        Ok(Tracing { provider, tracer })
    })
    .join()
    .map_err(|_| TraceError::Exporter("setting it up panicked".into()))??;
    let _ = TRACING.set(built);
    Ok(true)
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    TRACING.get().is_some()
}

/// Whether attempts send their `traceparent` to receivers.
pub fn send_traceparent() -> bool {
    SEND_TRACEPARENT.get().copied().unwrap_or(false)
}

/// Exports what is queued and stops, waiting at most [`FLUSH_AT_EXIT`] (on
/// a thread of its own, as [`init`] builds). It blocks: call it from a
/// blocking thread or after the async runtime is done.
pub fn shutdown() {
    let Some(t) = TRACING.get() else { return };
    let provider = t.provider.clone();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(provider.shutdown());
    });
    match finished.recv_timeout(FLUSH_AT_EXIT) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the last spans could not be exported"),
        Err(_) => tracing::warn!(
            waited = ?FLUSH_AT_EXIT,
            "the last spans were not exported in time; exiting without them"
        ),
    }
}

/// A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), read as the
/// context of a remote parent; None when it is not one (the W3C rule: a
/// malformed header starts a new trace, it is not an error). Of the flags
/// only "sampled" is kept, as the W3C propagator keeps it.
pub fn parse_traceparent(text: &str) -> Option<SpanContext> {
    let mut parts = text.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    // Version ff is invalid; a future version may carry more fields.
    if !hex(version, 2) || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    if !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?) & TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// `text` read as a `traceparent` and written again as version 00 writes
/// it (55 characters, whatever a later version appended dropped): what a
/// row stores and a receiver is sent, never the caller's own bytes.
pub fn normalize_traceparent(text: &str) -> Option<String> {
    parse_traceparent(text).map(|cx| traceparent_of(&cx))
}

/// `context` as a W3C `traceparent`.
pub fn traceparent_of(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

/// A span in flight; ended (and queued for export) when dropped.
pub struct Traced {
    span: opentelemetry_sdk::trace::Span,
}

impl Traced {
    /// Its context as a W3C `traceparent`, for a row or a receiver.
    pub fn traceparent(&self) -> String {
        traceparent_of(self.span.span_context())
    }

    /// Whether it is recorded (and so exported): false when the sampler
    /// dropped it, and then attributes are not worth building.
    pub fn is_recording(&self) -> bool {
        self.span.is_recording()
    }

    /// Sets the attribute `key`.
    pub fn set(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        self.span.set_attribute(KeyValue::new(key, value));
    }

    /// Marks it failed, with why.
    pub fn fail(&mut self, why: &str) {
        self.span.set_status(Status::error(why.to_string()));
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        self.span.end();
    }
}

/// A span named `name` of `kind`, under the remote parent `parent` (a
/// `traceparent`; a new trace without one or when it does not parse), with
/// the `attributes` made (only when the span is recorded: with tracing off
/// or the span sampled out, nothing is built); None when tracing is off.
pub fn start(
    name: &'static str,
    kind: SpanKind,
    parent: Option<&str>,
    attributes: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Traced> {
    let t = TRACING.get()?;
    let parent = match parent.and_then(parse_traceparent) {
        Some(remote) => Context::new().with_remote_span_context(remote),
        None => Context::new(),
    };
    let mut span = t
        .tracer
        .span_builder(name)
        .with_kind(kind)
        .start_with_context(&t.tracer, &parent);
    if span.is_recording() {
        span.set_attributes(attributes());
    }
    Some(Traced { span })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_w3c_writes_it() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = parse_traceparent(tp).expect("a valid traceparent");
        assert_eq!(traceparent_of(&cx), tp);
        assert!(cx.is_remote() && cx.is_sampled());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?} was taken");
        }
        // A later version may add fields after the four it shares; what is
        // kept is version 00 of it, with the sampled flag alone.
        assert_eq!(
            normalize_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff-é"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into())
        );
        assert_eq!(
            normalize_traceparent(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02 "),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00".into())
        );
    }

    #[test]
    fn an_endpoint_with_credentials_in_its_url_is_refused() {
        for (endpoint, refused) in [
            ("http://user:pw@collector:4318", TraceError::Credentials),
            ("ftp://collector:4318", TraceError::NotHttp),
            ("collector:4318", TraceError::NotHttp),
        ] {
            let got = init(&TraceSettings {
                endpoint: Some(endpoint.into()),
                service: "test",
                send_traceparent: false,
            });
            assert_eq!(got, Err(refused.clone()), "{endpoint}");
            assert!(!got.unwrap_err().to_string().contains("pw"));
        }
        assert!(!enabled());
    }

    #[test]
    fn without_an_endpoint_nothing_is_traced() {
        let on = init(&TraceSettings {
            endpoint: None,
            service: "test",
            send_traceparent: false,
        });
        assert_eq!(on, Ok(false));
        assert!(!enabled());
        assert!(start("emit", SpanKind::Producer, None, || unreachable!(
            "built while off"
        ))
        .is_none());
    }
}

//! Spans exported over OTLP/HTTP (protobuf), with the cargo feature `otlp`, when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the service
//! is `OTEL_SERVICE_NAME`, else the binary's name. Without the feature, or with neither
//! variable set, every function here does nothing and no exporter exists.
//!
//! Each request's `request` span joins the W3C trace of its [`TraceContext`]: its parent is
//! the caller's span from `traceparent`, and this hop's span id (the parent the relay hands to
//! the holder) is the exported span's id, so a relayed call's spans on both instances form one
//! tree in a tracing backend.

use super::TraceContext;

#[cfg(feature = "otlp")]
mod exporter {
    use std::sync::OnceLock;

    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
    };
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
    use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
    use tracing_subscriber::registry::LookupSpan;

    use super::TraceContext;

    /// The provider once installed: kept to flush it at shutdown, and its presence is what
    /// tells the request layer to join spans to their trace (a lookup, nothing more, when
    /// exporting is off).
    static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

    /// The endpoint variables the exporter reads itself (the generic one gets `/v1/traces`
    /// appended; the traces one is used as it is).
    const ENDPOINT_VARS: [&str; 2] = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ];

    /// The layer exporting spans, if an endpoint is configured and none was installed yet;
    /// `Err` names what failed (the caller logs it once logging is up).
    pub(crate) fn layer<S>() -> Result<Option<OpenTelemetryLayer<S, SdkTracer>>, String>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let configured = ENDPOINT_VARS
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|e| !e.trim().is_empty()));
        if !configured || PROVIDER.get().is_some() {
            return Ok(None);
        }
        // HTTP with protobuf, the exporter's reqwest blocking client: the batch processor
        // exports from its own thread, outside the server's runtime.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .map_err(|e| format!("OTLP span exporter: {e}"))?;
        let resource = Resource::builder()
            .with_service_name(service_name())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("fleetmcp");
        if PROVIDER.set(provider).is_err() {
            return Ok(None);
        }
        Ok(Some(tracing_opentelemetry::layer().with_tracer(tracer)))
    }

    /// `OTEL_SERVICE_NAME`, else the binary's file name (`help-desk`), else `fleetmcp`.
    fn service_name() -> String {
        if let Ok(name) = std::env::var("OTEL_SERVICE_NAME")
            && !name.trim().is_empty()
        {
            return name.trim().to_string();
        }
        std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "fleetmcp".to_string())
    }

    pub(crate) fn join(span: &tracing::Span, trace: &mut TraceContext) {
        if PROVIDER.get().is_none() {
            return;
        }
        if let Some(parent) = trace.parent_id {
            let remote = SpanContext::new(
                TraceId::from(trace.trace_id),
                SpanId::from(parent),
                TraceFlags::new(trace.flags),
                true,
                TraceState::default(),
            );
            // Fails only when the span is disabled (RUST_LOG) or already started: then there
            // is nothing to export under this trace and the context stays as it was.
            if span
                .set_parent(opentelemetry::Context::new().with_remote_span_context(remote))
                .is_err()
            {
                return;
            }
        }
        // Starts the exported span; its ids become this hop's, so the logs' `trace_id` and the
        // relay's `traceparent` name the span a backend shows.
        let cx = span.context();
        let started = cx.span().span_context().clone();
        if started.is_valid() {
            trace.trace_id = u128::from_be_bytes(started.trace_id().to_bytes());
            trace.span_id = u64::from_be_bytes(started.span_id().to_bytes());
        }
    }

    pub(crate) fn flush() {
        if let Some(provider) = PROVIDER.get() {
            // Exports what is still batched; a collector that is down only loses these spans.
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "OTLP: spans not flushed at shutdown");
            }
        }
    }
}

#[cfg(feature = "otlp")]
pub(crate) use exporter::layer;

/// Joins a request's span to its trace for export (see the module documentation), adopting the
/// exported span's ids into `trace`. Does nothing unless spans are exported.
#[inline]
pub(crate) fn join(span: &tracing::Span, trace: &mut TraceContext) {
    #[cfg(feature = "otlp")]
    exporter::join(span, trace);
    #[cfg(not(feature = "otlp"))]
    let _ = (span, trace);
}

/// Exports the spans still batched and stops the exporter. Does nothing unless spans are
/// exported.
pub(crate) fn flush() {
    #[cfg(feature = "otlp")]
    exporter::flush();
}

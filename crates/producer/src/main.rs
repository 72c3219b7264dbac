//! `hookfleet-producer`: emit events from the command line (one, or a
//! newline-delimited file of them) or serve the HTTP ingest.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use hookfleet_core::domain::parse_duration;
use hookfleet_core::runtime::Shutdown;
use hookfleet_producer::ingest::IngestLimits;
use hookfleet_producer::{EmitError, EmitReport, Event, Producer, ProducerConfig};
use hookfleet_settings::{fatal, init_tracing, MetricsArgs, Settings, TraceArgs};
use hookfleet_template::TemplateSettings;

/// Events per transaction when emitting a file: large enough to amortise the
/// round trips, small enough that one batch commits in tens of milliseconds.
const DEFAULT_BATCH_SIZE: u64 = 500;

/// Postgres connections: emits are sequential per process, the ingest serves
/// concurrent requests.
const POOL_SIZE: u32 = 8;

#[derive(Parser)]
#[command(
    name = "hookfleet-producer",
    version,
    about = "Turn application events into webhook deliveries"
)]
struct Cli {
    #[command(flatten)]
    settings: Settings,
    #[command(flatten)]
    templates: TemplateSettings,
    #[command(flatten)]
    trace: TraceArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Emit one event, or a newline-delimited file of events with --batch.
    Emit(EmitArgs),
    /// Serve the HTTP ingest (POST /v1/events, POST /v1/events/batch).
    Serve {
        /// Address to listen on.
        #[arg(
            long,
            env = "HOOKFLEET_INGEST_LISTEN",
            default_value = "127.0.0.1:8480"
        )]
        listen: SocketAddr,
        /// Bearer token callers must present (Authorization: Bearer ...).
        /// Required on any address but loopback; never empty.
        #[arg(long, env = "HOOKFLEET_INGEST_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// A file holding the token (when --token is not given): kept out of
        /// `ps` and the environment.
        #[arg(long, env = "HOOKFLEET_INGEST_TOKEN_FILE", value_name = "FILE")]
        token_file: Option<std::path::PathBuf>,
        /// How long a caller has to send a request's headers.
        #[arg(long, env = "HOOKFLEET_INGEST_HEADER_READ_TIMEOUT", default_value = "10s",
              value_parser = parse_duration)]
        header_read_timeout: Duration,
        /// How long a caller has to send a request's body.
        #[arg(long, env = "HOOKFLEET_INGEST_BODY_READ_TIMEOUT", default_value = "30s",
              value_parser = parse_duration)]
        body_read_timeout: Duration,
        /// Connections served at once (more wait in the kernel's backlog);
        /// one client (an address, an IPv6 /64) is served a quarter of them.
        #[arg(long, env = "HOOKFLEET_INGEST_MAX_CONNECTIONS", default_value_t = hookfleet_producer::ingest::MAX_CONNECTIONS as u64,
              value_parser = clap::value_parser!(u64).range(1..=100_000))]
        max_connections: u64,
        #[command(flatten)]
        metrics: MetricsArgs,
    },
}

#[derive(Args)]
struct EmitArgs {
    /// Entity type (Frappe's doctype), e.g. "Sales Order".
    #[arg(long, required_unless_present = "batch")]
    entity_type: Option<String>,
    /// Event, e.g. on_submit or workflow_transition.
    #[arg(long, required_unless_present = "batch")]
    event: Option<String>,
    /// The document's name, e.g. SO-0001.
    #[arg(long, required_unless_present = "batch")]
    name: Option<String>,
    /// The document as a JSON object, from FILE or - for stdin (default:
    /// {"doctype": T, "name": NAME}).
    #[arg(long, value_name = "FILE|-", conflicts_with = "batch")]
    doc: Option<String>,
    /// Your own event id, making a repeated emit idempotent.
    #[arg(long, conflicts_with = "batch")]
    event_id: Option<String>,
    /// The W3C trace context you emit it in (00-<trace id>-<span id>-<flags>):
    /// its deliveries join that trace; with --batch, a line's "traceparent"
    /// field does the same.
    #[arg(long, conflicts_with = "batch")]
    traceparent: Option<String>,
    /// Newline-delimited events ({"entity_type","event","name","doc"} per
    /// line) from FILE or - for stdin. A malformed line is reported with its
    /// number and skipped (exit code 1 at the end).
    #[arg(long, value_name = "FILE|-", conflicts_with_all = ["entity_type", "event", "name"])]
    batch: Option<String>,
    /// Events per transaction with --batch. Within one transaction only the
    /// last state of a document reaches each webhook.
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    batch_size: u64,
    /// Print the rows created as JSON.
    #[arg(long)]
    json: bool,
}

fn read_source(source: &str) -> anyhow::Result<Box<dyn BufRead>> {
    Ok(if source == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(PathBuf::from(source))
            .with_context(|| format!("cannot open {source}"))?;
        Box::new(std::io::BufReader::new(file))
    })
}

fn read_document(source: &str) -> anyhow::Result<Value> {
    hookfleet_core::domain::read_document(read_source(source)?, source).map_err(anyhow::Error::msg)
}

fn print_report(report: &EmitReport, as_json: bool) {
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).unwrap_or_default()
        );
        return;
    }
    if report.deliveries.is_empty() {
        println!("no enabled webhook matched (or every condition was false)");
    }
    for d in &report.deliveries {
        let note = match (&d.error, d.duplicate, d.enqueued) {
            (Some(e), _, _) => e.clone(),
            (None, true, _) => "already recorded for this event id".into(),
            (None, false, true) => "queued".into(),
            (None, false, false) => String::new(),
        };
        println!(
            "{:>8}  {:<10} {:<24} {}  {}",
            d.id, d.status, d.webhook, d.event_id, note
        );
    }
    if let Some(e) = &report.enqueue_error {
        println!("note: {e}");
    }
}

async fn emit_one(producer: &Producer, args: EmitArgs) -> anyhow::Result<ExitCode> {
    let entity_type = args.entity_type.unwrap_or_default();
    let name = args.name.unwrap_or_default();
    let doc = match &args.doc {
        Some(source) => read_document(source)?,
        None => Value::Null,
    };
    let mut event = Event::new(&entity_type, &args.event.unwrap_or_default(), &name, doc);
    event.event_id = args.event_id;
    event.traceparent = args.traceparent;
    match producer.emit(event).await {
        Ok(report) => {
            print_report(&report, args.json);
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ EmitError::WorkflowTransition { .. }) => {
            fatal(&e);
            if let EmitError::WorkflowTransition { report, .. } = e {
                print_report(&report, args.json);
            }
            Ok(ExitCode::from(1))
        }
        Err(e @ EmitError::TransitionUnrecorded { .. }) => {
            fatal(&e);
            if let EmitError::TransitionUnrecorded { report, .. } = e {
                print_report(&report, args.json);
            }
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e.into()),
    }
}

async fn emit_file(
    producer: &Producer,
    source: &str,
    batch_size: usize,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let reader = read_source(source)?;
    let report = producer
        .emit_lines(reader, batch_size)
        .await
        .with_context(|| format!("emitting {source}"))?;
    for s in &report.skipped {
        eprintln!("line {}: {}; skipped", s.line, s.error);
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let t = &report.totals;
        println!(
            "{} events emitted from {} lines; {} skipped; deliveries: {} ({} queued, {} delivered, {} exhausted, {} duplicates, {} superseded by a later state)",
            report.events_emitted, report.lines_read, report.skipped.len(), t.deliveries, t.queued,
            t.delivered, t.exhausted, t.duplicates, t.superseded
        );
        if report.batches_not_queued > 0 {
            println!(
                "note: {} batches were recorded but not queued; the sweeper sends them after the grace",
                report.batches_not_queued
            );
        }
    }
    for f in &report.workflow_transition_failures {
        eprintln!(
            "error: workflow_transition to {} failed: {}",
            f.webhook, f.reason
        );
    }
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let settings = cli.settings;
    init_tracing(&settings.log_format);
    settings.install(true)?;
    cli.trace.init(match cli.command {
        Command::Emit(_) => "hookfleet-producer",
        Command::Serve { .. } => "hookfleet-ingest",
    })?;
    cli.templates.install();
    let store = settings.store(POOL_SIZE)?;
    hookfleet_settings::require_current_schema(&store)?;
    let queue = settings.queue()?;
    let producer = Producer::new(
        store,
        queue,
        ProducerConfig {
            schedule: settings.retry_schedule.clone(),
            queue_grace: settings.queue_grace,
            policy: Arc::new(settings.allowed_networks.clone()),
        },
    );
    match cli.command {
        Command::Emit(args) => match args.batch.clone() {
            Some(source) => {
                emit_file(&producer, &source, args.batch_size as usize, args.json).await
            }
            None => emit_one(&producer, args).await,
        },
        Command::Serve {
            listen,
            token,
            token_file,
            header_read_timeout,
            body_read_timeout,
            max_connections,
            metrics,
        } => {
            let token = hookfleet_settings::secret_or_file(
                token.as_deref(),
                token_file.as_deref(),
                "the ingest token file",
            )?;
            let shutdown = Shutdown::new();
            shutdown.listen_for_signals();
            let stop = shutdown.clone();
            // The ingest has no loop of its own: a ticker on its runtime
            // shows /livez the runtime still schedules work.
            let producer = producer.for_ingest();
            metrics
                .serve(
                    hookfleet_core::runtime::observe::Role::Producer,
                    producer.store(),
                    producer.queue(),
                    INGEST_STALL_AFTER,
                    &shutdown,
                )
                .await?;
            tokio::spawn(async {
                loop {
                    hookfleet_core::runtime::observe::progress().tick();
                    tokio::time::sleep(INGEST_TICK).await;
                }
            });
            let limits = IngestLimits {
                header_read_timeout,
                body_read_timeout,
                max_connections: max_connections as usize,
            };
            hookfleet_producer::ingest::serve(
                listen,
                Arc::new(producer),
                token,
                limits,
                async move { stop.requested(1).await },
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// How often the ingest's ticker ticks, and how long /livez tolerates it
/// not ticking: a runtime that cannot run a task for half a minute is
/// wedged.
const INGEST_TICK: Duration = Duration::from_secs(1);
const INGEST_STALL_AFTER: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    // Started as a template renderer (see hookfleet_template): serve.
    if let Some(code) = hookfleet_template::serve_if_renderer() {
        return code;
    }
    run_main()
}

#[tokio::main]
async fn run_main() -> ExitCode {
    let cli: Cli = hookfleet_settings::parse_args();
    let code = match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            fatal(format!("{e:#}"));
            ExitCode::from(1)
        }
    };
    // The emits' spans go out before the process does (a blocking wait,
    // off the runtime's threads).
    let _ = tokio::task::spawn_blocking(hookfleet_core::runtime::trace::shutdown).await;
    code
}

//! Emitting a file of newline-delimited events (`{"entity_type", "event",
//! "name", "doc"}` per line), a batch of `batch_size` events per transaction.
//! A line that is not an event is skipped and reported by its number; the
//! others are emitted. A line is read as bytes and never held past
//! [`MAX_DOCUMENT_BYTES`], so a huge or binary line is one bad line, not the
//! end of the run.

use std::io::BufRead;

use serde::Serialize;

use crate::emit::{
    Batch, EmitError, EmitReport, Event, Producer, TransitionFailure, MAX_DOCUMENT_BYTES,
};
use hookfleet_core::domain::DeliveryStatus;

/// A line that was not emitted, and why.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedLine {
    /// 1-based.
    pub line: usize,
    pub error: String,
}

/// Deliveries made by all the batches of a file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub deliveries: usize,
    /// Put on a queue now.
    pub queued: usize,
    /// workflow_transition deliveries made during the emit.
    pub delivered: usize,
    pub exhausted: usize,
    /// Already recorded for their event id.
    pub duplicates: usize,
    /// Folded into a later state of the same document.
    pub superseded: usize,
}

impl Totals {
    fn add(&mut self, report: &EmitReport) {
        let count = |f: &dyn Fn(&crate::emit::Delivery) -> bool| {
            report.deliveries.iter().filter(|d| f(d)).count()
        };
        self.deliveries += report.deliveries.len();
        self.queued += count(&|d| d.enqueued);
        self.delivered += count(&|d| d.status == DeliveryStatus::Delivered);
        self.exhausted += count(&|d| d.status == DeliveryStatus::Exhausted);
        self.duplicates += count(&|d| d.duplicate);
        self.superseded += report.superseded;
    }
}

/// What emitting a file did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LinesReport {
    /// Lines that were not blank.
    pub lines_read: usize,
    pub events_emitted: usize,
    pub skipped: Vec<SkippedLine>,
    pub totals: Totals,
    pub workflow_transition_failures: Vec<TransitionFailure>,
    /// Batches recorded but not queued (Redis refused): the sweeper sends
    /// them after the grace.
    pub batches_not_queued: usize,
}

impl LinesReport {
    /// Every line was emitted and every workflow_transition delivered.
    pub fn is_clean(&self) -> bool {
        self.skipped.is_empty() && self.workflow_transition_failures.is_empty()
    }
}

/// Why a file could not be emitted to the end.
#[derive(Debug, thiserror::Error)]
pub enum LinesError {
    #[error("cannot read the events: {0}")]
    Read(#[from] std::io::Error),
    /// A batch failed as a whole; the batches before it were emitted.
    #[error("{error} (after {emitted} events were emitted)")]
    Emit { error: EmitError, emitted: usize },
}

impl Producer {
    /// Emits every event of `reader` (see the module docs), `batch_size`
    /// events per transaction.
    pub async fn emit_lines(
        &self,
        mut reader: impl BufRead,
        batch_size: usize,
    ) -> Result<LinesReport, LinesError> {
        let mut report = LinesReport::default();
        let mut line: Vec<u8> = Vec::new();
        let mut number = 0usize;
        let mut batch = Batch::new();
        loop {
            line.clear();
            let n = std::io::Read::take(reader.by_ref(), MAX_DOCUMENT_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            number += 1;
            if line.len() > MAX_DOCUMENT_BYTES && !line.ends_with(b"\n") {
                skip_rest_of_line(&mut reader)?;
                report.skip(number, format!("over {MAX_DOCUMENT_BYTES} bytes"));
                continue;
            }
            let Ok(text) = std::str::from_utf8(&line) else {
                report.skip(number, "not UTF-8 text".into());
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            report.lines_read += 1;
            let parsed = serde_json::from_str::<Event>(text.trim())
                .map_err(|e| e.to_string())
                .and_then(|e| e.check().map_err(|e| e.to_string()));
            match parsed {
                Ok(event) => batch.push(event),
                Err(e) => report.skip(number, e),
            }
            if batch.len() >= batch_size {
                self.flush(std::mem::take(&mut batch), &mut report).await?;
            }
        }
        if !batch.is_empty() {
            self.flush(batch, &mut report).await?;
        }
        Ok(report)
    }

    async fn flush(&self, batch: Batch, report: &mut LinesReport) -> Result<(), LinesError> {
        let emitted = match self.emit_batch(batch).await {
            Ok(r) => r,
            Err(EmitError::WorkflowTransition {
                report: r,
                failures,
            }) => {
                report.workflow_transition_failures.extend(failures);
                *r
            }
            // Recorded (and sent); only the outcome of one transition is
            // unknown: said, and the file goes on (emitting the batch again
            // would record its events twice under new ids).
            Err(e @ EmitError::TransitionUnrecorded { .. }) => {
                let reason = e.to_string();
                let EmitError::TransitionUnrecorded {
                    report: r, webhook, ..
                } = e
                else {
                    unreachable!("matched above")
                };
                report.workflow_transition_failures.push(TransitionFailure {
                    webhook,
                    reason,
                    sent: true,
                });
                *r
            }
            Err(error) => {
                return Err(LinesError::Emit {
                    error,
                    emitted: report.events_emitted,
                })
            }
        };
        report.totals.add(&emitted);
        report.events_emitted += emitted.events;
        if emitted.enqueue_error.is_some() {
            report.batches_not_queued += 1;
        }
        Ok(())
    }
}

impl LinesReport {
    fn skip(&mut self, line: usize, error: String) {
        self.skipped.push(SkippedLine { line, error });
    }
}

/// Discards input up to and including the next newline, a buffer at a time
/// (an oversized line is never held in memory whole).
fn skip_rest_of_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

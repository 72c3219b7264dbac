//! Emit: the rows an event makes, one per (event id, webhook), recorded in
//! chunks; an event recorded twice finds its rows again.

use std::collections::HashSet;

use diesel::prelude::*;
use diesel::PgConnection;
use serde::Serialize;

use crate::domain::{DeliveryLog, DeliveryStatus, NewDelivery};
use crate::error::StoreError;
use crate::store::schema::webhook_request_logs;

use super::pg_text;

/// Rows per INSERT at emit: 17 bind parameters per row stays far below
/// Postgres's 65,535-parameter limit.
pub(crate) const INSERT_CHUNK: usize = 1000;

/// A row recorded at emit.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub id: i64,
    pub webhook_id: Option<i64>,
    pub event_id: String,
    pub webhook_name: String,
    pub status: DeliveryStatus,
    pub queue: String,
    /// The (event, webhook) pair was already recorded: no new row was made.
    pub duplicate: bool,
}

/// Records `rows`, at most one per (event id, webhook): an event recorded
/// twice returns the existing row marked `duplicate`.
pub fn insert(conn: &mut PgConnection, rows: &[NewDelivery]) -> Result<Vec<Recorded>, StoreError> {
    // A reason quoting a document may hold a NUL, which text cannot.
    let sanitized: Vec<NewDelivery>;
    let rows = if rows
        .iter()
        .any(|r| r.error.as_deref().is_some_and(|e| e.contains('\0')))
    {
        sanitized = rows
            .iter()
            .map(|r| NewDelivery {
                error: r.error.as_deref().map(|e| pg_text(e).into_owned()),
                ..r.clone()
            })
            .collect();
        &sanitized[..]
    } else {
        rows
    };
    let mut out = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(INSERT_CHUNK) {
        let inserted: Vec<(i64, String, Option<i64>, String, DeliveryStatus, String)> =
            diesel::insert_into(webhook_request_logs::table)
                .values(chunk)
                .on_conflict((
                    webhook_request_logs::event_id,
                    webhook_request_logs::webhook_id,
                ))
                .do_nothing()
                .returning((
                    webhook_request_logs::id,
                    webhook_request_logs::event_id,
                    webhook_request_logs::webhook_id,
                    webhook_request_logs::webhook_name,
                    webhook_request_logs::status,
                    webhook_request_logs::queue,
                ))
                .get_results(conn)?;
        let fresh: HashSet<(String, Option<i64>)> = inserted
            .iter()
            .map(|(_, e, w, _, _, _)| (e.clone(), *w))
            .collect();
        out.extend(inserted.into_iter().map(
            |(id, event_id, webhook_id, webhook_name, status, queue)| Recorded {
                id,
                webhook_id,
                event_id,
                webhook_name,
                status,
                queue,
                duplicate: false,
            },
        ));
        for row in chunk
            .iter()
            .filter(|r| !fresh.contains(&(r.event_id.clone(), r.webhook_id)))
        {
            let existing: DeliveryLog = webhook_request_logs::table
                .filter(webhook_request_logs::event_id.eq(&row.event_id))
                .filter(webhook_request_logs::webhook_id.eq(row.webhook_id))
                .select(DeliveryLog::as_select())
                .first(conn)?;
            out.push(Recorded {
                id: existing.id,
                webhook_id: existing.webhook_id,
                status: existing.status,
                event_id: existing.event_id,
                webhook_name: existing.webhook_name,
                queue: existing.queue,
                duplicate: true,
            });
        }
    }
    Ok(out)
}

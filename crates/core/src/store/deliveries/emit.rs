//! Emit: the rows an event makes, one per (event id, webhook), recorded in
//! chunks; an event recorded twice finds its rows again.

use std::collections::HashSet;

use diesel::prelude::*;
use diesel::PgConnection;
use serde::Serialize;

use crate::domain::{DeliveryLog, DeliveryStatus, NewDelivery};
use crate::error::{Refusal, StoreError};
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
            // The same event again is a duplicate; another event under its
            // id is refused rather than dropped.
            if (
                &existing.entity_type,
                &existing.entity_name,
                &existing.event,
            ) != (&row.entity_type, &row.entity_name, &row.event)
            {
                return Err(StoreError::Refused(Refusal::EventIdReused {
                    event_id: row.event_id.clone(),
                    existing: format!(
                        "{} {} {}",
                        existing.entity_type, existing.entity_name, existing.event
                    ),
                }));
            }
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

/// Records `rows` as [`insert`] does, all in one transaction; if the
/// database refuses that statement (a value it will not store, on a
/// connection that still works), each row is recorded on its own instead,
/// and a row it refuses alone is recorded Exhausted with the reason and
/// without the values it refused (no URL, body or headers), so one bad
/// value never keeps the other events of a batch from being recorded.
pub fn insert_each_if_refused(
    conn: &mut PgConnection,
    rows: &[NewDelivery],
) -> Result<Vec<Recorded>, StoreError> {
    let whole = conn
        .build_transaction()
        .run(|conn| insert(conn, rows).map_err(TransactionError::from));
    match whole {
        Ok(recorded) => return Ok(recorded),
        Err(TransactionError(e)) if refused(conn, &e) => {
            tracing::warn!(error = %e, rows = rows.len(),
                "the database refused an emit's rows together; recording them one by one");
        }
        Err(TransactionError(e)) => return Err(e),
    }
    // One transaction still, each row in a savepoint of its own: the batch
    // stays all or nothing (a row that fails for any other reason fails it
    // whole, and a caller's retry cannot record a row twice), and only the
    // refused row is rolled back.
    let each = conn.build_transaction().run(|conn| {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let alone = conn.transaction(|conn| {
                insert(conn, std::slice::from_ref(row)).map_err(TransactionError::from)
            });
            match alone {
                Ok(recorded) => out.extend(recorded),
                Err(TransactionError(e)) if refused(conn, &e) => {
                    let refused = NewDelivery {
                        url: String::new(),
                        body: String::new(),
                        headers: serde_json::json!([]),
                        status: DeliveryStatus::Exhausted,
                        next_retry: None,
                        lease_expires_at: None,
                        error: Some(format!("the database refused this delivery's values: {e}")),
                        ..row.clone()
                    };
                    out.extend(conn.transaction(|conn| {
                        insert(conn, std::slice::from_ref(&refused)).map_err(TransactionError::from)
                    })?);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    });
    each.map_err(|t| t.0)
}

/// Whether `e` is the database refusing a statement on a connection that
/// still answers (its data at fault), as [`crate::store::Store`] sorts
/// failures: never by the message's words.
fn refused(conn: &mut PgConnection, e: &StoreError) -> bool {
    use diesel::result::{DatabaseErrorKind as Kind, Error as E};
    let database_error = match e {
        StoreError::Query(E::DatabaseError(kind, _))
        | StoreError::Rejected(E::DatabaseError(kind, _)) => !matches!(
            kind,
            Kind::ClosedConnection | Kind::SerializationFailure | Kind::ReadOnlyTransaction
        ),
        _ => false,
    };
    database_error && diesel::sql_query("SELECT 1").execute(conn).is_ok()
}

/// A [`StoreError`] carried through diesel's transaction, which needs its
/// error to come from diesel's as well.
#[derive(Debug)]
struct TransactionError(StoreError);

impl From<StoreError> for TransactionError {
    fn from(e: StoreError) -> Self {
        TransactionError(e)
    }
}

impl From<diesel::result::Error> for TransactionError {
    fn from(e: diesel::result::Error) -> Self {
        TransactionError(e.into())
    }
}

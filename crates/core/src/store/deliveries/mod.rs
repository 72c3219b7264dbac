//! Delivery rows through their life: recorded at emit, claimed for an attempt,
//! given an outcome, found again by the sweeper, replayed by the operator.
//!
//! Every write that decides a row's fate is conditional on the row's state,
//! judged by the database's clock (`now()`), never a client's, so two
//! workers, two sweepers, an operator or a late writer can never both act on
//! it:
//! - a claim takes only a non-terminal row that is due and not leased, counts
//!   the attempt, sets a lease and bumps the row's fencing token
//!   (`claim_token`);
//! - a replay takes only a Failed or Exhausted row that is not leased, and
//!   bumps the token too;
//! - an outcome is written only while the row still carries its claim's
//!   token: a late outcome of an attempt whose lease ran out can never
//!   overwrite a later claim or a replay.
//!
//! The hot paths (claim, outcomes) take many rows per statement: one round
//! trip per batch, not per delivery.
//!
//! One file per step of a row's life: [`emit`](self) (`emit.rs`), claim,
//! record, due (and held), replay, search.

mod claim;
mod due;
mod emit;
mod record;
mod replay;
mod search;

pub use claim::{claim, take_for_transition, webhooks_of, withhold, Verdict, WITHHELD_RETRY};
pub use due::{due, due_of_webhook, held_until, hold, release_held, DueRow, HELD_UNTIL};
pub use emit::{insert, insert_each_if_refused, Recorded};
pub use record::{record, record_plain, OutcomeWrite};
pub use replay::{count_bulk, replay, replay_bulk, Replayed};
pub use search::{
    attempts, attempts_per_minute, backlog, counts, get, list, list_within, webhook_rows,
    CountLimits, Counts, ListFilter, MinuteCount, WebhookRows,
};

// What the steps share.

use std::collections::HashSet;

use diesel::sql_types::BigInt;
use diesel::QueryableByName;

/// No attempt holds the row (judged by the database's clock).
const LEASE_FREE: &str = "(l.lease_expires_at IS NULL OR l.lease_expires_at <= now())";

/// The queue a row goes to now: its webhook's current queue while it exists.
const QUEUE_NOW: &str =
    "COALESCE((SELECT w.queue FROM webhooks w WHERE w.id = l.webhook_id), l.queue)";

/// A statement's answer of one count.
#[derive(QueryableByName)]
struct CountRow {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// A statement's answer of row ids.
#[derive(QueryableByName)]
struct IdOnly {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// `ids` without repeats, in their first order.
fn unique(ids: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut seen = HashSet::new();
    ids.filter(|id| seen.insert(*id)).collect()
}

/// Postgres `text` cannot hold NUL: one in a stored string is replaced with
/// U+FFFD, so no message can keep an outcome from being written.
pub(crate) fn pg_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

//! `hookfleet webhook import`: Frappe Webhook documents in, webhooks created
//! or updated under their Frappe names. Each document is mapped
//! ([`hookfleet_core::frappe_import`]) and validated as `webhook add`
//! validates; one that would not run is refused with the reason and the
//! others still import (with `--atomic`, none do).

use std::io::Read;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use hookfleet_core::frappe_import::{self, ImportedSecret, MAX_IMPORT_BYTES};
use hookfleet_core::model::{Webhook, WebhookRow, WebhookSpec};
use hookfleet_core::render::default_sample_doc;
use hookfleet_core::ssrf::NetworkPolicy;
use hookfleet_core::store::webhooks::{self, SecretChange, Upsert};
use hookfleet_core::store::Store;
use hookfleet_core::validate::validate;
use hookfleet_core::StoreError;

use crate::table;

/// The flags of `webhook import`.
#[derive(Args)]
pub struct ImportArgs {
    /// A JSON file of Frappe Webhook documents (one, a list as `bench
    /// export-fixtures` writes it, or the REST API's {"data": …}), or - for
    /// standard input.
    #[arg(value_name = "FILE|-")]
    pub file: String,
    /// Say what would be created, updated or refused; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// All or nothing: if any document is refused, import none.
    #[arg(long)]
    pub atomic: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What happened to one document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    Created,
    Updated,
    Unchanged,
    WouldCreate,
    WouldUpdate,
    /// Valid, but not written: another document was refused under --atomic.
    Skipped,
    Refused,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Updated => "updated",
            Action::Unchanged => "unchanged",
            Action::WouldCreate => "would create",
            Action::WouldUpdate => "would update",
            Action::Skipped => "skipped",
            Action::Refused => "refused",
        }
    }
}

/// One line of the report.
#[derive(Debug, Serialize)]
struct Outcome {
    name: String,
    action: Action,
    /// Why it was refused.
    reason: Option<String>,
    /// What differs from the way Frappe sends it.
    notes: Vec<String>,
}

/// A document ready to write.
struct Plan {
    spec: WebhookSpec,
    change: SecretChange,
    exists: bool,
    /// The stored webhook is this definition already.
    unchanged: bool,
}

fn read_input(file: &str) -> anyhow::Result<String> {
    let mut text = String::new();
    let limit = MAX_IMPORT_BYTES as u64 + 1;
    if file == "-" {
        std::io::stdin()
            .lock()
            .take(limit)
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
    } else {
        std::fs::File::open(file)
            .with_context(|| format!("cannot open {file}"))?
            .take(limit)
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read {file}"))?;
    }
    Ok(text)
}

/// Maps and validates one document against what is stored.
fn plan(
    store: &Store,
    policy: &NetworkPolicy,
    doc: &serde_json::Value,
) -> Result<(Plan, Vec<String>), String> {
    let imported = frappe_import::to_spec(doc)?;
    let mut spec = imported.spec;
    let current: Option<Webhook> = match store.run_sync(|c| webhooks::get(c, &spec.name)) {
        Ok(w) => Some(w),
        Err(StoreError::NotFound(_)) => None,
        Err(e) => return Err(e.to_string()),
    };
    let current_spec = current
        .as_ref()
        .map(|w| w.to_spec().map_err(|e| e.to_string()))
        .transpose()?;
    let mut notes = imported.notes;
    // What Frappe has no field for stays as the operator set it here.
    if let Some(current) = &current_spec {
        spec.max_concurrency = current.max_concurrency;
        spec.rate_limit = current.rate_limit;
        if spec.dynamic_url {
            spec.allowed_hosts = current.allowed_hosts.clone();
        }
        if doc
            .get("max_retries")
            .is_none_or(serde_json::Value::is_null)
        {
            spec.max_retries = current.max_retries;
        }
    }
    if spec.queue != "default" {
        notes.push(format!(
            "its deliveries go to the queue {:?}: a worker must read it (--queues)",
            spec.queue
        ));
    }
    let stored_secret = current_spec.as_ref().and_then(|c| c.secret.clone());
    let change = match imported.secret {
        ImportedSecret::None => {
            spec.secret = None;
            SecretChange::Remove
        }
        ImportedSecret::Given(s) => {
            spec.secret = Some(s.clone());
            match stored_secret {
                Some(old) if old != s => {
                    notes.push(
                        "the secret changed: the new one signs from now on, with no overlap \
                         (as in Frappe)"
                            .into(),
                    );
                    SecretChange::Replace(s)
                }
                Some(_) => SecretChange::Keep,
                None => SecretChange::Set(s),
            }
        }
        ImportedSecret::Masked => match stored_secret {
            Some(kept) => {
                spec.secret = Some(kept);
                SecretChange::Keep
            }
            None => {
                return Err("webhook_secret is masked (*****): Frappe never exports a \
                            password; put the secret in the file and import again"
                    .into())
            }
        },
    };
    validate(&spec, policy, &default_sample_doc(&spec.entity_type)).map_err(|e| e.to_string())?;
    Ok((
        Plan {
            unchanged: current_spec.as_ref() == Some(&spec),
            exists: current.is_some(),
            spec,
            change,
        },
        notes,
    ))
}

impl Plan {
    fn upsert<'a>(&self, row: &'a WebhookRow) -> Upsert<'a> {
        Upsert {
            row,
            secret: self.change.clone(),
            exists: self.exists,
        }
    }

    fn written(&self) -> Action {
        if self.exists {
            Action::Updated
        } else {
            Action::Created
        }
    }
}

/// Writes the plans: each on its own, or (`atomic`) all in one transaction
/// that a failure rolls back whole.
fn write_all(store: &Store, plans: &[&Plan], atomic: bool) -> Vec<Result<Action, String>> {
    let rows: Vec<WebhookRow> = plans.iter().map(|p| WebhookRow::from(&p.spec)).collect();
    if !atomic {
        return plans
            .iter()
            .zip(&rows)
            .map(|(p, row)| {
                store
                    .run_sync(|c| webhooks::upsert(c, &p.upsert(row)))
                    .map(|_| p.written())
                    .map_err(|e| e.to_string())
            })
            .collect();
    }
    let items: Vec<Upsert> = plans
        .iter()
        .zip(&rows)
        .map(|(p, row)| p.upsert(row))
        .collect();
    match store.run_sync(|c| webhooks::upsert_all(c, &items)) {
        Ok(_) => plans.iter().map(|p| Ok(p.written())).collect(),
        Err(e) => {
            let reason = format!("nothing was written (--atomic): {e}");
            plans.iter().map(|_| Err(reason.clone())).collect()
        }
    }
}

pub fn run(store: &Store, policy: &NetworkPolicy, args: ImportArgs) -> anyhow::Result<()> {
    let text = read_input(&args.file)?;
    let docs =
        frappe_import::documents(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.file))?;
    let mut outcomes = Vec::with_capacity(docs.len());
    let mut plans = Vec::with_capacity(docs.len());
    let mut seen = std::collections::HashSet::new();
    for (i, doc) in docs.iter().enumerate() {
        let name = frappe_import::document_name(doc, i);
        // A name given twice in one file would be created, then updated by
        // the second: the later ones are refused, whatever became of the
        // first.
        let planned = if seen.insert(name.clone()) {
            plan(store, policy, doc)
        } else {
            Err("the file holds another document of this name".into())
        };
        match planned {
            Ok((p, notes)) => {
                outcomes.push(Outcome {
                    name,
                    action: Action::Unchanged,
                    reason: None,
                    notes,
                });
                plans.push(Some(p));
            }
            Err(reason) => {
                outcomes.push(Outcome {
                    name,
                    action: Action::Refused,
                    reason: Some(reason),
                    notes: Vec::new(),
                });
                plans.push(None);
            }
        }
    }
    let refused = outcomes
        .iter()
        .filter(|o| o.action == Action::Refused)
        .count();
    let hold_back = args.atomic && refused > 0;
    let mut to_write = Vec::new();
    for (i, (outcome, plan)) in outcomes.iter_mut().zip(&plans).enumerate() {
        let Some(plan) = plan else { continue };
        outcome.action = match (plan.unchanged, hold_back, args.dry_run, plan.exists) {
            (true, ..) => Action::Unchanged,
            (false, true, ..) => Action::Skipped,
            (false, false, true, true) => Action::WouldUpdate,
            (false, false, true, false) => Action::WouldCreate,
            (false, false, false, _) => {
                to_write.push((i, plan));
                continue;
            }
        };
    }
    let (indexes, writes): (Vec<usize>, Vec<&Plan>) = to_write.into_iter().unzip();
    for (i, result) in indexes
        .into_iter()
        .zip(write_all(store, &writes, args.atomic))
    {
        match result {
            Ok(action) => outcomes[i].action = action,
            Err(reason) => {
                outcomes[i].action = Action::Refused;
                outcomes[i].reason = Some(reason);
            }
        }
    }
    report(&outcomes, args.json, hold_back)?;
    let refused = outcomes
        .iter()
        .filter(|o| o.action == Action::Refused)
        .count();
    if refused > 0 {
        anyhow::bail!(
            "{refused} of {} documents refused{}",
            outcomes.len(),
            if hold_back {
                "; nothing imported (--atomic)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

fn report(outcomes: &[Outcome], json: bool, held_back: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(outcomes)?);
        return Ok(());
    }
    for o in outcomes {
        let name = table::clean(&o.name);
        match &o.reason {
            Some(reason) => println!("{:<12} {name}: {}", o.action.as_str(), table::clean(reason)),
            None => println!("{:<12} {name}", o.action.as_str()),
        }
        for note in &o.notes {
            println!("{:<12}   note: {}", "", table::clean(note));
        }
    }
    if held_back {
        println!("nothing was written: --atomic, and a document was refused");
    }
    Ok(())
}

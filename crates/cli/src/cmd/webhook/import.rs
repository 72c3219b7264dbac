//! `hookfleet webhook import`: Frappe Webhook documents in, webhooks created
//! or updated under their Frappe names. Each document is mapped
//! ([`hookfleet_admin::frappe_import`]) and validated as `webhook add`
//! validates; one that would not run is refused with the reason and the
//! others still import (with `--atomic`, none do).

use std::io::Read;

use anyhow::Context;
use clap::Args;
use hookfleet_admin::frappe_import::{self, Outcome, MAX_IMPORT_BYTES};
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::store::Store;

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

pub async fn run(store: &Store, policy: &NetworkPolicy, args: ImportArgs) -> anyhow::Result<()> {
    let text = read_input(&args.file)?;
    let docs =
        frappe_import::documents(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.file))?;
    // At a terminal, how far the checking got (each document's templates
    // are tried in the renderers); nothing when output goes elsewhere.
    let progress = crate::ask::Progress::on_a_terminal();
    let shown = progress.clone();
    let r = frappe_import::import_with_progress(
        store,
        policy,
        docs,
        args.dry_run,
        args.atomic,
        move |done, of| shown.show(|| format!("checked {done} of {of} webhooks")),
    )
    .await;
    progress.done();
    let r = r?;
    report(&r.outcomes, args.json, r.held_back)?;
    let refused = r.refused();
    if refused > 0 {
        anyhow::bail!(
            "{refused} of {} documents refused{}",
            r.outcomes.len(),
            if r.held_back {
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

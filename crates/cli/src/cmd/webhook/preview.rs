//! `hookfleet webhook preview NAME --doc FILE|-`: what the webhook would do
//! with a document, nothing recorded and nothing sent.

use anyhow::Context;
use clap::Args;

use hookfleet_admin::preview::{self, Preview};
use hookfleet_admin::webhooks;
use hookfleet_core::domain::read_document;
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::store::Store;

use crate::table;

#[derive(Args)]
pub struct PreviewArgs {
    /// The webhook's name.
    name: String,
    /// The document, a JSON object: a file, or - for standard input.
    #[arg(long, value_name = "FILE|-")]
    doc: String,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

impl PreviewArgs {
    pub async fn run(self, store: &Store, policy: &NetworkPolicy) -> anyhow::Result<()> {
        let w = webhooks::get(store, &self.name).await?;
        let doc = if self.doc == "-" {
            read_document(std::io::stdin().lock(), "standard input")
        } else {
            let file = std::fs::File::open(&self.doc)
                .with_context(|| format!("cannot open the document file {}", self.doc))?;
            read_document(file, &self.doc)
        }
        .map_err(anyhow::Error::msg)?;
        let preview = preview::render(&w, &doc, policy);
        if self.json {
            println!("{}", serde_json::to_string_pretty(&preview)?);
        } else {
            print_preview(&preview);
        }
        Ok(())
    }
}

fn print_preview(p: &Preview) {
    let condition = match (&p.condition_error, p.meets_condition) {
        (Some(e), _) => format!("error: {e}"),
        (None, true) => "met".into(),
        (None, false) => "not met (no delivery)".into(),
    };
    println!("{:<10} {}", "condition", table::clean(&condition));
    match &p.url {
        Some(url) => println!("{:<10} {} {}", "request", p.method, table::clean(url)),
        None => println!("{:<10} {} (no URL)", "request", p.method),
    }
    for h in &p.headers {
        println!(
            "{:<10} {}: {}",
            "header",
            table::clean(&h.key),
            table::clean(&h.value)
        );
    }
    if let Some(e) = &p.error {
        println!("{:<10} {}", "error", table::clean(e));
    }
    if let Some(body) = &p.body {
        println!("body\n{}", table::clean_lines(body));
    }
}
